"""The three ways out: Web Push (RFC 8030, payload encrypted per RFC 8291 by
http_ece (encryption.encrypt), VAPID per RFC 8292 by py-vapid), mail (aiosmtplib) and ntfy (an HTTP
POST). Each send answers an Outcome: delivered, retry (429, 5xx, no answer), gone (a push service's
404 or 410: the subscription is no more) or failed (anything else; not retried)."""

import json
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Literal
from urllib.parse import parse_qs, unquote, urlsplit

import aiosmtplib

from backend.services.notify.addresses import AddressRefused
from backend.services.notify.encryption import encrypt
from backend.services.notify.keys import PushKeys
from backend.services.notify.outbound import SEND_ERRORS, Outbound

Outcome = Literal["delivered", "retry", "gone", "failed", "refused"]


def _by_status(status: int, *, gone_means_gone: bool) -> Outcome:
    if 200 <= status < 300:
        return "delivered"
    if gone_means_gone and status in (404, 410):
        return "gone"
    if status == 429 or status >= 500:
        return "retry"
    return "failed"  # a 3xx is not followed: the address it names is not checked


class PushSender:
    def __init__(self, *, keys: PushKeys, http: Outbound) -> None:
        self._keys = keys
        self._http = http

    async def send(
        self,
        *,
        endpoint: str,
        p256dh: str,
        auth: str,
        payload: dict[str, object],
        topic: str | None,
        ttl_s: int,
    ) -> tuple[Outcome, int | None]:
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        try:
            body = encrypt(data, p256dh=p256dh, auth=auth)
        except ValueError:  # keys a browser would never send: nothing can be encrypted
            return "failed", None
        headers = {
            "Content-Type": "application/octet-stream",
            "Content-Encoding": "aes128gcm",
            # A TTL of 0 (pywebpush's default) is dropped at once by a push service when the
            # phone is offline. Never 0.
            "TTL": str(max(ttl_s, 60)),
            "Urgency": "high",
            "Authorization": self._keys.authorization(endpoint),
        }
        if topic:
            headers["Topic"] = topic
        try:
            status = await self._http.post(endpoint, content=body, headers=headers)
        except AddressRefused:
            return "refused", None
        except SEND_ERRORS:
            return "retry", None
        return _by_status(status, gone_means_gone=True), status


class NtfySender:
    def __init__(self, *, http: Outbound) -> None:
        self._http = http

    async def send(
        self, *, url: str, body: str, headers: dict[str, str]
    ) -> tuple[Outcome, int | None]:
        try:
            status = await self._http.post(url, content=body.encode(), headers=headers)
        except AddressRefused:
            return "refused", None
        except SEND_ERRORS:
            return "retry", None
        return _by_status(status, gone_means_gone=False), status


@dataclass(frozen=True, slots=True)
class SmtpConfig:
    """SMTP_URL: `smtp://user:pass@host:port` (plain; `?starttls=true` to upgrade),
    `smtps://...` (TLS from the start)."""

    host: str
    port: int
    username: str | None
    password: str | None
    use_tls: bool
    start_tls: bool

    @classmethod
    def from_url(cls, url: str) -> "SmtpConfig":
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
            raise ValueError("SMTP_URL must be smtp://[user:pass@]host[:port] or smtps://...")
        query = parse_qs(parts.query)
        start_tls = query.get("starttls", ["false"])[0].lower() in ("1", "true", "yes")
        use_tls = parts.scheme == "smtps"
        default_port = 465 if use_tls else 587 if start_tls else 25
        return cls(
            host=parts.hostname,
            port=parts.port or default_port,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            use_tls=use_tls,
            start_tls=start_tls,
        )


class Mailer:
    def __init__(self, config: SmtpConfig, *, mail_from: str, timeout_s: float) -> None:
        self._config = config
        self.mail_from = mail_from
        self._timeout_s = timeout_s
        self._tls = ssl.create_default_context()

    async def send(self, message: EmailMessage, *, to: str) -> tuple[Outcome, int | None]:
        config = self._config
        try:
            await aiosmtplib.send(
                message,
                sender=self.mail_from,
                recipients=[to],
                hostname=config.host,
                port=config.port,
                username=config.username,
                password=config.password,
                use_tls=config.use_tls,
                # Explicitly: aiosmtplib would otherwise upgrade whenever offered.
                start_tls=config.start_tls,
                tls_context=self._tls if config.use_tls or config.start_tls else None,
                timeout=self._timeout_s,
            )
        except aiosmtplib.SMTPRecipientsRefused as refused:
            codes = [error.code for error in refused.recipients]
            return ("failed" if all(code >= 500 for code in codes) else "retry"), codes[0]
        except aiosmtplib.SMTPResponseException as error:
            return ("failed" if error.code >= 500 else "retry"), error.code
        except (aiosmtplib.SMTPException, OSError, TimeoutError):
            return "retry", None
        return "delivered", 250
