"""What the app holds for its lifetime, built once at start-up."""

from dataclasses import dataclass, field

import httpx

from backend.auth import TokenVerifier
from backend.db import Database
from backend.services.users import KnownUsers
from backend.settings import Settings


@dataclass
class AppContext:
    settings: Settings
    database: Database
    http: httpx.AsyncClient
    verifier: TokenVerifier
    known_users: KnownUsers = field(default_factory=KnownUsers)

    @classmethod
    def create(cls, settings: Settings) -> "AppContext":
        http = httpx.AsyncClient()
        return cls(
            settings=settings,
            database=Database(settings),
            http=http,
            verifier=TokenVerifier(settings, http),
        )

    async def close(self) -> None:
        await self.http.aclose()
        await self.database.dispose()
