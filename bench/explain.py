"""The plans of a task-list request, as the service runs it: `python -m bench.explain USER`.

`backend.services.tasks.list_tasks` is called in this process for USER (default
`tasks-many`, the benchmark's member of 20 lists with 10,000 tasks, left in the database by
`python -m bench`) on a connection set up the way the service's are (its role, under
row-level security, with the acting user set), with the default filters of `GET
/api/{user}/tasks?limit=50`. Each statement it sends is then run again under `EXPLAIN
(ANALYZE, BUFFERS, COSTS OFF)` with the same parameters, and the statements and their plans
are printed. `python -m bench` calls it after measuring the task list and keeps the text
in its report.

Same database rule as `python -m bench` (BENCH_DATABASE_URL).
"""

import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.db import APP_ROLE
from backend.models.task import TaskFilters
from backend.services.tasks import list_tasks
from backend.settings import normalize_database_url


async def task_list_plans(url: str, user: str) -> str:
    """The statements of one default task-list page for `user`, each with its plan."""
    engine = create_async_engine(normalize_database_url(url))
    sent: list[tuple[str, Sequence[Any]]] = []

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _capture(_c: Any, _k: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, tuple(parameters or ())))

    try:
        async with AsyncSession(engine) as db, db.begin():
            await db.exec(text(f"SET LOCAL ROLE {APP_ROLE}"))  # type: ignore[call-overload]
            acting = text("SELECT set_config('todo_agent.user_id', :user, true)")
            await db.exec(acting, params={"user": user})  # type: ignore[call-overload]
            sent.clear()
            page = await list_tasks(db=db, user=user, filters=TaskFilters(), tz=ZoneInfo("UTC"))
            statements = list(sent)
            raw = (await (await db.connection()).get_raw_connection()).driver_connection
            parts = [f"-- {user}: {len(page.data)} tasks on the page of {page.count}"]
            for statement, parameters in statements:
                rows = await raw.fetch(  # type: ignore[union-attr]
                    f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {statement}", *parameters
                )
                plan = "\n".join(row[0] for row in rows)
                parts.append(f"{statement.strip()}\n-- parameters: {list(parameters)}\n{plan}")
            await db.rollback()
        return "\n\n".join(parts)
    finally:
        await engine.dispose()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    url = os.environ.get("BENCH_DATABASE_URL")
    if not url:
        print("bench.explain: set BENCH_DATABASE_URL (the database `python -m bench` used)")
        return 2
    print(asyncio.run(task_list_plans(url, args[0] if args else "tasks-many")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
