"""Is the database there, and is its schema the one this code expects?"""

import asyncio
import logging

from backend.db import Database
from backend.migrations import current_revision, head_revision
from backend.models.health import Readiness

logger = logging.getLogger("todo_agent.health")
_PROBE_TIMEOUT_S = 3.0


async def readiness(database: Database) -> Readiness:
    head = head_revision()
    try:
        async with asyncio.timeout(_PROBE_TIMEOUT_S), database.engine.connect() as connection:
            current = await current_revision(connection)
    except Exception as error:  # any failure to answer means "not ready", never a 500
        logger.warning("readiness probe failed", extra={"error": type(error).__name__})
        return Readiness(status="unavailable", database=False, migrations="unknown")
    at_head = current == head
    return Readiness(
        status="ready" if at_head else "unavailable",
        database=True,
        migrations="at head" if at_head else f"at {current}, expected {head}",
    )
