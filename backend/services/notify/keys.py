"""The Web Push key pair (VAPID, RFC 8292) and the key that signs notification actions.

The private key comes from VAPID_PRIVATE_KEY (PEM, or the 32-byte key base64url), or in
development from the data dir, made there once (whole or not at all, so that processes
starting together agree). In production without it there is no push, and no action
buttons or links (their signing key is derived from it)."""

import base64
import hashlib
import os
import secrets
import time
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid02  # type: ignore[import-untyped]

from backend.settings import ConfigError, Settings

# A token signed for one push service stays good this long (RFC 8292 allows up to 24 h).
TOKEN_LIFE_S = 12 * 3600


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(value: str) -> bytes:
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


class PushKeys:
    """The VAPID key pair: its public key for the page, Authorization headers for sends."""

    def __init__(self, private_key: ec.EllipticCurvePrivateKey, subject: str) -> None:
        self._vapid = Vapid02(private_key)
        self.subject = subject
        raw = private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        self.public_key = b64url(raw)
        number = private_key.private_numbers().private_value.to_bytes(32, "big")
        self.action_secret = hashlib.sha256(b"todo-agent notification actions\0" + number).digest()
        self._signed: dict[str, tuple[float, str]] = {}

    def authorization(self, endpoint: str) -> str:
        """`vapid t=...,k=...` for the push service of `endpoint` (kept for a while per
        service: signing each send would cost an ECDSA signature per message)."""
        parts = urlsplit(endpoint)
        audience = f"{parts.scheme}://{parts.netloc}"
        now = time.time()
        cached = self._signed.get(audience)
        if cached is not None and cached[0] > now + 3600:
            return cached[1]
        expires = int(now) + TOKEN_LIFE_S
        claims = {"aud": audience, "exp": expires, "sub": self.subject}
        header: str = self._vapid.sign(claims)["Authorization"]
        self._signed[audience] = (expires, header)
        return header


def load_push_keys(settings: Settings) -> PushKeys | None:
    """The configured key pair; in development one made in the data dir; None in production
    without VAPID_PRIVATE_KEY."""
    configured = settings.vapid_private_key
    if configured is not None and configured.get_secret_value().strip():
        key = _parse(configured.get_secret_value().strip())
    elif settings.is_production:
        return None
    else:
        key = _parse(_data_dir_key(settings.development_vapid_key_path))
    return PushKeys(key, subject=_subject(settings))


def _subject(settings: Settings) -> str:
    if settings.vapid_subject:
        return settings.vapid_subject
    base = settings.public_base_url
    if base and base.startswith("https://"):
        return base
    return "mailto:todo-agent@localhost"


def _parse(value: str) -> ec.EllipticCurvePrivateKey:
    try:
        if value.startswith("-----BEGIN"):
            loaded = serialization.load_pem_private_key(value.encode(), password=None)
        else:
            raw = b64url_decode(value)
            if len(raw) == 32:
                loaded = ec.derive_private_key(int.from_bytes(raw, "big"), ec.SECP256R1())
            else:
                loaded = serialization.load_der_private_key(raw, password=None)
    except ValueError as error:
        raise ConfigError(
            "VAPID_PRIVATE_KEY must be a P-256 private key: PEM, or 32 bytes base64url"
        ) from error
    if not isinstance(loaded, ec.EllipticCurvePrivateKey) or loaded.curve.name != "secp256r1":
        raise ConfigError("VAPID_PRIVATE_KEY must be a P-256 (prime256v1) key")
    return loaded


def generate_private_key() -> str:
    """A new VAPID private key, base64url (what VAPID_PRIVATE_KEY takes)."""
    key = ec.generate_private_key(ec.SECP256R1())
    return b64url(key.private_numbers().private_value.to_bytes(32, "big"))


def _data_dir_key(path: Path) -> str:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
        draft.touch(mode=0o600)
        try:
            draft.write_text(generate_private_key())
            os.link(draft, path)
        except FileExistsError:
            pass  # another process made it first: theirs is the one
        finally:
            draft.unlink()
    return path.read_text().strip()
