"""The database engine and the unit of work: one transaction, committed or rolled back."""

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    async_sessionmaker,
    create_async_engine,
)
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.errors import DatabaseUnavailable
from backend.settings import Settings

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
        if type(seen).__module__.startswith("asyncpg") and (
            "Connection" in type(seen).__name__ or type(seen).__name__ == "InterfaceError"
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
        self.engine: AsyncEngine = create_async_engine(
            settings.database_url,
            pool_size=settings.db_pool_size,
            max_overflow=settings.db_max_overflow,
            pool_timeout=10,
            connect_args={
                "timeout": 5,
                "server_settings": {"application_name": "todo-agent"},
            },
        )
        self._autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        self._sessions = async_sessionmaker(
            self.engine, class_=AsyncSession, expire_on_commit=False, autoflush=False
        )
        if on_statement is not None:
            count = on_statement

            def _count(*_: Any) -> None:
                count()

            event.listen(self.engine.sync_engine, "before_cursor_execute", _count)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """One unit of work: commits when the block succeeds, rolls back when it raises."""
        with _unavailable_as_503():
            async with self._sessions() as session, session.begin():
                yield session

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection]:
        """The same, on a Core connection: for hot paths that need no ORM."""
        with _unavailable_as_503():
            async with self.engine.begin() as connection:
                yield connection

    @asynccontextmanager
    async def autocommit(self) -> AsyncIterator[AsyncConnection]:
        """A connection outside any transaction, for one statement that is atomic by itself:
        it saves the BEGIN and COMMIT round trips."""
        with _unavailable_as_503():
            async with self._autocommit.connect() as connection:
                yield connection

    async def dispose(self) -> None:
        await self.engine.dispose()
