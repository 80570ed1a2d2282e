"""Development sign-in: a token for a name, signed with the secret this dev server made.

The web page (`POST /dev/token`) and `todo-agent chat --user NAME` both use it, so the same
name is the same user in either; and a name that is already a plain id (`alice`) is that id,
the user `todo-agent token alice` signs in as."""

import hashlib
import re
from dataclasses import dataclass

from backend.auth import create_token
from backend.settings import Settings

DEV_TOKEN_TTL_S = 12 * 3600
_NOT_SLUG = re.compile(r"[^a-z0-9]+")


def dev_user_id(name: str) -> str:
    """A stable, URL-safe user id for a name: "alice" -> "alice", "Ada Lovelace" ->
    "ada-lovelace"."""
    slug = _NOT_SLUG.sub("-", name.strip().casefold()).strip("-")[:64]
    if not slug:  # a name with no ASCII letters or digits still gets an id of its own
        slug = hashlib.sha256(name.strip().encode()).hexdigest()[:16]
    return slug


@dataclass(frozen=True, slots=True)
class DevToken:
    token: str
    user_id: str
    name: str
    expires_in: int


def mint_dev_token(*, settings: Settings, name: str, ttl_s: int = DEV_TOKEN_TTL_S) -> DevToken:
    """A token for `name` that this service accepts (its secret, issuer and audience)."""
    assert settings.jwt_secret is not None, "dev sign-in needs the development secret"
    name = name.strip()
    user_id = dev_user_id(name)
    token = create_token(
        secret=settings.jwt_secret.get_secret_value(),
        user_id=user_id,
        ttl_s=ttl_s,
        name=name,
        issuer=settings.jwt_issuer,
        audience=settings.jwt_audience,
    )
    return DevToken(token=token, user_id=user_id, name=name, expires_in=ttl_s)
