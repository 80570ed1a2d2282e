"""What the outbox's readers share: a loop run as a task beside the requests, and the alarm
that lets it sleep until the database says there is something to do."""

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import ClassVar

from backend import metrics

logger = logging.getLogger("todo_agent.worker")

# The longest a loop sleeps without asking the database, whatever it was told: a safety net
# for a notification lost while the listening connection was down unnoticed.
LONGEST_SLEEP_S = 60.0
# Due already, yet the round did nothing (another replica holds the rows for a moment):
# look again after this, doubling up to a second, rather than at once.
_STUCK_GAP_S = 0.05
_RETRY_S = (0.5, 1.0, 2.0, 5.0)  # after failed rounds (the database away)


class BackgroundWorker:
    """`start` runs `_run` as a task of its own, `stop` cancels it and waits. The statements
    it sends are not counted as the cost of requests and turns."""

    name: ClassVar[str]
    _runner: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._runner = asyncio.create_task(self._uncounted(), name=self.name)

    async def stop(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner

    async def _uncounted(self) -> None:
        metrics.not_counting_statements()
        await self._run()

    async def _run(self) -> None:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Next:
    """What a round learnt: when the next work is due (the database's clock, seconds since
    the epoch; None: nothing is waiting), the database's clock as it answered, and whether
    the round did anything (False with work due already: someone else holds it)."""

    due: float | None
    now: float
    worked: bool = True

    @classmethod
    def read(cls, row: tuple[float | None, float], *, worked: bool = True) -> "Next":
        """From a row of `EXTRACT(EPOCH FROM min(...))`, `EXTRACT(EPOCH FROM clock_timestamp())`."""
        due, now = row
        return cls(due=None if due is None else float(due), now=float(now), worked=worked)


class Alarm:
    """When a loop looks next: at the time the database gave (translated to this process's
    clock with the offset seen when it answered), or sooner when told of something due
    earlier (`expect`, e.g. by a notification), or at once (`wake`); never later than
    `longest_s`, never sooner than `shortest_s` after the last round."""

    def __init__(self, *, longest_s: float = LONGEST_SLEEP_S, shortest_s: float = 0.0) -> None:
        self.longest_s = longest_s
        self.shortest_s = shortest_s
        self._due: float | None = None  # the database's clock
        self._offset = 0.0  # the database's clock minus time.time()
        self._heard: float | None = None  # expected since the last round began
        self._look = True  # the first round runs at once
        self._changed = asyncio.Event()
        self._stuck = 0

    def database_time(self) -> float:
        """The database's clock now, as the last round saw it (seconds since the epoch)."""
        return time.time() + self._offset

    def wake(self, _payload: object = None) -> None:
        """Look now (something may be due that no time foretold)."""
        self._look = True
        self._changed.set()

    def expect(self, due: float) -> None:
        """Something is due at `due` (the database's clock): look then, if sooner than
        planned. Kept over the round in progress, whose answer may predate it."""
        self._heard = due if self._heard is None else min(self._heard, due)
        if self._due is None or due < self._due:
            self._due = due
            self._changed.set()

    def heard(self, payload: str) -> None:
        """`expect` from a notification's payload (seconds since the epoch)."""
        try:
            self.expect(float(payload))
        except ValueError:
            self.wake()

    def begin(self) -> None:
        """A round begins: what it reads covers what was expected or asked so far."""
        self._look = False
        self._heard = None

    def plan(self, found: Next) -> None:
        """The round's answer: sleep until then (or what was heard meanwhile, if sooner)."""
        self._offset = found.now - time.time()
        due = found.due
        if self._heard is not None:
            due = self._heard if due is None else min(due, self._heard)
        self._due = due
        stuck = due is not None and due <= found.now and not found.worked
        self._stuck = self._stuck + 1 if stuck else 0

    def failed(self, failures: int) -> None:
        """The round failed (the database away): look again soon, then less soon."""
        self._due = time.time() + self._offset + _RETRY_S[min(failures, len(_RETRY_S)) - 1]

    async def sleep(self) -> None:
        """Until the next look is due."""
        began = time.monotonic()
        shortest = self.shortest_s
        if self._stuck:
            shortest = max(shortest, min(1.0, _STUCK_GAP_S * 2 ** (self._stuck - 1)))
        while True:
            now = time.monotonic()
            until = began + self.longest_s
            if self._look:
                until = now
            elif self._due is not None:
                until = min(until, now + self._due - self._offset - time.time())
            until = max(until, began + shortest)
            if until <= now:
                return
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=until - now)


class WakingWorker(BackgroundWorker):
    """A loop of rounds: each does what is due and says when the next is (`_round`); between
    them it sleeps on its alarm, which notifications move earlier. An idle one asks the
    database once per `longest_s`."""

    alarm: Alarm

    async def _round(self) -> Next:
        raise NotImplementedError

    async def _run(self) -> None:
        failures = 0
        while True:
            self.alarm.begin()
            try:
                found = await self._round()
            except Exception:
                failures += 1
                logger.warning("%s round failed; trying again", self.name, exc_info=True)
                self.alarm.failed(failures)
            else:
                failures = 0
                self.alarm.plan(found)
            await self.alarm.sleep()
