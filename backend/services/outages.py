"""A database step of an accepted turn, retried while the database is briefly away."""

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, retry_if_exception_type

from backend.errors import DatabaseUnavailable

# How long an accepted turn keeps retrying a database step through an outage.
OUTAGE_BUDGET_S = 10.0
T = TypeVar("T")


async def riding_out_outages(
    step: Callable[[], Awaitable[T]], *, budget_s: float = OUTAGE_BUDGET_S
) -> T:
    """Run a database step of an accepted turn, retrying while the database is briefly
    away: the user message is already stored, so giving up would leave the turn half
    answered. Each step is one transaction, so a retry never doubles an effect. The first
    try runs bare; the retry machinery is only set up once it has failed."""
    started = time.monotonic()
    try:
        return await step()
    except DatabaseUnavailable:
        if time.monotonic() - started > budget_s:
            raise
    await asyncio.sleep(_outage_pause(1))
    async for attempt in AsyncRetrying(
        # The first try ran before this loop: its attempt 1 is try 2.
        wait=lambda state: _outage_pause(state.attempt_number + 1),
        stop=lambda state: time.monotonic() - started > budget_s,
        retry=retry_if_exception_type(DatabaseUnavailable),
        reraise=True,
    ):
        with attempt:
            return await step()
    raise AssertionError("unreachable")  # pragma: no cover


def _outage_pause(tries: int) -> float:
    """The pause after `tries` tries of a step that found the database away."""
    return min(0.2 * 2.0**tries, 2.0)
