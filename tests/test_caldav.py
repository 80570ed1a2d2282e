"""CalDAV over HTTP, as clients send it: app passwords, discovery, items, reports, sync,
permissions and bad input (the real clients drive a real server in test_caldav_clients.py)."""

import base64
from typing import Any

import httpx
import pytest
from lxml import etree  # type: ignore[import-untyped]

from tests.conftest import auth
from tests.factories import make_task

DAV = "DAV:"
C = "urn:ietf:params:xml:ns:caldav"
NS = {"d": DAV, "c": C, "cs": "http://calendarserver.org/ns/"}


async def app_password(
    client: httpx.AsyncClient, user: str, *, read_only: bool = False
) -> dict[str, Any]:
    made = await client.post(
        f"/api/{user}/app-passwords",
        json={"name": "iPhone", "read_only": read_only},
        headers=auth(user),
    )
    assert made.status_code == 201, made.text
    body: dict[str, Any] = made.json()
    return body


def basic(username: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


class Dav:
    """A DAV client over the app, signed in with an app password."""

    def __init__(self, client: httpx.AsyncClient, user: str, password: str) -> None:
        self.client, self.user, self.headers = client, user, basic(user, password)

    async def request(
        self, method: str, path: str, body: str | bytes = b"", **headers: str
    ) -> httpx.Response:
        sent = {**self.headers, **{k.replace("_", "-"): v for k, v in headers.items()}}
        return await self.client.request(method, path, content=body, headers=sent)

    async def propfind(self, path: str, props: str, depth: str = "0") -> etree._Element:
        namespaces = f'xmlns:d="DAV:" xmlns:c="{C}" xmlns:cs="{NS["cs"]}"'
        body = f"<d:propfind {namespaces}><d:prop>{props}</d:prop></d:propfind>"
        response = await self.request("PROPFIND", path, body, Depth=depth)
        assert response.status_code == 207, response.text
        return etree.fromstring(response.content)

    async def report(self, path: str, body: str) -> httpx.Response:
        return await self.request("REPORT", path, body, Depth="1")

    def home(self) -> str:
        return f"/dav/calendars/{self.user}/"


async def dav_for(client: httpx.AsyncClient, user: str, **kwargs: Any) -> Dav:
    made = await app_password(client, user, **kwargs)
    return Dav(client, user, made["password"])


async def lists_of(client: httpx.AsyncClient, user: str) -> list[dict[str, Any]]:
    response = await client.get(f"/api/{user}/lists", headers=auth(user))
    data: list[dict[str, Any]] = response.json()["data"]
    return data


def todo(uid: str, summary: str = "Milk", extra: str = "") -> str:
    return (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\nBEGIN:VTODO\r\n"
        f"UID:{uid}\r\nDTSTAMP:20260101T000000Z\r\nSUMMARY:{summary}\r\n{extra}"
        "END:VTODO\r\nEND:VCALENDAR\r\n"
    )


# -- app passwords -------------------------------------------------------------------------


async def test_an_app_password_is_shown_once_listed_without_it_and_revoked_at_once(
    client: httpx.AsyncClient,
) -> None:
    made = await app_password(client, "ada")
    assert made["username"] == "ada"
    assert made["password"].startswith("tap_")
    assert set(made) >= {"id", "name", "username", "password", "created_at"}
    dav = Dav(client, "ada", made["password"])
    assert (await dav.request("PROPFIND", "/dav/", Depth="0")).status_code == 207
    listed = (await client.get("/api/ada/app-passwords", headers=auth("ada"))).json()["data"]
    assert [p["name"] for p in listed] == ["iPhone"]
    assert "password" not in listed[0]
    assert listed[0]["last_used_at"] is not None
    revoked = await client.delete(f"/api/ada/app-passwords/{made['id']}", headers=auth("ada"))
    assert revoked.status_code == 204
    refused = await dav.request("PROPFIND", "/dav/", Depth="0")
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"].startswith("Basic realm=")
    again = await client.delete(f"/api/ada/app-passwords/{made['id']}", headers=auth("ada"))
    assert again.status_code == 404


async def test_an_app_password_never_works_on_the_api_nor_a_token_on_dav(
    client: httpx.AsyncClient,
) -> None:
    made = await app_password(client, "ada")
    api = await client.get("/api/ada/tasks", headers=basic("ada", made["password"]))
    assert api.status_code == 401
    dav = await client.request("PROPFIND", "/dav/", headers=auth("ada"))
    assert dav.status_code == 401
    assert (await client.request("PROPFIND", "/dav/")).status_code == 401


async def test_wrong_passwords_are_slowed_for_that_user(client: httpx.AsyncClient) -> None:
    made = await app_password(client, "ada")
    wrong = Dav(client, "ada", "tap_wrong")
    statuses = [(await wrong.request("PROPFIND", "/dav/")).status_code for _ in range(5)]
    assert statuses == [401] * 5
    slowed = await wrong.request("PROPFIND", "/dav/")
    assert slowed.status_code == 429
    assert int(slowed.headers["Retry-After"]) >= 1
    # Even the right password waits: the guesser learns nothing meanwhile.
    right = Dav(client, "ada", made["password"])
    assert (await right.request("PROPFIND", "/dav/")).status_code == 429
    # Another user is not held back.
    other = await dav_for(client, "bo")
    assert (await other.request("PROPFIND", "/dav/", Depth="0")).status_code == 207


async def test_a_read_only_password_reads_but_cannot_write(client: httpx.AsyncClient) -> None:
    dav = await dav_for(client, "ada", read_only=True)
    inbox = (await lists_of(client, "ada"))[0]["id"]
    path = f"{dav.home()}{inbox}/milk.ics"
    refused = await dav.request("PUT", path, todo("milk"), Content_Type="text/calendar")
    assert refused.status_code == 403
    assert (await dav.request("PROPFIND", dav.home(), Depth="1")).status_code == 207
    assert (await client.get("/api/ada/tasks", headers=auth("ada"))).json()["count"] == 0


async def test_app_passwords_are_the_users_own(client: httpx.AsyncClient) -> None:
    made = await app_password(client, "ada")
    other = await client.get("/api/bo/app-passwords", headers=auth("bo"))
    assert other.json()["data"] == []
    gone = await client.delete(f"/api/bo/app-passwords/{made['id']}", headers=auth("bo"))
    assert gone.status_code == 404
    # Ada's password does not open Bo's calendars.
    dav = Dav(client, "ada", made["password"])
    assert (await dav.request("PROPFIND", "/dav/calendars/bo/", Depth="1")).status_code == 404
    assert (
        await Dav(client, "bo", made["password"]).request("PROPFIND", "/dav/")
    ).status_code == 401


# -- discovery -----------------------------------------------------------------------------


async def test_discovery_leads_from_the_well_known_url_to_every_readable_list(
    client: httpx.AsyncClient,
) -> None:
    well_known = await client.get("/.well-known/caldav")
    assert well_known.status_code in (301, 302)
    assert well_known.headers["location"] == "/dav/"
    dav = await dav_for(client, "ada")
    root = await dav.propfind("/dav/", "<d:current-user-principal/>")
    principal = root.findtext(".//d:current-user-principal/d:href", namespaces=NS)
    assert principal == "/dav/principals/ada/"
    found = await dav.propfind(principal, "<c:calendar-home-set/>")
    home = found.findtext(".//c:calendar-home-set/d:href", namespaces=NS)
    assert home == dav.home()
    listing = await dav.propfind(
        home,
        "<d:displayname/><d:resourcetype/><c:supported-calendar-component-set/><cs:getctag/>"
        "<d:sync-token/><d:current-user-privilege-set/><d:supported-report-set/>",
        depth="1",
    )
    calendars = [
        r for r in listing.iterfind("d:response", NS)
        if r.find(".//d:resourcetype/c:calendar", NS) is not None
    ]  # fmt: skip
    assert [r.findtext(".//d:displayname", namespaces=NS) for r in calendars] == ["Inbox"]
    inbox = calendars[0]
    assert [c.get("name") for c in inbox.iterfind(".//c:comp", NS)] == ["VTODO"]
    assert inbox.findtext(".//cs:getctag", namespaces=NS)
    assert inbox.findtext(".//d:sync-token", namespaces=NS)
    assert inbox.find(".//d:current-user-privilege-set/d:privilege/d:write", NS) is not None
    reports = {el.tag for el in inbox.iterfind(".//d:supported-report/d:report/*", NS)}
    assert reports == {
        f"{{{C}}}calendar-query",
        f"{{{C}}}calendar-multiget",
        "{DAV:}sync-collection",
    }


async def test_a_shared_list_is_in_every_members_home_read_only_for_a_viewer(
    client: httpx.AsyncClient,
) -> None:
    made = await client.post("/api/ada/lists", json={"name": "Groceries"}, headers=auth("ada"))
    list_id = made.json()["id"]
    await make_task(client, user="ada", title="Milk", list_id=list_id)
    for user, role in (("bo", "editor"), ("cy", "viewer")):
        invite = await client.post(
            f"/api/ada/lists/{list_id}/invitations", json={"role": role}, headers=auth("ada")
        )
        token = invite.json()["token"]
        accepted = await client.post(f"/api/{user}/invitations/{token}/accept", headers=auth(user))
        assert accepted.status_code in (200, 201), accepted.text
    editor, viewer = await dav_for(client, "bo"), await dav_for(client, "cy")
    for dav, writable in ((editor, True), (viewer, False)):
        listing = await dav.propfind(
            dav.home(), "<d:displayname/><d:current-user-privilege-set/>", depth="1"
        )
        names = [
            r.findtext(".//d:displayname", namespaces=NS)
            for r in listing.iterfind("d:response", NS)
        ]
        assert "Groceries" in names
        shared = next(r for r in listing.iterfind("d:response", NS)
                      if r.findtext(".//d:displayname", namespaces=NS) == "Groceries")  # fmt: skip
        can_write = shared.find(".//d:privilege/d:write", NS) is not None
        assert can_write is writable
    path = f"{viewer.home()}{list_id}/"
    items = await viewer.propfind(path, "<d:getetag/>", depth="1")
    hrefs = [h.text for h in items.iterfind(".//d:href", NS)]
    item = next(h for h in hrefs if h != path)
    refused_put = await viewer.request("PUT", f"{path}new.ics", todo("new"))
    assert refused_put.status_code == 403
    assert b"error" in refused_put.content
    assert (await viewer.request("DELETE", item)).status_code == 403
    assert (await viewer.request("GET", item)).status_code == 200
    # The editor writes; the owner sees it through REST.
    mine = f"{editor.home()}{list_id}/eggs.ics"
    created = await editor.request("PUT", mine, todo("eggs", "Eggs"), If_None_Match="*")
    assert created.status_code == 201
    titles = [
        t["title"]
        for t in (await client.get(f"/api/ada/tasks?list={list_id}", headers=auth("ada"))).json()[
            "data"
        ]
    ]
    assert sorted(titles) == ["Eggs", "Milk"]


# -- items ---------------------------------------------------------------------------------


async def test_put_get_and_etags_follow_the_task_wherever_it_changes(
    client: httpx.AsyncClient,
) -> None:
    dav = await dav_for(client, "ada")
    inbox = (await lists_of(client, "ada"))[0]["id"]
    path = f"{dav.home()}{inbox}/abc-123.ics"
    body = todo(
        "abc-123",
        "Call the plumber",
        "DESCRIPTION:About the sink\r\nDUE;VALUE=DATE:20300105\r\nPRIORITY:1\r\n"
        "CATEGORIES:home,calls\r\nX-APPLE-SORT-ORDER:42\r\nLOCATION:Kitchen\r\n"
        "URL:https://example.com/sink\r\n",
    )
    created = await dav.request("PUT", path, body, If_None_Match="*", Content_Type="text/calendar")
    assert created.status_code == 201, created.text
    etag = created.headers["ETag"]
    tasks = (await client.get("/api/ada/tasks", headers=auth("ada"))).json()["data"]
    assert len(tasks) == 1
    task = tasks[0]
    assert (task["title"], task["description"], task["priority"]) == (
        "Call the plumber", "About the sink", "high",
    )  # fmt: skip
    assert sorted(task["tags"]) == ["calls", "home"]
    got = await dav.request("GET", path)
    assert got.status_code == 200
    assert got.headers["ETag"] == etag
    text = got.text
    for line in ("UID:abc-123", "SUMMARY:Call the plumber", "DUE;VALUE=DATE:20300105",
                 "PRIORITY:1", "X-APPLE-SORT-ORDER:42", "LOCATION:Kitchen",
                 "URL:https://example.com/sink", "STATUS:NEEDS-ACTION"):  # fmt: skip
        assert line in text, (line, text)
    # Again with If-None-Match: * is refused, as is a stale If-Match.
    assert (await dav.request("PUT", path, body, If_None_Match="*")).status_code == 412
    assert (await dav.request("PUT", path, body, If_Match='"999"')).status_code == 412
    # A change through REST changes the ETag.
    patched = await client.patch(
        f"/api/ada/tasks/{task['id']}", json={"title": "Call Mario"}, headers=auth("ada")
    )
    assert patched.status_code == 200
    changed = await dav.request("GET", path)
    assert changed.headers["ETag"] != etag
    assert "SUMMARY:Call Mario" in changed.text
    assert (await dav.request("PUT", path, body, If_Match=etag)).status_code == 412
    # Completing from the client completes the task.
    done = changed.text.replace("STATUS:NEEDS-ACTION", "STATUS:COMPLETED")
    completed = await dav.request("PUT", path, done, If_Match=changed.headers["ETag"])
    assert completed.status_code == 204, completed.text
    after = (await client.get(f"/api/ada/tasks/{task['id']}", headers=auth("ada"))).json()
    assert after["completed"] is True
    assert after["title"] == "Call Mario"
    # DELETE honours If-Match and moves the task to the trash.
    assert (await dav.request("DELETE", path, If_Match='"1"')).status_code == 412
    assert (await dav.request("DELETE", path)).status_code == 204
    assert (await dav.request("GET", path)).status_code == 404
    trash = (await client.get("/api/ada/trash", headers=auth("ada"))).json()["data"]
    assert [t["title"] for t in trash] == ["Call Mario"]


async def test_a_task_made_anywhere_is_an_item_with_its_priority(
    client: httpx.AsyncClient,
) -> None:
    task = await make_task(client, user="ada", title="Water plants", priority="low",
                           due_at="2030-03-01T09:30:00Z")  # fmt: skip
    dav = await dav_for(client, "ada")
    got = await dav.request("GET", f"{dav.home()}{task['list_id']}/{task['id']}.ics")
    assert got.status_code == 200
    assert "PRIORITY:9" in got.text
    assert "DUE:20300301T093000Z" in got.text


async def test_a_task_made_without_a_priority_has_none_and_is_sent_without_priority(
    client: httpx.AsyncClient,
) -> None:
    task = await make_task(client, user="ada", title="Unranked")
    assert task["priority"] == "none"
    dav = await dav_for(client, "ada")
    got = await dav.request("GET", f"{dav.home()}{task['list_id']}/{task['id']}.ics")
    assert got.status_code == 200
    assert "PRIORITY" not in got.text


async def priority_after_put(
    client: httpx.AsyncClient, dav: Dav, path: str, uid: str, extra: str, **headers: str
) -> tuple[str, httpx.Response]:
    """What the REST API says the task's priority is after a client PUT it; its ICS."""
    put = await dav.request("PUT", path, todo(uid, uid, extra), **headers)
    assert put.status_code in (201, 204), put.text
    tasks = (await client.get("/api/ada/tasks?q=" + uid, headers=auth("ada"))).json()["data"]
    return tasks[0]["priority"], await dav.request("GET", path)


@pytest.mark.parametrize(
    ("sent", "priority", "sent_back"),
    [
        ("", "none", None),
        ("PRIORITY:0\r\n", "none", None),
        ("PRIORITY:5\r\n", "medium", "PRIORITY:5"),
        ("PRIORITY:2\r\n", "high", "PRIORITY:1"),
        ("PRIORITY:7\r\n", "low", "PRIORITY:9"),
    ],
)
async def test_a_clients_priority_is_read_in_the_contracts_bands(
    client: httpx.AsyncClient, sent: str, priority: str, sent_back: str | None
) -> None:
    dav = await dav_for(client, "ada")
    inbox = (await lists_of(client, "ada"))[0]["id"]
    got, item = await priority_after_put(client, dav, f"{dav.home()}{inbox}/p.ics", "pri", sent)
    assert got == priority
    if sent_back is None:
        assert "PRIORITY" not in item.text
    else:
        assert sent_back in item.text


async def test_a_client_clears_a_priority_with_priority_0_or_none(
    client: httpx.AsyncClient,
) -> None:
    dav = await dav_for(client, "ada")
    inbox = (await lists_of(client, "ada"))[0]["id"]
    path = f"{dav.home()}{inbox}/c.ics"
    got, item = await priority_after_put(client, dav, path, "clear", "PRIORITY:1\r\n")
    assert got == "high"
    for cleared in ("PRIORITY:0\r\n", "", "PRIORITY:3\r\n", ""):
        got, item = await priority_after_put(
            client, dav, path, "clear", cleared, If_Match=item.headers["ETag"]
        )
        assert got == ("high" if cleared == "PRIORITY:3\r\n" else "none")


async def test_a_repeating_task_completed_by_a_client_makes_the_next_one_its_own_item(
    client: httpx.AsyncClient,
) -> None:
    dav = await dav_for(client, "ada")
    inbox = (await lists_of(client, "ada"))[0]["id"]
    path = f"{dav.home()}{inbox}/weekly.ics"
    body = todo("weekly", "Bins out", "DTSTART:20300107T190000Z\r\nDUE:20300107T190000Z\r\n"
                "RRULE:FREQ=WEEKLY\r\n")  # fmt: skip
    assert (await dav.request("PUT", path, body)).status_code == 201
    got = await dav.request("GET", path)
    assert "RRULE:FREQ=WEEKLY" in got.text
    done = got.text.replace("STATUS:NEEDS-ACTION", "STATUS:COMPLETED")
    assert (await dav.request("PUT", path, done, If_Match=got.headers["ETag"])).status_code == 204
    tasks = (await client.get("/api/ada/tasks", headers=auth("ada"))).json()["data"]
    assert sorted((t["completed"], t["due_at"][:10]) for t in tasks) == [
        (False, "2030-01-14"), (True, "2030-01-07"),
    ]  # fmt: skip
    listing = await dav.propfind(f"{dav.home()}{inbox}/", "<d:getetag/>", depth="1")
    assert len(listing.findall("d:response", NS)) == 3  # the collection and two items


async def test_a_step_is_a_vtodo_related_to_its_task(client: httpx.AsyncClient) -> None:
    dav = await dav_for(client, "ada")
    inbox = (await lists_of(client, "ada"))[0]["id"]
    home = f"{dav.home()}{inbox}/"
    assert (await dav.request("PUT", f"{home}trip.ics", todo("trip", "Trip"))).status_code == 201
    step = todo("pack", "Pack", "RELATED-TO;RELTYPE=PARENT:trip\r\n")
    assert (await dav.request("PUT", f"{home}pack.ics", step)).status_code == 201
    tasks = (await client.get("/api/ada/tasks?top_level=true", headers=auth("ada"))).json()
    assert [(t["title"], t["steps_total"]) for t in tasks["data"]] == [("Trip", 1)]
    got = await dav.request("GET", f"{home}pack.ics")
    assert "RELATED-TO;RELTYPE=PARENT:trip" in got.text
    made = await client.post("/api/ada/tasks", json={"title": "Shop", "steps": ["Bread"]},
                             headers=auth("ada"))  # fmt: skip
    bread = made.json()["steps"][0]
    served = await dav.request("GET", f"{home}{bread['id']}.ics")
    assert f"RELATED-TO;RELTYPE=PARENT:{made.json()['id']}" in served.text


# -- reports and sync ----------------------------------------------------------------------


def _hrefs(response: httpx.Response) -> list[str]:
    root = etree.fromstring(response.content)
    return [r.findtext("d:href", namespaces=NS) or "" for r in root.iterfind("d:response", NS)]


async def test_calendar_query_filters_in_the_database(client: httpx.AsyncClient) -> None:
    dav = await dav_for(client, "ada")
    soon = await make_task(client, user="ada", title="Soon", due_at="2030-01-02T10:00:00Z")
    await make_task(client, user="ada", title="Later", due_at="2030-06-01T10:00:00Z")
    done = await make_task(client, user="ada", title="Done")
    await client.patch(f"/api/ada/tasks/{done['id']}/complete", json={"completed": True},
                       headers=auth("ada"))  # fmt: skip
    path = f"{dav.home()}{soon['list_id']}/"

    def query(inner: str) -> str:
        return (
            f'<c:calendar-query xmlns:d="DAV:" xmlns:c="{C}"><d:prop><d:getetag/>'
            '<c:calendar-data/></d:prop><c:filter><c:comp-filter name="VCALENDAR">'
            f'<c:comp-filter name="VTODO">{inner}</c:comp-filter></c:comp-filter></c:filter>'
            "</c:calendar-query>"
        )

    ranged = await dav.report(path, query(
        '<c:prop-filter name="DUE"><c:time-range start="20300101T000000Z" '
        'end="20300201T000000Z"/></c:prop-filter>'))  # fmt: skip
    assert ranged.status_code == 207
    assert [h.rsplit("/", 1)[1] for h in _hrefs(ranged)] == [f"{soon['id']}.ics"]
    open_ = await dav.report(
        path, query('<c:prop-filter name="COMPLETED"><c:is-not-defined/></c:prop-filter>')
    )
    assert len(_hrefs(open_)) == 2
    status = await dav.report(path, query(
        '<c:prop-filter name="STATUS"><c:text-match negate-condition="yes">COMPLETED'
        "</c:text-match></c:prop-filter>"))  # fmt: skip
    assert len(_hrefs(status)) == 2
    everything = await dav.report(path, query(""))
    assert len(_hrefs(everything)) == 3
    events = await dav.report(path, query("").replace('name="VTODO"', 'name="VEVENT"'))
    assert _hrefs(events) == []


async def test_sync_collection_reports_changes_and_deletions_since_a_token(
    client: httpx.AsyncClient,
) -> None:
    dav = await dav_for(client, "ada")
    one = await make_task(client, user="ada", title="One")
    two = await make_task(client, user="ada", title="Two")
    path = f"{dav.home()}{one['list_id']}/"

    def sync(token: str = "") -> str:
        return (
            '<d:sync-collection xmlns:d="DAV:"><d:sync-token>'
            f"{token}</d:sync-token><d:sync-level>1</d:sync-level><d:prop><d:getetag/>"
            "</d:prop></d:sync-collection>"
        )

    first = await dav.report(path, sync())
    assert first.status_code == 207
    token = etree.fromstring(first.content).findtext("d:sync-token", namespaces=NS)
    assert len(_hrefs(first)) == 2
    nothing = await dav.report(path, sync(token))
    assert _hrefs(nothing) == []
    assert etree.fromstring(nothing.content).findtext("d:sync-token", namespaces=NS) == token
    await client.delete(f"/api/ada/tasks/{two['id']}", headers=auth("ada"))
    await client.patch(f"/api/ada/tasks/{one['id']}", json={"title": "Uno"}, headers=auth("ada"))
    changed = await dav.report(path, sync(token))
    root = etree.fromstring(changed.content)
    statuses = {
        r.findtext("d:href", namespaces=NS).rsplit("/", 1)[1]: (
            r.findtext("d:status", namespaces=NS)
            or r.findtext(".//d:propstat/d:status", namespaces=NS)
        )
        for r in root.iterfind("d:response", NS)
    }
    assert "404" in statuses[f"{two['id']}.ics"]
    assert "200" in statuses[f"{one['id']}.ics"]
    # Purged for good: still reported as gone to a client that knew it.
    await client.delete(f"/api/ada/trash/{two['id']}", headers=auth("ada"))
    assert f"{path}{two['id']}.ics" in _hrefs(await dav.report(path, sync(token)))
    unknown = await dav.report(path, sync("urn:todo-agent:sync:nope:1"))
    assert unknown.status_code == 403
    assert b"valid-sync-token" in unknown.content


async def test_calendar_multiget_answers_each_href(client: httpx.AsyncClient) -> None:
    dav = await dav_for(client, "ada")
    one = await make_task(client, user="ada", title="One")
    path = f"{dav.home()}{one['list_id']}/"
    body = (
        f'<c:calendar-multiget xmlns:d="DAV:" xmlns:c="{C}"><d:prop><d:getetag/>'
        f"<c:calendar-data/></d:prop><d:href>{path}{one['id']}.ics</d:href>"
        f"<d:href>{path}missing.ics</d:href></c:calendar-multiget>"
    )
    answer = await dav.report(path, body)
    root = etree.fromstring(answer.content)
    data = root.findtext(".//c:calendar-data", namespaces=NS)
    assert "SUMMARY:One" in data
    assert "404" in (root.findall("d:response", NS)[1].findtext("d:status", namespaces=NS) or "")


# -- collections ---------------------------------------------------------------------------


async def test_mkcalendar_proppatch_and_delete_make_rename_and_trash_a_list(
    client: httpx.AsyncClient,
) -> None:
    dav = await dav_for(client, "ada")
    list_id = "6f1d0a56-6e8e-4a25-9f7b-0d4c6f0b1a11"
    path = f"{dav.home()}{list_id}/"
    body = (
        f'<c:mkcalendar xmlns:d="DAV:" xmlns:c="{C}"><d:set><d:prop><d:displayname>Work'
        '</d:displayname><c:supported-calendar-component-set><c:comp name="VTODO"/>'
        "</c:supported-calendar-component-set></d:prop></d:set></c:mkcalendar>"
    )
    assert (await dav.request("MKCALENDAR", path, body)).status_code == 201
    assert [entry["name"] for entry in await lists_of(client, "ada")] == ["Inbox", "Work"]
    patch = (
        '<d:propertyupdate xmlns:d="DAV:" xmlns:a="http://apple.com/ns/ical/"><d:set><d:prop>'
        "<d:displayname>Office</d:displayname><a:calendar-color>#FF0000</a:calendar-color>"
        "</d:prop></d:set></d:propertyupdate>"
    )
    patched = await dav.request("PROPPATCH", path, patch)
    assert patched.status_code == 207
    assert b"403" not in patched.content
    assert [entry["name"] for entry in await lists_of(client, "ada")] == ["Inbox", "Office"]
    assert (await dav.request("PUT", f"{path}x.ics", todo("x", "Report"))).status_code == 201
    extended = (
        f'<d:mkcol xmlns:d="DAV:" xmlns:c="{C}"><d:set><d:prop><d:resourcetype><d:collection/>'
        "<c:calendar/></d:resourcetype><d:displayname>Home</d:displayname></d:prop></d:set>"
        "</d:mkcol>"
    )
    other = f"{dav.home()}0b7f4d3e-2f55-4c1c-9f8a-6f6d3b2a9c10/"
    assert (await dav.request("MKCOL", other, extended)).status_code == 201
    assert (await dav.request("DELETE", path)).status_code == 204
    assert [entry["name"] for entry in await lists_of(client, "ada")] == ["Inbox", "Home"]
    # A name that is not a UUID names the same list every time.
    named = f"{dav.home()}errands/"
    made = await dav.request("MKCALENDAR", named, body.replace("Work", "Errands"))
    assert made.status_code == 201
    found = await dav.propfind(named, "<d:displayname/>")
    assert found.findtext(".//d:displayname", namespaces=NS) == "Errands"
    assert (await dav.request("PUT", f"{named}e.ics", todo("e", "Post"))).status_code == 201
    assert (await dav.request("MKCALENDAR", named, body)).status_code == 405
    trash = (await client.get("/api/ada/trash", headers=auth("ada"))).json()["data"]
    assert [t["title"] for t in trash] == ["Report"]


# -- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ("not a calendar at all", 400),
        (todo("ev", "Party").replace("VTODO", "VEVENT"), 403),
        (todo("j", "Notes").replace("VTODO", "VJOURNAL"), 403),
        (
            todo("a", "A").replace(
                "END:VCALENDAR", "BEGIN:VTODO\r\nUID:b\r\nSUMMARY:B\r\nEND:VTODO\r\nEND:VCALENDAR"
            ),
            403,
        ),
        (todo("long", "x" * 201), 422),
        (todo("rule", "Bad rule", "DUE:20300101T100000Z\r\nRRULE:FREQ=SECONDLY\r\n"), 422),
    ],
)
async def test_a_bad_ics_is_refused_and_nothing_stored(
    client: httpx.AsyncClient, body: str, status: int
) -> None:
    dav = await dav_for(client, "ada")
    inbox = (await lists_of(client, "ada"))[0]["id"]
    answer = await dav.request("PUT", f"{dav.home()}{inbox}/bad.ics", body)
    assert answer.status_code == status, answer.text
    assert b"<d:error" in answer.content or b":error" in answer.content
    assert (await client.get("/api/ada/tasks", headers=auth("ada"))).json()["count"] == 0


@pytest.mark.parametrize(
    "body",
    [
        "<d:propfind xmlns:d='DAV:'><d:prop>",
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
        "<d:propfind xmlns:d='DAV:'><d:prop><d:displayname>&e;</d:displayname></d:prop>"
        "</d:propfind>",
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]>'
        "<d:propfind xmlns:d='DAV:'><d:prop><d:displayname>&b;</d:displayname></d:prop>"
        "</d:propfind>",
    ],
)
async def test_malformed_or_entity_laden_xml_is_refused(
    client: httpx.AsyncClient, body: str
) -> None:
    dav = await dav_for(client, "ada")
    answer = await dav.request("PROPFIND", dav.home(), body, Depth="1")
    assert answer.status_code == 400
    assert b"root:" not in answer.content


async def test_a_body_over_dav_max_bytes_is_refused(client: httpx.AsyncClient) -> None:
    dav = await dav_for(client, "ada")
    inbox = (await lists_of(client, "ada"))[0]["id"]
    huge = todo("big", "Big", f"DESCRIPTION:{'x' * (1024 * 1024)}\r\n")
    answer = await dav.request("PUT", f"{dav.home()}{inbox}/big.ics", huge)
    assert answer.status_code == 413
    assert (await client.get("/api/ada/tasks", headers=auth("ada"))).json()["count"] == 0


async def test_alarms_and_zones_map_both_ways_and_unknown_alarms_are_kept(
    client: httpx.AsyncClient,
) -> None:
    changed = await client.patch(
        "/api/ada/settings", json={"timezone": "Europe/Berlin"}, headers=auth("ada")
    )
    assert changed.status_code == 200, changed.text
    dav = await dav_for(client, "ada")
    inbox = (await lists_of(client, "ada"))[0]["id"]
    path = f"{dav.home()}{inbox}/dentist.ics"
    body = todo(
        "dentist",
        "Dentist",
        "DUE;TZID=Europe/Berlin:20300610T150000\r\n"
        "BEGIN:VALARM\r\nACTION:DISPLAY\r\nDESCRIPTION:Dentist\r\n"
        "TRIGGER;RELATED=END:-PT1H\r\nEND:VALARM\r\n"
        "BEGIN:VALARM\r\nACTION:EMAIL\r\nSUMMARY:Mail me\r\nDESCRIPTION:Dentist\r\n"
        "ATTENDEE:mailto:ada@example.com\r\nTRIGGER:-P1D\r\nEND:VALARM\r\n",
    )
    assert (await dav.request("PUT", path, body)).status_code == 201
    task = (await client.get("/api/ada/tasks", headers=auth("ada"))).json()["data"][0]
    assert task["due_at"].startswith("2030-06-10T13:00:00")
    assert task["remind_at"].startswith("2030-06-10T12:00:00")
    got = (await dav.request("GET", path)).text
    assert "DUE;TZID=Europe/Berlin:20300610T150000" in got
    assert "BEGIN:VTIMEZONE" in got
    assert "TRIGGER;VALUE=DATE-TIME:20300610T120000Z" in got
    assert "ACTION:EMAIL" in got
    assert "ATTENDEE:mailto:ada@example.com" in got
    # Sent back as served: nothing changes, and the alarms are not doubled.
    etag = (await dav.request("GET", path)).headers["ETag"]
    assert (await dav.request("PUT", path, got, If_Match=etag)).status_code == 204
    again = (await dav.request("GET", path)).text
    assert again.count("BEGIN:VALARM") == 2
    assert again.count("BEGIN:VTIMEZONE") == 1
    after = (await client.get(f"/api/ada/tasks/{task['id']}", headers=auth("ada"))).json()
    assert (after["due_at"], after["remind_at"]) == (task["due_at"], task["remind_at"])


async def test_a_viewer_cannot_rename_and_an_erased_persons_passwords_are_gone(
    client: httpx.AsyncClient,
) -> None:
    made = await client.post("/api/ada/lists", json={"name": "Trip"}, headers=auth("ada"))
    list_id = made.json()["id"]
    invite = await client.post(
        f"/api/ada/lists/{list_id}/invitations", json={"role": "viewer"}, headers=auth("ada")
    )
    token = invite.json()["token"]
    await client.post(f"/api/cy/invitations/{token}/accept", headers=auth("cy"))
    viewer = await dav_for(client, "cy")
    patch = (
        '<d:propertyupdate xmlns:d="DAV:"><d:set><d:prop><d:displayname>Mine</d:displayname>'
        "</d:prop></d:set></d:propertyupdate>"
    )
    answer = await viewer.request("PROPPATCH", f"{viewer.home()}{list_id}/", patch)
    assert answer.status_code == 207
    assert b"403" in answer.content
    assert [entry["name"] for entry in await lists_of(client, "ada")] == ["Inbox", "Trip"]
    # Leaving a shared list from the client: the list stays, for its owner.
    assert (await viewer.request("DELETE", f"{viewer.home()}{list_id}/")).status_code == 204
    assert [entry["name"] for entry in await lists_of(client, "cy")] == ["Inbox"]
    assert [entry["name"] for entry in await lists_of(client, "ada")] == ["Inbox", "Trip"]
    erased = await client.delete("/api/cy", headers=auth("cy"))
    assert erased.status_code in (202, 204), erased.text
    assert (await viewer.request("PROPFIND", "/dav/", Depth="0")).status_code == 401


async def test_a_client_that_ticks_a_repeating_task_by_moving_its_due_completes_it(
    client: httpx.AsyncClient,
) -> None:
    """Tasks.org (through DAVx5) and others tick a repeating task off by moving its DUE to
    the next occurrence; here that completes the occurrence and makes the next one, as
    completing it anywhere does."""
    dav = await dav_for(client, "ada")
    task = await make_task(client, user="ada", title="Bins out",
                           due_at="2030-01-07T19:00:00Z", recurrence="FREQ=WEEKLY")  # fmt: skip
    path = f"{dav.home()}{task['list_id']}/{task['id']}.ics"
    got = await dav.request("GET", path)
    advanced = got.text.replace("20300107T190000Z", "20300114T190000Z")
    answer = await dav.request("PUT", path, advanced, If_Match=got.headers["ETag"])
    assert answer.status_code == 204, answer.text
    tasks = (await client.get("/api/ada/tasks", headers=auth("ada"))).json()["data"]
    assert sorted((t["completed"], t["due_at"][:10]) for t in tasks) == [
        (False, "2030-01-14"), (True, "2030-01-07"),
    ]  # fmt: skip
    # Moving it by anything else is just a move.
    mine = await make_task(client, user="ada", title="Gym",
                           due_at="2030-01-07T07:00:00Z", recurrence="FREQ=WEEKLY")  # fmt: skip
    gym = f"{dav.home()}{mine['list_id']}/{mine['id']}.ics"
    got = await dav.request("GET", gym)
    moved = got.text.replace("20300107T070000Z", "20300109T070000Z")
    assert (await dav.request("PUT", gym, moved, If_Match=got.headers["ETag"])).status_code == 204
    after = (await client.get(f"/api/ada/tasks/{mine['id']}", headers=auth("ada"))).json()
    assert (after["completed"], after["due_at"][:10]) == (False, "2030-01-09")


async def test_a_change_made_anywhere_moves_the_ctag_and_sync_token_at_once(
    client: httpx.AsyncClient,
) -> None:
    dav = await dav_for(client, "ada")
    task = await make_task(client, user="ada", title="Milk")
    path = f"{dav.home()}{task['list_id']}/"

    async def marks() -> tuple[str | None, str | None]:
        found = await dav.propfind(path, "<cs:getctag/><d:sync-token/>")
        return (
            found.findtext(".//cs:getctag", namespaces=NS),
            found.findtext(".//d:sync-token", namespaces=NS),
        )

    before = await marks()
    assert before == await marks()
    await client.patch(f"/api/ada/tasks/{task['id']}/complete", json={"completed": True},
                       headers=auth("ada"))  # fmt: skip
    after = await marks()
    assert after[0] != before[0]
    assert after[1] != before[1]
