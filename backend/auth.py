"""Bearer-token verification: HS256 with a shared secret, or RS256/ES256/EdDSA from a JWKS.

The algorithm is always checked against an explicit allowlist, and the key is always
chosen by us (the configured secret, or our JWKS by `kid`), never by the token
(`jku`, `x5u`, `jwk` and `x5c` headers are ignored). python-jose verifies HS/RS/ES
signatures; it cannot verify EdDSA, so Ed25519 is verified with `cryptography`. Both
paths then share one claim validation.
"""

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import math
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, TypeGuard

import httpx
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from jose import jws, jwt
from jose.exceptions import JOSEError

from backend.errors import InvalidToken, RetryLater
from backend.settings import Settings

logger = logging.getLogger("todo_agent.auth")

MAX_TOKEN_CHARS = 8192
MAX_USER_ID_CHARS = 255
# Which JWK key type (and curve) each asymmetric algorithm must be verified with.
_KEY_TYPES: dict[str, tuple[str, str | None]] = {
    "RS256": ("RSA", None),
    "RS384": ("RSA", None),
    "RS512": ("RSA", None),
    "ES256": ("EC", "P-256"),
    "ES384": ("EC", "P-384"),
    "ES512": ("EC", "P-521"),
    "EdDSA": ("OKP", "Ed25519"),
}
_HMAC_ALGORITHMS = frozenset({"HS256", "HS384", "HS512"})


class IdentityProviderUnavailable(RetryLater):
    status_code = 503
    detail = "The identity provider's keys could not be fetched; retry shortly."

    def __init__(self) -> None:
        super().__init__(retry_after_s=5)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the verified token says the caller is."""

    user_id: str
    email: str | None = None
    name: str | None = None
    # The identity provider vouches for `email` (OpenID Connect's `email_verified`).
    email_verified: bool = False


class JwksCache:
    """Keys from a JWKS URL, by `kid`: refetched when older than `ttl_s`, and at once on an
    unknown `kid` (a provider that rotated signs with a key we have not seen yet).

    Fetches are single-flight (requests that need one share it) and at least `refresh_s`
    apart, successful or not: a request with an unknown kid that arrives sooner waits for
    the next allowed fetch, so a stream of made-up kids, or a provider that is down, costs
    the provider one fetch per `refresh_s`. Until one fetch has succeeded, verification
    answers 503."""

    def __init__(self, url: str, http: httpx.AsyncClient, *, refresh_s: float, ttl_s: float):
        self._url = url
        self._http = http
        self._refresh_s = refresh_s
        self._ttl_s = ttl_s
        self._keys: dict[str | None, dict[str, Any]] = {}
        self.generation = 0  # bumped whenever the set of keys changes
        self._fetched_at = float("-inf")  # the last successful fetch
        self._tried_at = float("-inf")  # the last fetch, successful or not
        self._lock = asyncio.Lock()

    async def key(self, kid: str | None) -> dict[str, Any] | None:
        key = self._lookup(kid)
        now = time.monotonic()
        # Stale keys still verify while a failed refetch waits for its next turn.
        since_try = now - self._tried_at
        stale = now - self._fetched_at > self._ttl_s and since_try > min(
            self._ttl_s, self._refresh_s
        )
        if key is None or stale:
            await self._refresh(seen_at=self._tried_at)
            key = self._lookup(kid)
        if self._fetched_at == float("-inf"):
            raise IdentityProviderUnavailable()
        return key

    def _lookup(self, kid: str | None) -> dict[str, Any] | None:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid)

    async def _refresh(self, *, seen_at: float) -> None:
        async with self._lock:
            if self._tried_at != seen_at:  # another request fetched while we waited
                return
            # Holding the lock: whoever queues behind us shares the fetch we are about to make.
            await asyncio.sleep(max(0.0, self._tried_at + self._refresh_s - time.monotonic()))
            try:
                response = await self._http.get(self._url, timeout=5.0)
                response.raise_for_status()
                keys = _parse_jwks(response.json())
                if keys != self._keys:
                    self._keys = keys
                    self.generation += 1
                self._fetched_at = time.monotonic()
            except (httpx.HTTPError, ValueError) as error:
                # Keep serving the keys we have, if any, until the next try.
                logger.warning("jwks fetch failed", extra={"error": repr(error)})
            # Stamped after the fetch, so requests arriving during it wait for its outcome;
            # not on cancellation, so a caller that went away does not block the next fetch.
            self._tried_at = time.monotonic()


def _parse_jwks(document: object) -> dict[str | None, dict[str, Any]]:
    """The signing keys of a JWKS by `kid`. Entries that are not objects with a string kid,
    and keys meant for encryption (`"use": "enc"`), are skipped; a key of a type we cannot
    verify stays, harmless, since its kty never matches an allowed algorithm's."""
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list):
        raise ValueError("not a JWKS: no keys list")
    return {
        key.get("kid"): key
        for key in keys
        if isinstance(key, dict)
        and isinstance(key.get("kid"), str | None)
        and key.get("use") in (None, "sig")
    }


class _VerifiedTokens:
    """Tokens already verified, by their SHA-256, until they expire and for at most `ttl_s`
    (and forgotten when the JWKS keys change): a frontend sends the same token with every
    request, and checking its signature and claims again each time is work done once.
    Bounded, least recently used out first."""

    def __init__(self, *, capacity: int = 10_000, ttl_s: float = 60.0) -> None:
        self._capacity = capacity
        self._ttl_s = ttl_s
        self._entries: OrderedDict[bytes, tuple[Identity, float]] = OrderedDict()

    def get(self, key: bytes) -> Identity | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if time.time() >= entry[1]:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def clear(self) -> None:
        self._entries.clear()

    def put(self, key: bytes, identity: Identity, *, until: float) -> None:
        self._entries[key] = (identity, min(until, time.time() + self._ttl_s))
        if len(self._entries) > self._capacity:
            self._entries.popitem(last=False)


class TokenVerifier:
    def __init__(self, settings: Settings, http: httpx.AsyncClient) -> None:
        self._settings = settings
        # A cached verification never outlives the JWKS keys it was checked against.
        self._verified = _VerifiedTokens(
            ttl_s=min(60.0, settings.jwt_jwks_cache_s) if settings.jwt_jwks_url else 60.0
        )
        self._verified_generation = 0
        self._algorithms = settings.allowed_algorithms - {"none", "None", "NONE"}
        self._secret = settings.jwt_secret.get_secret_value() if settings.jwt_secret else None
        self._jwks = (
            JwksCache(
                settings.jwt_jwks_url,
                http,
                refresh_s=settings.jwt_jwks_refresh_s,
                ttl_s=settings.jwt_jwks_cache_s,
            )
            if settings.jwt_jwks_url
            else None
        )

    async def verify(self, token: str, *, audience: str | None = None) -> Identity:
        """The token's identity; `audience` (default JWT_AUDIENCE) is the `aud` it must
        carry, when there is one to check."""
        audience = audience or self._settings.jwt_audience
        if not token or len(token) > MAX_TOKEN_CHARS:
            raise InvalidToken()
        if self._jwks is not None and self._jwks.generation != self._verified_generation:
            self._verified.clear()  # keys were rotated: what they verified is checked again
            self._verified_generation = self._jwks.generation
        # A token verified for one audience is not thereby verified for another.
        key = hashlib.sha256(f"{audience or ''}\n{token}".encode()).digest()
        if (known := self._verified.get(key)) is not None:
            return known
        identity, exp = await self._verify(token, audience)
        self._verified.put(key, identity, until=exp + self._settings.jwt_leeway_s)
        return identity

    async def _verify(self, token: str, audience: str | None) -> tuple[Identity, float]:
        try:
            header = jwt.get_unverified_header(token)
        except (JOSEError, ValueError, TypeError) as error:
            raise InvalidToken() from error
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in self._algorithms:
            raise InvalidToken("Token algorithm not allowed.")
        if algorithm in _HMAC_ALGORITHMS:
            payload = self._verify_hmac(token, algorithm)
        else:
            payload = await self._verify_with_jwks(token, algorithm, header.get("kid"))
        try:
            claims = json.loads(payload)
        except (ValueError, UnicodeDecodeError) as error:
            raise InvalidToken() from error
        if not isinstance(claims, dict):
            raise InvalidToken()
        return self._validate_claims(claims, audience), claims["exp"]

    def _verify_hmac(self, token: str, algorithm: str) -> bytes:
        if self._secret is None:
            raise InvalidToken("Token algorithm not allowed.")
        try:
            payload: bytes = jws.verify(token, self._secret, algorithms=[algorithm])
        except (JOSEError, ValueError, TypeError) as error:
            raise InvalidToken() from error
        return payload

    async def _verify_with_jwks(self, token: str, algorithm: str, kid: object) -> bytes:
        if self._jwks is None or algorithm not in _KEY_TYPES:
            raise InvalidToken("Token algorithm not allowed.")
        if kid is not None and not isinstance(kid, str):
            raise InvalidToken()
        key = await self._jwks.key(kid)
        kty, crv = _KEY_TYPES[algorithm]
        if key is None or key.get("kty") != kty or (crv and key.get("crv") != crv):
            raise InvalidToken("Unknown signing key.")
        if key.get("alg") not in (None, algorithm):
            raise InvalidToken("Unknown signing key.")
        if algorithm == "EdDSA":
            return _verify_ed25519(token, key)
        try:
            payload: bytes = jws.verify(token, key, algorithms=[algorithm])
        except (JOSEError, ValueError, TypeError) as error:
            raise InvalidToken() from error
        return payload

    def _validate_claims(self, claims: dict[str, Any], audience: str | None) -> Identity:
        now = time.time()
        leeway = self._settings.jwt_leeway_s
        exp = claims.get("exp")
        if not _is_number(exp):
            raise InvalidToken("Token has no valid exp claim.")
        if now > exp + leeway:
            raise InvalidToken("Token expired.")
        nbf = claims.get("nbf")
        if nbf is not None and (not _is_number(nbf) or now < nbf - leeway):
            raise InvalidToken("Token not yet valid.")
        iat = claims.get("iat")
        if iat is not None and (not _is_number(iat) or iat > now + leeway):
            raise InvalidToken("Token issued in the future.")
        if self._settings.jwt_issuer and claims.get("iss") != self._settings.jwt_issuer:
            raise InvalidToken("Token issuer not accepted.")
        if audience:
            carried = claims.get("aud")
            audiences = carried if isinstance(carried, list) else [carried]
            if audience not in audiences:
                raise InvalidToken("Token audience not accepted.")
        subject = claims.get("sub")
        if (
            not isinstance(subject, str)
            or not 1 <= len(subject) <= MAX_USER_ID_CHARS
            or not _storable(subject)
        ):
            raise InvalidToken("Token has no valid sub claim.")
        return Identity(
            user_id=subject,
            email=_short_str(claims.get("email"), 320),
            name=_short_str(claims.get("name"), 255),
            email_verified=claims.get("email_verified") is True,
        )


def _verify_ed25519(token: str, key: dict[str, Any]) -> bytes:
    try:
        signing_input, _, signature = token.rpartition(".")
        payload_b64 = signing_input.split(".")[1]
        public_key = Ed25519PublicKey.from_public_bytes(_b64url_decode(key["x"]))
        public_key.verify(_b64url_decode(signature), signing_input.encode("ascii"))
        return _b64url_decode(payload_b64)
    except (InvalidSignature, ValueError, KeyError, IndexError, TypeError) as error:
        raise InvalidToken() from error


def _b64url_decode(value: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError) as error:
        raise ValueError("bad base64url") from error


def _is_number(value: object) -> TypeGuard[int | float]:
    # JSON parsing yields inf and nan for `1e400` and `NaN`; either would make a time check
    # always pass, so a token could never expire.
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _storable(value: str) -> bool:
    """Whether PostgreSQL text can hold `value`: no NUL, and valid UTF-8 (no lone surrogates)."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _short_str(value: object, limit: int) -> str | None:
    if not isinstance(value, str) or not value or not _storable(value):
        return None
    return value[:limit]


def create_token(
    *,
    secret: str,
    user_id: str,
    ttl_s: int = 3600,
    email: str | None = None,
    name: str | None = None,
    issuer: str | None = None,
    audience: str | None = None,
    email_verified: bool | None = None,
) -> str:
    """An HS256 token this service accepts (for local use and tests)."""
    now = int(time.time())
    claims: dict[str, Any] = {"sub": user_id, "iat": now, "exp": now + ttl_s}
    optional = {
        "email": email,
        "name": name,
        "iss": issuer,
        "aud": audience,
        "email_verified": email_verified,
    }
    claims.update({key: value for key, value in optional.items() if value is not None})
    token: str = jwt.encode(claims, secret, algorithm="HS256")
    return token
