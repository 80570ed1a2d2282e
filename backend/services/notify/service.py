"""What the app holds for notifications: the key pair, the address guard, the senders and
the delivery loop, built once from the settings."""

import logging

import httpx

from backend.db import Database
from backend.services.notify.actions import ActionSigner
from backend.services.notify.addresses import AddressGuard
from backend.services.notify.dispatcher import NotifyDispatcher
from backend.services.notify.keys import PushKeys, load_push_keys
from backend.services.notify.senders import Mailer, NtfySender, PushSender, SmtpConfig
from backend.settings import ConfigError, Settings
from backend.tls import client_tls

logger = logging.getLogger("todo_agent.notify")


class Notifier:
    def __init__(self, settings: Settings, database: Database) -> None:
        self.settings = settings
        self.keys: PushKeys | None = load_push_keys(settings)
        if self.keys is None:
            logger.warning(
                "VAPID_PRIVATE_KEY is not set: no Web Push, and no Done or Snooze buttons"
                " (docs/notifications.md)"
            )
        self.guard = AddressGuard(
            allowed_hosts=settings.notify_allowed_hosts, https_only=settings.is_production
        )
        self.signer = ActionSigner(self.keys.action_secret) if self.keys else None
        self.mailer: Mailer | None = None
        if settings.smtp_url is not None and settings.smtp_url.get_secret_value():
            try:
                config = SmtpConfig.from_url(settings.smtp_url.get_secret_value())
            except ValueError as error:
                raise ConfigError(str(error)) from error
            self.mailer = Mailer(
                config,
                mail_from=settings.mail_from or "todo-agent@localhost",
                timeout_s=settings.webhook_timeout_s,
            )
        # Requests to push services and ntfy: never a redirect, every address checked.
        self.http = httpx.AsyncClient(
            timeout=settings.webhook_timeout_s,
            follow_redirects=False,
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
            verify=client_tls(),
        )
        push = PushSender(keys=self.keys, guard=self.guard, http=self.http) if self.keys else None
        self.dispatcher = NotifyDispatcher(
            settings,
            database,
            push=push,
            mailer=self.mailer,
            ntfy=NtfySender(guard=self.guard, http=self.http),
            signer=self.signer,
        )

    @property
    def mail_configured(self) -> bool:
        return self.mailer is not None

    async def close(self) -> None:
        await self.http.aclose()
