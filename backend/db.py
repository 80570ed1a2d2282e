"""The database engine and the unit of work: one transaction, committed or rolled back."""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
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


def is_database_unavailable(error: BaseException) -> bool:
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return True
    if isinstance(error, _CONNECTIVITY_ERRORS):
        return True
    # asyncpg raises these outside SQLAlchemy's wrapping when a connect fails.
    return type(error).__module__.startswith("asyncpg") and (
        "Connection" in type(error).__name__ or "CannotConnectNow" in type(error).__name__
    )


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
        try:
            async with self._sessions() as session, session.begin():
                yield session
        except DatabaseUnavailable:
            raise
        except Exception as error:
            if is_database_unavailable(error):
                raise DatabaseUnavailable() from error
            raise

    async def dispose(self) -> None:
        await self.engine.dispose()
