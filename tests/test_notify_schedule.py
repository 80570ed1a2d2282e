"""The daily plan and quiet hours in local time: across daylight-saving changes and at a
day's edge (the clock frozen by giving `now`), and the plan sent once a day, late the same
day after an outage, never with nothing due."""

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.services.notify.addresses import AddressGuard, AddressRefused
from backend.services.notify.schedule import at_local, digest_day, next_digest_at, quiet_until
from backend.services.notify.senders import SmtpConfig
from backend.services.notify.service import Notifier
from backend.settings import ConfigError, Settings
from tests.conftest import auth, serving
from tests.push_service import BrowserSubscription, FakePushService
from tests.servers import until

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(year: int, month: int, day: int, hour: int, minute: int) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


# -- local times as instants (pure) ----------------------------------------------------------


def test_the_plan_keeps_its_local_time_across_the_spring_change() -> None:
    # Berlin goes from +01:00 to +02:00 on 29 March 2026.
    saturday = utc(2026, 3, 28, 8, 0)  # 09:00 local
    assert next_digest_at(time(8), BERLIN, saturday) == utc(2026, 3, 29, 6, 0)  # 08:00 CEST
    friday = utc(2026, 3, 27, 6, 0)  # 07:00 local
    assert next_digest_at(time(8), BERLIN, friday) == utc(2026, 3, 27, 7, 0)  # 08:00 CET


def test_the_plan_keeps_its_local_time_across_the_autumn_change() -> None:
    # New York goes from -04:00 to -05:00 on 1 November 2026.
    saturday = utc(2026, 10, 31, 13, 0)  # 09:00 local
    assert next_digest_at(time(8), NEW_YORK, saturday) == utc(2026, 11, 1, 13, 0)
    # 01:30 happens twice that night: the first.
    assert at_local(date(2026, 11, 1), time(1, 30), NEW_YORK) == utc(2026, 11, 1, 5, 30)


def test_a_time_the_clocks_skip_comes_right_after_the_gap() -> None:
    assert at_local(date(2026, 3, 29), time(2, 30), BERLIN) == utc(2026, 3, 29, 1, 30)  # 03:30


def test_a_missed_plan_is_sent_late_the_same_day_and_never_the_next() -> None:
    at = time(23, 59)
    just_before_midnight = datetime(2026, 6, 1, 23, 59, 30, tzinfo=BERLIN)
    assert digest_day(at, BERLIN, just_before_midnight) == date(2026, 6, 1)
    after_midnight = datetime(2026, 6, 2, 0, 0, 30, tzinfo=BERLIN)
    assert digest_day(at, BERLIN, after_midnight) is None  # 1 June's is not sent on 2 June
    assert digest_day(time(0, 0), BERLIN, after_midnight) == date(2026, 6, 2)
    assert next_digest_at(at, BERLIN, after_midnight) == datetime(2026, 6, 2, 23, 59, tzinfo=BERLIN)
    late = datetime(2026, 6, 1, 15, 0, tzinfo=BERLIN)  # down at 08:00, back at 15:00
    assert digest_day(time(8), BERLIN, late) == date(2026, 6, 1)


def test_quiet_hours_over_midnight_end_in_the_morning_local_time() -> None:
    start, end = time(22), time(7)
    evening = datetime(2026, 3, 28, 23, 0, tzinfo=BERLIN)
    # The night the clocks go forward: 07:00 CEST is 05:00 UTC.
    assert quiet_until(start, end, BERLIN, evening) == utc(2026, 3, 29, 5, 0)
    early = datetime(2026, 3, 29, 6, 0, tzinfo=BERLIN)
    assert quiet_until(start, end, BERLIN, early) == utc(2026, 3, 29, 5, 0)
    assert quiet_until(start, end, BERLIN, datetime(2026, 3, 29, 12, 0, tzinfo=BERLIN)) is None
    assert quiet_until(time(13), time(14), BERLIN, datetime(2026, 6, 1, 13, 30, tzinfo=BERLIN))
    assert (
        quiet_until(time(13), time(13), BERLIN, datetime(2026, 6, 1, 13, 0, tzinfo=BERLIN)) is None
    )


# -- the plan, sent --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def push_service() -> Iterator[FakePushService]:
    with FakePushService() as service:
        yield service


@pytest.fixture
async def client(
    make_settings: Callable[..., Settings], engine: AsyncEngine, push_service: FakePushService
) -> AsyncIterator[httpx.AsyncClient]:
    push_service.clear()
    settings = make_settings(notify_allowed_hosts="127.0.0.1", public_base_url="https://t.example")
    async with serving(settings) as client:
        yield client


async def came_due_while_nothing_ran(engine: AsyncEngine, user: str) -> None:
    """As if the service had been down at the plan's time: it is due, and every loop is
    told (as a restart would find it)."""
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "UPDATE notification_settings SET digest_next_at = now() - interval '1 hour'"
                " WHERE user_id = :user"
            ),
            {"user": user},
        )
        await connection.execute(text("SELECT pg_notify('todo_agent_notify', '')"))


async def plan_rows(engine: AsyncEngine, user: str) -> list[date]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            text("SELECT local_date FROM notify_digests WHERE user_id = :user"), {"user": user}
        )
        return [row[0] for row in rows]


async def test_the_daily_plan_is_sent_once_a_day_with_what_is_due_and_overdue(
    client: httpx.AsyncClient, push_service: FakePushService, engine: AsyncEngine
) -> None:
    user = "alice"
    browser = BrowserSubscription(next(push_service.endpoints(1)))
    response = await client.post(
        f"/api/{user}/push/subscriptions", headers=auth(user), json=browser.to_json()
    )
    assert response.status_code == 201
    today = datetime.now(UTC).date()
    for title, due in (("Pay rent", today), ("File taxes", today - timedelta(days=3))):
        response = await client.post(
            f"/api/{user}/tasks", headers=auth(user), json={"title": title, "due_at": str(due)}
        )
        assert response.status_code == 201, response.text
    response = await client.patch(
        f"/api/{user}/notifications",
        headers=auth(user),
        json={"digest": {"at": "00:00", "channels": ["push"]}, "reminders": []},
    )
    assert response.status_code == 200
    await came_due_while_nothing_ran(engine, user)
    path = browser.endpoint.removeprefix(push_service.url)

    async def sent() -> bool:
        return len(push_service.to(path)) >= 1

    await until(sent, timeout_s=10, message="the daily plan was not sent")
    [received] = push_service.to(path)
    plan = browser.decrypt(received.body)
    assert plan["type"] == "digest"
    assert "#1 Pay rent" in plan["body"]
    assert "#2 File taxes (overdue" in plan["body"]
    assert received.headers["topic"] == "daily-plan"
    assert await plan_rows(engine, user) == [today]
    # Due again the same day (a restart, another replica): the day's row says it was sent.
    await came_due_while_nothing_ran(engine, user)
    await asyncio.sleep(1.0)
    assert len(push_service.to(path)) == 1
    assert await plan_rows(engine, user) == [today]


async def test_nothing_is_sent_on_a_day_with_nothing_due(
    client: httpx.AsyncClient, push_service: FakePushService, engine: AsyncEngine
) -> None:
    user = "bob"
    browser = BrowserSubscription(next(push_service.endpoints(1)))
    await client.post(f"/api/{user}/push/subscriptions", headers=auth(user), json=browser.to_json())
    await client.patch(
        f"/api/{user}/notifications", headers=auth(user), json={"digest": {"at": "00:00"}}
    )
    await came_due_while_nothing_ran(engine, user)

    async def looked() -> bool:
        return bool(await plan_rows(engine, user))

    await until(looked, timeout_s=10, message="the day's plan was not considered")
    await asyncio.sleep(0.5)
    assert push_service.received == []
    async with engine.connect() as connection:
        assert await connection.scalar(text("SELECT count(*) FROM notify_deliveries")) == 0


# -- SMTP_URL --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("smtp://127.0.0.1:2525", ("127.0.0.1", 2525, None, None, False, False)),
        (
            "smtp://me%40x.org:p%3Ass@mail.example?starttls=true",
            ("mail.example", 587, "me@x.org", "p:ss", False, True),
        ),
        ("smtps://u:p@mail.example", ("mail.example", 465, "u", "p", True, False)),
        ("smtp://relay", ("relay", 25, None, None, False, False)),
    ],
)
def test_smtp_url_says_where_and_how_mail_goes(
    url: str, expected: tuple[str, int, str | None, str | None, bool, bool]
) -> None:
    config = SmtpConfig.from_url(url)
    assert (
        config.host,
        config.port,
        config.username,
        config.password,
        config.use_tls,
        config.start_tls,
    ) == expected


def test_a_bad_smtp_url_stops_the_start_with_its_reason(
    make_settings: Callable[..., Settings],
) -> None:
    with pytest.raises(ConfigError, match="SMTP_URL"):
        Notifier(make_settings(smtp_url="http://mail.example"), database=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="VAPID_PRIVATE_KEY"):
        Notifier(make_settings(vapid_private_key="not-a-key"), database=None)  # type: ignore[arg-type]


# -- addresses in production -----------------------------------------------------------------


async def test_production_takes_only_https_but_for_hosts_the_operator_allows() -> None:
    guard = AddressGuard(allowed_hosts=["ntfy.lan"], https_only=True)
    with pytest.raises(AddressRefused, match="https"):
        await guard.check("http://ntfy.sh/topic")
    assert guard.check_form("http://ntfy.lan/topic") == ("http", "ntfy.lan", 80)
    assert guard.check_form("https://push.example:8443/x") == ("https", "push.example", 8443)
    with pytest.raises(AddressRefused):
        await guard.check("https://10.0.0.5/x")  # an IP literal on a private network
