"""Is the database there, and is its schema the one this code expects?"""

import asyncio
import logging

from sqlalchemy.exc import ProgrammingError

from backend.db import Database
from backend.migrations import current_revision, head_revision
from backend.models.health import Readiness

logger = logging.getLogger("todo_agent.health")
_PROBE_TIMEOUT_S = 3.0


async def serving_readiness(database: Database, *, draining: bool) -> Readiness:
    """Whether to send this process requests: not while it drains (SIGTERM), whatever the
    database says."""
    report = await readiness(database)
    return report.model_copy(update={"status": "draining"}) if draining else report


async def readiness(database: Database) -> Readiness:
    head = head_revision()
    try:
        async with asyncio.timeout(_PROBE_TIMEOUT_S), database.engine.connect() as connection:
            try:
                current = await current_revision(connection)
            except ProgrammingError:  # no alembic_version table yet
                return Readiness(status="unavailable", database=True, migrations="not applied")
    except Exception as error:  # any failure to answer means "not ready", never a 500
        logger.warning("readiness probe failed: %s", type(error).__name__)
        return Readiness(status="unavailable", database=False, migrations="unknown")
    if current == head:
        return Readiness(status="ready", database=True, migrations="at head")
    return Readiness(
        status="unavailable", database=True, migrations=f"at {current}, expected {head}"
    )
