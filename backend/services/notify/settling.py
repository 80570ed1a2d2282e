"""Outcomes written in batches: a send that finished hands its outcome over and frees its
slot at once; one task writes every outcome handed over meanwhile in one statement
(store.settle_many), then the ones that came while it wrote, and so on (a group commit:
nothing waits for a timer, and a lone outcome is written as soon as it comes).

A transaction per outcome cost more than the send itself (four round trips and their
Python), which held the delivery loop to about a hundred pushes a second. Exactly once is
unchanged: an outcome not yet written (the process died, or the database was away) leaves
the row leased, and when the lease runs out the next claim sends it again, as before; a
written 2xx is never sent again."""

import asyncio
import contextlib
import logging
from collections.abc import Callable

from backend.db import Database
from backend.services.notify import store

logger = logging.getLogger("todo_agent.notify")

# How long stopping waits for the last outcomes to be written.
DRAIN_S = 2.0


class Settlements:
    def __init__(self, database: Database, *, on_retry: Callable[[], None]) -> None:
        self._database = database
        self._on_retry = on_retry
        self._pending: list[store.Settled] = []
        self._writer: asyncio.Task[None] | None = None

    def add(self, settled: store.Settled) -> None:
        """Write this outcome with the next batch (a writer starts if none is running)."""
        self._pending.append(settled)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all(), name="notify-settle")

    async def drain(self) -> None:
        """Wait (a little) for the outcomes handed over so far to be written."""
        if self._writer is not None:
            with contextlib.suppress(Exception, TimeoutError):
                async with asyncio.timeout(DRAIN_S):
                    await asyncio.shield(self._writer)

    async def _write_all(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                async with self._database.system() as connection:
                    await store.settle_many(connection, batch)
            except Exception:
                # Left leased: sent again once the lease runs out (as a crash would).
                logger.warning(
                    "notification outcomes not written", exc_info=True, extra={"count": len(batch)}
                )
                continue
            if any(settled.retry_s is not None for settled in batch):
                self._on_retry()  # due again sooner than the loop may sleep: let it look
