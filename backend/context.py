"""What the app holds for its lifetime, built once at start-up."""

import logging
from dataclasses import dataclass, field

import httpx

from backend import metrics
from backend.auth import TokenVerifier
from backend.db import Database
from backend.services.agent import OpenAIAgentService
from backend.services.calendar import FeedLimiter
from backend.services.embeddings import Embeddings
from backend.services.notify.dispatcher import CHANNEL as NOTIFY_CHANNEL
from backend.services.notify.service import Notifier
from backend.services.outbox.hub import EventHub
from backend.services.outbox.reminders import CHANNEL as reminder_channel
from backend.services.outbox.reminders import ReminderClock
from backend.services.outbox.upkeep import Upkeep
from backend.services.outbox.vectors import PassageVectors, vectors_present
from backend.services.outbox.webhooks import WebhookDispatcher
from backend.services.outbox.worker import BackgroundWorker
from backend.services.sweeper import CHANNEL as lease_channel
from backend.services.sweeper import TurnSweeper
from backend.services.turn_streams import TurnStreams
from backend.services.users import KnownUsers
from backend.settings import Settings
from backend.tls import client_tls

logger = logging.getLogger("todo_agent.vectors")


@dataclass
class AppContext:
    settings: Settings
    database: Database
    http: httpx.AsyncClient
    verifier: TokenVerifier
    agent: OpenAIAgentService
    events: EventHub
    reminders: ReminderClock
    upkeep: Upkeep
    sweeper: TurnSweeper
    turn_streams: TurnStreams
    notify: Notifier
    webhooks: WebhookDispatcher | None = None
    # The embeddings model (EMBEDDINGS_MODEL); `semantic` is it once the database is known
    # to hold vectors (pgvector): what search asks for a query's vector.
    embeddings: Embeddings | None = None
    semantic: Embeddings | None = None
    vectors: PassageVectors | None = None
    known_users: KnownUsers = field(default_factory=KnownUsers)
    feed_limiter: FeedLimiter = field(default_factory=FeedLimiter)

    @classmethod
    def create(cls, settings: Settings) -> "AppContext":
        http = httpx.AsyncClient(verify=client_tls())
        database = Database(settings, on_statement=metrics.count_statement)
        events = EventHub(settings, database)
        turn_streams = TurnStreams(database, events)
        known_users = KnownUsers()
        events.on_forget(known_users.discard)
        webhooks = None
        if settings.webhooks_enabled:
            webhooks = WebhookDispatcher(settings, database, source=events.source)
            events.on_notify(webhooks.wake)
        agent = OpenAIAgentService.from_settings(settings, database, turn_streams)
        reminders = ReminderClock(settings, database)
        sweeper = TurnSweeper(settings, database, agent.replica, events)
        turn_streams.on_open(sweeper.lease_taken)
        # They sleep until the database says: a time they read, a notification, a reconnect.
        events.on_channel(reminder_channel, reminders.alarm.heard)
        events.on_channel(lease_channel, sweeper.alarm.heard)
        for worker in (reminders, sweeper, *([webhooks] if webhooks else [])):
            events.on_listening(worker.alarm.wake)
        notify = Notifier(settings, database)
        events.on_channel(NOTIFY_CHANNEL, notify.dispatcher.wake)
        return cls(
            settings=settings,
            database=database,
            http=http,
            verifier=TokenVerifier(settings, http),
            agent=agent,
            events=events,
            reminders=reminders,
            upkeep=Upkeep(settings, database),
            sweeper=sweeper,
            turn_streams=turn_streams,
            notify=notify,
            webhooks=webhooks,
            embeddings=Embeddings(settings) if settings.embeddings_model else None,
            known_users=known_users,
        )

    def _background(self) -> list[BackgroundWorker]:
        """What runs beside the requests: the outbox's readers, and the turn sweeper."""
        return [
            self.events,
            self.reminders,
            self.upkeep,
            self.sweeper,
            self.notify.dispatcher,
            *([self.webhooks] if self.webhooks else []),
            *([self.vectors] if self.vectors else []),
        ]

    async def start(self) -> None:
        if self.embeddings is not None:
            await self._start_semantic(self.embeddings)
        for worker in self._background():
            await worker.start()

    async def _start_semantic(self, embeddings: Embeddings) -> None:
        """Search by meaning where the database can hold vectors; else say so, once."""
        async with self.database.system() as connection:
            present = await vectors_present(connection)
        if not present:
            logger.warning(
                "EMBEDDINGS_MODEL is set but the database has no pgvector: documents are"
                " searched by words only (docs/documents.md: pgvector on a PostgreSQL server)",
                extra={"model": embeddings.model},
            )
            return
        self.semantic = self.agent.semantic = embeddings
        self.vectors = PassageVectors(self.settings, self.database, embeddings)
        self.events.on_notify(self.vectors.wake)
        self.events.on_listening(self.vectors.alarm.wake)

    @property
    def draining(self) -> bool:
        return self.agent.replica.draining

    async def drain(self) -> None:
        """Go away without cutting anything (SIGTERM): refuse new turns at once (and
        `/ready` answers 503), take no other replica's turns over, let the turns in flight
        finish within SHUTDOWN_GRACE_S and hand the rest over, then end the event streams
        so their clients move on."""
        self.agent.replica.refuse_turns()
        # Stopped before the hand-over too, or it could take its own turns back.
        await self.sweeper.stop()
        await self.agent.replica.drain(self.settings.shutdown_grace_s)
        self.events.end_streams()

    async def close(self) -> None:
        for worker in self._background():
            await worker.stop()
        await self.agent.replica.drain(self.settings.shutdown_grace_s)
        await self.agent.close()
        await self.notify.close()
        if self.embeddings is not None:
            await self.embeddings.close()
        await self.http.aclose()
        await self.database.dispose()
