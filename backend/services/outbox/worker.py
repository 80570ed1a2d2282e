"""What the outbox's readers share: a loop run as a task beside the requests."""

import asyncio
import contextlib
from typing import ClassVar

from backend import metrics


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
