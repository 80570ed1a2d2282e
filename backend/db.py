"""The database engine and the unit of work: one transaction, committed or rolled back.

A transaction on people's data becomes `todo_agent_app`, a role that row-level security
holds (migration 0007), whatever role DATABASE_URL logs in as, and names the user it acts
for, both in its first statement (`transaction(as_user=...)`): settings local to the
transaction, which the policies read. Background work runs as `todo_agent_worker`
(`system()`), set the same way. So a connection carries nothing from one transaction to the
next, and a pooler in transaction mode (PgBouncer), which hands each transaction whichever
server connection is free, changes nothing (docs/operations.md, "A pooler in between")."""

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import orjson
from sqlalchemy import TextClause, event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.pool import QueuePool
from sqlalchemy.util import greenlet_spawn
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.errors import DatabaseUnavailable
from backend.settings import Settings

APP_ROLE = "todo_agent_app"
WORKER_ROLE = "todo_agent_worker"
_ACT_AS = text(
    f"SELECT set_config('role', '{APP_ROLE}', true), set_config('todo_agent.user_id', :user, true)"
)
_AS_WORKER = text(f"SELECT set_config('role', '{WORKER_ROLE}', true)")
_UTC = text("SELECT set_config('TimeZone', 'UTC', true)")

# Errors that mean "the database is not there right now", as opposed to a bad query.
_CONNECTIVITY_ERRORS: tuple[type[BaseException], ...] = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.TimeoutError,  # the pool had no connection to give in time
    OSError,  # refused, reset, timed out, or a Unix socket that is gone
)


# SQLSTATEs that mean the server is going, gone or full, not that the query was wrong.
_UNAVAILABLE_SQLSTATES = ("08", "57P01", "57P02", "57P03", "53300")


def is_database_unavailable(error: BaseException) -> bool:
    """Whether `error` (or what caused it) says the database is unreachable right now."""
    seen: BaseException | None = error
    for _ in range(8):  # follow the wrapping chain: SQLAlchemy -> adapter -> asyncpg
        if seen is None:
            return False
        if isinstance(seen, sa_exc.DBAPIError) and seen.connection_invalidated:
            return True
        if isinstance(seen, _CONNECTIVITY_ERRORS):
            return True
        sqlstate = getattr(seen, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate.startswith(_UNAVAILABLE_SQLSTATES):
            return True
        # asyncpg's own: a lost or closed connection, and a connection whose protocol was
        # not idle when a statement began (InternalClientError): the server pushed its
        # "terminating connection" onto the idle connection as it shut down.
        if type(seen).__module__.startswith("asyncpg") and (
            "Connection" in type(seen).__name__
            or type(seen).__name__ in ("InterfaceError", "InternalClientError")
        ):
            return True
        seen = getattr(seen, "orig", None) or seen.__cause__
    return False


@contextmanager
def _unavailable_as_503() -> Iterator[None]:
    try:
        yield
    except DatabaseUnavailable:
        raise
    except Exception as error:
        if is_database_unavailable(error):
            raise DatabaseUnavailable() from error
        raise


class Statement:
    """A hand-written statement that can also run on the bare asyncpg connection: `text`
    for SQLAlchemy, `sql` and the order of its parameters for asyncpg, as SQLAlchemy's own
    asyncpg dialect compiles it (so both send the very same SQL). Untyped parameters only:
    the bare path has no SQLAlchemy type processing."""

    __slots__ = ("names", "sql", "text")

    def __init__(self, text: TextClause) -> None:
        compiled = text.compile(dialect=_ASYNCPG)
        self.text = text
        self.sql = compiled.string
        self.names = tuple(compiled.positiontup or ())


_ASYNCPG = PGDialect_asyncpg()  # type: ignore[no-untyped-call]


class RawConnection:
    """A pooled connection's own asyncpg connection, outside any transaction. asyncpg
    prepares each statement once per connection and keeps it (behind a pooler it parses it
    again each time, see `Database`); SQLAlchemy's execution path (events, cursor adaptation,
    result objects) costs more CPU per statement than the database spends answering the
    turn's two. Each statement is counted as SQLAlchemy's are.

    No transaction sets a role here: the statements of this path are database functions that
    set their own (`SET role` on the function, migration 0011), so they run as the policies'
    role whatever role the connection logged in as."""

    __slots__ = ("_connection", "_count", "broken_by")

    def __init__(self, connection: Any, count: Callable[[], None]) -> None:
        self._connection = connection
        self._count = count
        # What left the connection unusable: the database going away, or a statement
        # interrupted midway (cancelled), which leaves its protocol state unknown. An error
        # the server answered with (a PostgresError) leaves it as good as before.
        self.broken_by: BaseException | None = None

    async def fetchrow(self, statement: Statement, params: Mapping[str, Any]) -> Any:
        """The first row (an asyncpg Record: `row["name"]`), or None."""
        self._count()
        try:
            return await self._connection.fetchrow(
                statement.sql, *[params[name] for name in statement.names]
            )
        except BaseException as error:
            if is_database_unavailable(error) or not isinstance(error, asyncpg.PostgresError):
                self.broken_by = error
            raise


async def first_row(
    db: AsyncConnection | RawConnection, statement: Statement, params: Mapping[str, Any]
) -> Any:
    """The statement's first row, or None, on either kind of connection; read its columns
    by name (`row["name"]`)."""
    if isinstance(db, RawConnection):
        return await db.fetchrow(statement, params)
    return (await db.execute(statement.text, params)).mappings().first()


class Database:
    """Owns the engine; hands out short transactions."""

    def __init__(
        self,
        settings: Settings,
        *,
        on_statement: Callable[[], None] | None = None,
    ) -> None:
        if not settings.database_url:
            raise RuntimeError("Database needs settings.database_url")
        connect_args: dict[str, Any] = {
            "timeout": 5,
            "server_settings": {"application_name": "todo-agent"},
        }
        if settings.behind_pooler:
            # The pooler hands each transaction whichever server connection is free (and a
            # statement outside one, each of its Syncs): a statement prepared on one is
            # missing on the next, and another client's of the same name may be there.
            # So no statement is kept: asyncpg (0.29 on) uses the unnamed one and parses it
            # again in the very message that binds and runs it, and SQLAlchemy caches none.
            # Directly, both caches save a round trip per statement (docs/operations.md).
            connect_args |= {"statement_cache_size": 0, "prepared_statement_cache_size": 0}
        self.engine: AsyncEngine = create_async_engine(
            settings.database_url,
            pool_size=settings.db_pool_size,
            max_overflow=settings.db_max_overflow,
            pool_timeout=10,
            connect_args=connect_args,
            json_deserializer=_json_loads,
        )
        self._sessions = async_sessionmaker(
            self.engine, class_=AsyncSession, expire_on_commit=False, autoflush=False
        )
        self._count: Callable[[], None] = on_statement or _uncounted
        # Pooled connections the bare path keeps checked out between its statements (see
        # `raw`), with the invalidation count when each was checked out.
        self._kept: list[tuple[int, Any]] = []
        pool = self.engine.sync_engine.pool
        self._pool = pool if isinstance(pool, QueuePool) else None
        self._keep = settings.db_pool_size // 10 if self._pool is not None else 0
        self._invalidations = 0

        def _invalidated(*_: Any) -> None:
            self._invalidations += 1

        event.listen(self.engine.sync_engine, "invalidate", _invalidated)
        if on_statement is not None:
            count = on_statement

            def _count(*_: Any) -> None:
                count()

            event.listen(self.engine.sync_engine, "before_cursor_execute", _count)

    @asynccontextmanager
    async def transaction(self, *, as_user: str) -> AsyncIterator[AsyncSession]:
        """One unit of work acting for `as_user`: commits when the block succeeds, rolls
        back when it raises."""
        with _unavailable_as_503():
            async with self._sessions() as session, session.begin():
                await (await session.connection()).execute(_ACT_AS, {"user": as_user})
                yield session

    @asynccontextmanager
    async def connection(self, *, as_user: str) -> AsyncIterator[AsyncConnection]:
        """The same, on a Core connection: for hot paths that need no ORM."""
        with _unavailable_as_503():
            async with self.engine.begin() as connection:
                await connection.execute(_ACT_AS, {"user": as_user})
                yield connection

    @asynccontextmanager
    async def snapshot(self, *, as_user: str) -> AsyncIterator[AsyncConnection]:
        """A read-only transaction acting for `as_user` that sees one moment throughout
        (REPEATABLE READ), however many statements it runs and however long they stream:
        for reading a whole account (the export). Timestamps are written in UTC."""
        with _unavailable_as_503():
            async with self.engine.connect() as connection:
                await connection.execution_options(
                    isolation_level="REPEATABLE READ", postgresql_readonly=True
                )
                async with connection.begin():
                    await connection.execute(_ACT_AS, {"user": as_user})
                    await connection.execute(_UTC)
                    yield connection

    @asynccontextmanager
    async def system(self) -> AsyncIterator[AsyncConnection]:
        """A transaction of background work, as the worker role: it sees the tables it
        tends (reminders, the outbox, retention), and no one's sessions or messages."""
        with _unavailable_as_503():
            async with self.engine.begin() as connection:
                await connection.execute(_AS_WORKER)
                yield connection

    @asynccontextmanager
    async def raw(self) -> AsyncIterator[RawConnection]:
        """A connection of the same pool outside any transaction, bare (see RawConnection):
        for the hot path's statements that are atomic by themselves.

        A checkout and return through SQLAlchemy's pool (each through a greenlet) cost about
        as much CPU as the statement, so a tenth of the pool (none of a pool under ten)
        stays checked out for this path between statements and is handed out again
        directly, as long as the pool has others to give. Once any connection
        of the engine has been invalidated (a disconnect seen here or on any other path),
        the ones kept from before go back to the pool, which replaces those opened before
        the disconnect, as it does for its own."""
        with _unavailable_as_503():
            pooled, invalidations = None, self._invalidations
            while self._kept:
                kept_at, kept = self._kept.pop()
                if kept_at == invalidations:
                    pooled = kept
                    break
                await greenlet_spawn(kept.close)
            if pooled is None:
                pooled = await self.engine.raw_connection()
            connection = RawConnection(pooled.driver_connection, self._count)
            try:
                yield connection
            finally:
                if (broken_by := connection.broken_by) is not None:
                    if is_database_unavailable(broken_by):
                        # What SQLAlchemy does on a disconnect: this connection is dropped,
                        # and every other one opened before it is replaced at its next
                        # checkout.
                        pool = self.engine.sync_engine.pool
                        await greenlet_spawn(pool._invalidate, pooled, broken_by)
                    else:
                        await greenlet_spawn(pooled.invalidate, broken_by)
                if broken_by is None and self._keeps(invalidations):
                    self._kept.append((invalidations, pooled))
                else:
                    await greenlet_spawn(pooled.close)  # back to the pool

    def _keeps(self, invalidations: int) -> bool:
        """Whether a connection checked out at `invalidations` stays with the bare path: not
        if any was invalidated since, nor when the path keeps enough already, nor when the
        pool has none left to give (someone may be waiting for one)."""
        return (
            invalidations == self._invalidations
            and len(self._kept) < self._keep
            and self._pool is not None
            and self._pool.checkedout() < self._pool.size()
        )

    async def dispose(self) -> None:
        kept, self._kept = self._kept, []
        for _, pooled in kept:
            await greenlet_spawn(pooled.close)
        await self.engine.dispose()


def _uncounted() -> None:
    pass


def _json_loads(value: str | bytes) -> Any:
    """json and jsonb columns as Python values, by orjson: a turn reads its whole history
    as one json value. (Unlike the standard library, orjson reads an integer beyond 64 bits
    as a float; the service stores none, and a model's tool-call arguments holding one
    would be shown to it again rounded.)"""
    return orjson.loads(value)
