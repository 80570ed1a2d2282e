"""What the app holds for its lifetime, built once at start-up."""

from dataclasses import dataclass, field

import httpx

from backend import metrics
from backend.auth import TokenVerifier
from backend.db import Database
from backend.services.agent import OpenAIAgentService
from backend.services.ui_stream import UIStreams
from backend.services.users import KnownUsers
from backend.settings import Settings


@dataclass
class AppContext:
    settings: Settings
    database: Database
    http: httpx.AsyncClient
    verifier: TokenVerifier
    agent: OpenAIAgentService
    known_users: KnownUsers = field(default_factory=KnownUsers)
    ui_streams: UIStreams = field(default_factory=UIStreams)

    @classmethod
    def create(cls, settings: Settings) -> "AppContext":
        http = httpx.AsyncClient()
        database = Database(settings, on_statement=metrics.DB_STATEMENTS.inc)
        return cls(
            settings=settings,
            database=database,
            http=http,
            verifier=TokenVerifier(settings, http),
            agent=OpenAIAgentService.from_settings(settings, database),
        )

    async def close(self) -> None:
        await self.agent.drain(self.settings.shutdown_grace_s)
        await self.agent.close()
        await self.http.aclose()
        await self.database.dispose()
