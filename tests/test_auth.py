"""Bearer-token verification under attack: every bad token is a 401, every good one a 200.

The service is configured like production with an identity provider: a JWKS served over
real HTTP (RS256, ES256, EdDSA keys), a JWT_SECRET for HS256, an issuer and an audience.
"""

import asyncio
import json
import math
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.main import create_app
from backend.settings import Settings
from tests.conftest import TEST_SECRET
from tests.jwks_server import (
    JwksServer,
    SharedSecret,
    SigningKey,
    b64url,
    compact,
    encode_claims,
    hs256_token,
)

pytestmark = pytest.mark.asyncio

ISSUER = "https://idp.test"
AUDIENCE = "todo-agent"
LEEWAY_S = 30  # the default JWT_LEEWAY_S

HS = SharedSecret(TEST_SECRET)
RSA = SigningKey.generate("RS256", kid="rsa-1")
EC = SigningKey.generate("ES256", kid="ec-1")
ED = SigningKey.generate("EdDSA", kid="ed-1")
# The attacker's keys: same algorithms, and the kids of our keys.
FORGED = {key.algorithm: SigningKey.generate(key.algorithm, kid=key.kid) for key in (RSA, EC, ED)}

SIGNERS = [
    pytest.param(HS, id="HS256"),
    pytest.param(RSA, id="RS256"),
    pytest.param(EC, id="ES256"),
    pytest.param(ED, id="EdDSA"),
]
Signer = SharedSecret | SigningKey
OpenApi = Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]

MISSING: Any = object()  # a claim override that removes the claim


def claims(**overrides: Any) -> dict[str, Any]:
    """Claims the service accepts, changed by `overrides`."""
    now = int(time.time())
    values = {"sub": "alice", "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300}
    values.update(overrides)
    return {name: value for name, value in values.items() if value is not MISSING}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def raw_token(header: bytes, payload: bytes | None = None) -> str:
    """A token whose header bytes are exactly `header` (for malformed headers)."""
    payload = encode_claims(claims()) if payload is None else payload
    return f"{b64url(header)}.{b64url(payload)}.{b64url(b'signature')}"


def assert_unauthorized(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"] == "Bearer"
    detail = response.json()["detail"]
    assert isinstance(detail, str)
    assert detail


async def list_tasks(
    api: httpx.AsyncClient, headers: dict[str, str], *, user: str = "alice"
) -> httpx.Response:
    return await api.get(f"/api/{user}/tasks", headers=headers)


async def user_rows(engine: AsyncEngine) -> list[tuple[Any, ...]]:
    async with engine.connect() as connection:
        result = await connection.execute(text("SELECT id, email, name FROM users ORDER BY id"))
        return [tuple(row) for row in result.all()]


@pytest.fixture
def idp() -> Iterator[JwksServer]:
    """Our identity provider's JWKS, over HTTP on 127.0.0.1."""
    with JwksServer() as server:
        server.serve(RSA, EC, ED)
        yield server


@pytest.fixture
def attacker() -> Iterator[JwksServer]:
    """A JWKS the attacker controls, holding the attacker's keys under our kids too."""
    with JwksServer() as server:
        server.serve(*FORGED.values(), SigningKey.generate("RS256", kid="attacker-1"))
        yield server


@pytest.fixture
def open_api(
    make_settings: Callable[..., Settings], engine: AsyncEngine, idp: JwksServer
) -> OpenApi:
    """Start the service with the identity provider configured, changed by `overrides`."""

    @asynccontextmanager
    async def open_api(**overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
        settings = make_settings(
            **{"jwt_jwks_url": idp.url, "jwt_issuer": ISSUER, "jwt_audience": AUDIENCE} | overrides
        )
        app = create_app(settings)
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://test") as client,
        ):
            yield client

    return open_api


@pytest.fixture
async def api(open_api: OpenApi) -> AsyncIterator[httpx.AsyncClient]:
    async with open_api() as client:
        yield client


# --- Accepted ---------------------------------------------------------------------------


@pytest.mark.parametrize("signer", SIGNERS)
async def test_valid_token_is_accepted(api: httpx.AsyncClient, signer: Signer) -> None:
    response = await list_tasks(api, bearer(signer.sign(claims())))
    assert response.status_code == 200, response.text
    assert response.json() == {"data": [], "count": 0}


@pytest.mark.parametrize("signer", SIGNERS)
@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param(lambda now: {"exp": now - LEEWAY_S + 10}, id="expired-within-leeway"),
        pytest.param(lambda now: {"nbf": now + LEEWAY_S - 10}, id="nbf-within-leeway"),
        pytest.param(lambda now: {"iat": now + LEEWAY_S - 10}, id="iat-within-leeway"),
        pytest.param(lambda now: {"aud": ["other", AUDIENCE]}, id="aud-list-with-ours"),
        pytest.param(lambda now: {"exp": now + 300.5, "nbf": now - 0.5}, id="float-times"),
    ],
)
async def test_borderline_valid_claims_are_accepted(
    api: httpx.AsyncClient, signer: Signer, overrides: Callable[[int], dict[str, Any]]
) -> None:
    token = signer.sign(claims(**overrides(int(time.time()))))
    response = await list_tasks(api, bearer(token))
    assert response.status_code == 200, response.text


async def test_token_without_kid_is_accepted_when_the_jwks_has_one_key(
    open_api: OpenApi, idp: JwksServer
) -> None:
    idp.serve(ED)
    async with open_api() as api:
        response = await list_tasks(api, bearer(ED.sign(claims(), headers={"kid": None})))
    assert response.status_code == 200, response.text


async def test_longest_allowed_user_id_is_accepted_and_stored(
    api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    user = "u" * 255
    response = await list_tasks(api, bearer(RSA.sign(claims(sub=user))), user=user)
    assert response.status_code == 200, response.text
    assert await user_rows(engine) == [(user, None, None)]


# --- Rejected: the request and the token's shape ----------------------------------------


def _case(case_id: str, headers: Callable[[], dict[str, str]], *, user: str = "alice") -> Any:
    return pytest.param(user, headers, id=case_id)


MALFORMED = [
    _case("no-authorization-header", lambda: {}),
    _case("basic-scheme", lambda: {"Authorization": "Basic " + b64url(b"alice:password")}),
    _case(
        "basic-scheme-carrying-a-valid-jwt", lambda: {"Authorization": "Basic " + HS.sign(claims())}
    ),
    _case("bearer-without-token", lambda: {"Authorization": "Bearer"}),
    _case("garbage", lambda: bearer("not-a-jwt")),
    _case("two-segments", lambda: bearer(HS.sign(claims()).rsplit(".", 1)[0])),
    _case("four-segments", lambda: bearer(HS.sign(claims()) + ".e30")),
    _case("header-bad-base64", lambda: bearer("a." + HS.sign(claims()).split(".", 1)[1])),
    _case("header-not-json", lambda: bearer(raw_token(b"not json"))),
    _case("header-json-array", lambda: bearer(raw_token(b'["HS256"]'))),
    _case("header-not-utf8", lambda: bearer(raw_token(b'{"alg":"HS256\xff"}'))),
    _case("header-without-alg", lambda: bearer(raw_token(b'{"typ":"JWT"}'))),
    _case("alg-not-a-string", lambda: bearer(raw_token(b'{"alg":["HS256"]}'))),
    _case(
        "signed-payload-not-json",
        lambda: bearer(hs256_token(TEST_SECRET.encode(), {"alg": "HS256"}, b"not json")),
    ),
    _case(
        "signed-payload-json-array",
        lambda: bearer(hs256_token(TEST_SECRET.encode(), {"alg": "HS256"}, b'["alice"]')),
    ),
    _case("oversize-100kb-garbage", lambda: bearer("a" * 100_000)),
    _case("oversize-100kb-signed", lambda: bearer(HS.sign(claims(pad="x" * 100_000)))),
]


def _swap_payload(token: str, payload: dict[str, Any]) -> str:
    header, _, signature = token.split(".")
    return f"{header}.{b64url(encode_claims(payload))}.{signature}"


def _relabel(token: str, header: dict[str, Any]) -> str:
    _, payload, signature = token.split(".")
    return f"{b64url(encode_claims(header))}.{payload}.{signature}"


def _strip_signature(token: str) -> str:
    return token.rsplit(".", 1)[0] + "."


def _tampered(signer: Signer, forger: Signer) -> list[Any]:
    name = signer.algorithm
    return [
        _case(f"{name}-signed-by-another-key", lambda: bearer(forger.sign(claims()))),
        _case(
            f"{name}-payload-swapped",
            lambda: bearer(_swap_payload(signer.sign(claims(exp=1)), claims())),
        ),
        _case(
            f"{name}-signature-stripped",
            lambda: bearer(_strip_signature(signer.sign(claims()))),
        ),
    ]


def _not_in_our_jwks(key: SigningKey) -> list[Any]:
    name = key.algorithm
    return [
        _case(
            f"{name}-unknown-kid",
            lambda: bearer(key.sign(claims(), headers={"kid": "no-such-key"})),
        ),
        _case(
            f"{name}-without-kid-while-the-jwks-has-several-keys",
            lambda: bearer(key.sign(claims(), headers={"kid": None})),
        ),
    ]


SIGNATURES = [
    *_tampered(HS, SharedSecret("guessed-secret")),
    *(case for key in (RSA, EC, ED) for case in _tampered(key, FORGED[key.algorithm])),
    *(case for key in (RSA, EC, ED) for case in _not_in_our_jwks(key)),
    _case("RS256-kid-of-an-EC-key", lambda: bearer(RSA.sign(claims(), headers={"kid": EC.kid}))),
    _case("ES256-kid-of-an-RSA-key", lambda: bearer(EC.sign(claims(), headers={"kid": RSA.kid}))),
    _case("EdDSA-kid-of-an-EC-key", lambda: bearer(ED.sign(claims(), headers={"kid": EC.kid}))),
    _case(
        "RS256-signature-relabelled-HS256",
        lambda: bearer(_relabel(RSA.sign(claims()), {"alg": "HS256", "kid": RSA.kid})),
    ),
    _case(
        "EdDSA-signature-relabelled-ES256",
        lambda: bearer(_relabel(ED.sign(claims()), {"alg": "ES256", "kid": ED.kid})),
    ),
    _case("kid-not-a-string", lambda: bearer(RSA.sign(claims(), headers={"kid": 7}))),
]


def _unsigned(alg: str, *, trailing_dot: bool) -> str:
    token = compact({"alg": alg, "typ": "JWT"}, encode_claims(claims()))
    return token if trailing_dot else token.rstrip(".")


def _alg_none(alg: str, *, trailing_dot: bool) -> Any:
    return _case(
        f"alg-{alg}-{'with' if trailing_dot else 'without'}-trailing-dot",
        lambda: bearer(_unsigned(alg, trailing_dot=trailing_dot)),
    )


ALG_NONE = [
    _alg_none(alg, trailing_dot=dot)
    for alg in ("none", "None", "NONE", "nOnE")
    for dot in (True, False)
]

NOT_ALLOWLISTED = [
    _case(
        "HS512-with-our-secret", lambda: bearer(SharedSecret(TEST_SECRET, "HS512").sign(claims()))
    ),
    _case(
        "RS512-with-our-rsa-key",
        lambda: bearer(SigningKey("RS512", RSA.kid, RSA.private_key).sign(claims())),
    ),
]


@pytest.mark.parametrize(
    ("user", "headers"), [*MALFORMED, *SIGNATURES, *ALG_NONE, *NOT_ALLOWLISTED]
)
async def test_bad_token_is_unauthorized(
    api: httpx.AsyncClient, user: str, headers: Callable[[], dict[str, str]]
) -> None:
    assert_unauthorized(await list_tasks(api, headers(), user=user))


# --- Rejected: the claims, on every signing path ------------------------------------------


def _claims_case(
    case_id: str, overrides: Callable[[int], dict[str, Any]], *, user: str = "alice"
) -> Any:
    return pytest.param(user, overrides, id=case_id)


BAD_CLAIMS = [
    _claims_case("expired-beyond-leeway", lambda now: {"exp": now - LEEWAY_S - 30}),
    _claims_case("exp-missing", lambda now: {"exp": MISSING}),
    _claims_case("exp-null", lambda now: {"exp": None}),
    _claims_case("exp-a-numeric-string", lambda now: {"exp": str(now + 300)}),
    _claims_case("exp-a-boolean", lambda now: {"exp": True}),
    _claims_case("exp-infinity", lambda now: {"exp": math.inf}),
    _claims_case("exp-nan", lambda now: {"exp": math.nan}),
    _claims_case("nbf-in-the-future", lambda now: {"nbf": now + LEEWAY_S + 60}),
    _claims_case("nbf-a-string", lambda now: {"nbf": "yesterday"}),
    _claims_case("nbf-nan", lambda now: {"nbf": math.nan}),
    _claims_case("nbf-a-huge-integer", lambda now: {"nbf": 10**400}),
    _claims_case("iat-in-the-future", lambda now: {"iat": now + LEEWAY_S + 600}),
    _claims_case("iss-wrong", lambda now: {"iss": "https://evil.test"}),
    _claims_case("iss-missing", lambda now: {"iss": MISSING}),
    _claims_case("aud-wrong", lambda now: {"aud": "another-service"}),
    _claims_case("aud-missing", lambda now: {"aud": MISSING}),
    _claims_case("aud-list-without-ours", lambda now: {"aud": ["another-service"]}),
    _claims_case("sub-missing", lambda now: {"sub": MISSING}),
    _claims_case("sub-empty", lambda now: {"sub": ""}),
    _claims_case("sub-null", lambda now: {"sub": None}),
    _claims_case("sub-a-number", lambda now: {"sub": 42}, user="42"),
    _claims_case("sub-a-list", lambda now: {"sub": ["alice"]}),
    _claims_case("sub-256-chars", lambda now: {"sub": "u" * 256}, user="u" * 256),
    _claims_case("sub-with-a-nul-byte", lambda now: {"sub": "ali\x00ce"}, user="ali%00ce"),
]


@pytest.mark.parametrize("signer", SIGNERS)
@pytest.mark.parametrize(("user", "overrides"), BAD_CLAIMS)
async def test_bad_claims_are_unauthorized(
    api: httpx.AsyncClient,
    signer: Signer,
    user: str,
    overrides: Callable[[int], dict[str, Any]],
) -> None:
    token = signer.sign(claims(**overrides(int(time.time()))))
    assert_unauthorized(await list_tasks(api, bearer(token), user=user))


async def test_profile_claims_postgres_cannot_store_are_dropped(
    api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    token = RSA.sign(claims(email="a\x00@example.com", name="\ud800 Alice"))
    response = await list_tasks(api, bearer(token))
    assert response.status_code == 200, response.text
    assert await user_rows(engine) == [("alice", None, None)]


# --- Algorithm confusion and keys chosen by the token -----------------------------------


@pytest.mark.parametrize(
    "config",
    [
        pytest.param({}, id="jwks-and-jwt-secret"),
        pytest.param({"jwt_secret": None}, id="jwks-only"),
        pytest.param(
            {"jwt_secret": None, "jwt_algorithms": "HS256,RS256"},
            id="jwks-and-hs256-allowlisted-without-secret",
        ),
    ],
)
@pytest.mark.parametrize(
    "public_key",
    [
        pytest.param(RSA.public_key_bytes(serialization.Encoding.PEM), id="pem"),
        pytest.param(RSA.public_key_bytes(serialization.Encoding.PEM).strip(), id="pem-stripped"),
        pytest.param(RSA.public_key_bytes(serialization.Encoding.DER), id="der"),
        pytest.param(json.dumps(RSA.public_jwk).encode(), id="jwk-json"),
    ],
)
async def test_hs256_signed_with_the_rsa_public_key_is_unauthorized(
    open_api: OpenApi, config: dict[str, Any], public_key: bytes
) -> None:
    token = hs256_token(
        public_key, {"alg": "HS256", "typ": "JWT", "kid": RSA.kid}, encode_claims(claims())
    )
    async with open_api(**config) as api:
        assert_unauthorized(await list_tasks(api, bearer(token)))


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
async def test_alg_none_is_unauthorized_even_when_allowlisted(open_api: OpenApi, alg: str) -> None:
    async with open_api(jwt_algorithms=f"{alg},HS256,RS256") as api:
        for trailing_dot in (True, False):
            token = _unsigned(alg, trailing_dot=trailing_dot)
            assert_unauthorized(await list_tasks(api, bearer(token)))


@pytest.mark.parametrize(
    ("signer", "accepted"),
    [
        pytest.param(RSA, True, id="RS256-allowlisted"),
        pytest.param(HS, False, id="HS256-not-allowlisted"),
        pytest.param(EC, False, id="ES256-not-allowlisted"),
        pytest.param(ED, False, id="EdDSA-not-allowlisted"),
    ],
)
async def test_only_allowlisted_algorithms_are_accepted(
    open_api: OpenApi, signer: Signer, accepted: bool
) -> None:
    async with open_api(jwt_algorithms="RS256") as api:
        response = await list_tasks(api, bearer(signer.sign(claims())))
    if accepted:
        assert response.status_code == 200, response.text
    else:
        assert_unauthorized(response)


@pytest.mark.parametrize("header", ["jku", "x5u"])
@pytest.mark.parametrize("kid", [RSA.kid, "attacker-1"], ids=["our-kid", "attacker-kid"])
async def test_key_url_in_the_token_is_never_fetched(
    api: httpx.AsyncClient, attacker: JwksServer, header: str, kid: str
) -> None:
    key = FORGED["RS256"] if kid == RSA.kid else SigningKey.generate("RS256", kid=kid)
    attacker.serve(key)
    token = key.sign(claims(), headers={"kid": kid, header: attacker.url})
    assert_unauthorized(await list_tasks(api, bearer(token)))
    assert attacker.fetches == 0


@pytest.mark.parametrize("signer", [RSA, EC, ED], ids=["RS256", "ES256", "EdDSA"])
async def test_key_embedded_in_the_token_is_ignored(
    api: httpx.AsyncClient, signer: SigningKey
) -> None:
    forged = FORGED[signer.algorithm]
    token = forged.sign(claims(), headers={"jwk": forged.public_jwk})
    assert_unauthorized(await list_tasks(api, bearer(token)))


# --- The JWKS: cached, refetched sparingly, rotated -------------------------------------


async def test_jwks_is_fetched_once_and_cached(api: httpx.AsyncClient, idp: JwksServer) -> None:
    for _ in range(3):
        for key in (RSA, EC, ED):
            response = await list_tasks(api, bearer(key.sign(claims())))
            assert response.status_code == 200, response.text
    assert idp.fetches == 1


async def test_unknown_kids_share_one_refetch_per_refresh_interval(
    open_api: OpenApi, idp: JwksServer
) -> None:
    async def storm(api: httpx.AsyncClient) -> None:
        tokens = [ED.sign(claims(), headers={"kid": secrets.token_hex(8)}) for _ in range(50)]
        for response in await asyncio.gather(*(list_tasks(api, bearer(t)) for t in tokens)):
            assert_unauthorized(response)

    async with open_api(jwt_jwks_refresh_s=0.5) as api:
        assert (await list_tasks(api, bearer(ED.sign(claims())))).status_code == 200
        await storm(api)
        assert idp.fetches == 2  # fifty unknown kids, one refetch (after the floor)
        await storm(api)
        assert idp.fetches == 3


async def test_rotated_key_is_picked_up_at_once(open_api: OpenApi, idp: JwksServer) -> None:
    rotated = SigningKey.generate("RS256", kid="rsa-2")
    old_token = bearer(RSA.sign(claims()))
    async with open_api(jwt_jwks_refresh_s=0.5) as api:
        assert (await list_tasks(api, old_token)).status_code == 200
        idp.serve(rotated, EC, ED)

        # Just after a fetch, the new kid waits for the floor between fetches, not longer.
        new_tokens = [bearer(rotated.sign(claims(sub=f"user-{n}"))) for n in range(20)]
        responses = await asyncio.gather(
            *(list_tasks(api, token, user=f"user-{n}") for n, token in enumerate(new_tokens))
        )
        for response in responses:
            assert response.status_code == 200, response.text
        assert idp.fetches == 2  # twenty requests with the new kid shared one fetch
        # The retired key went with the refetch, even for a token verified with it before;
        # its kid is unknown now, so it gets one look of its own (after the floor).
        assert_unauthorized(await list_tasks(api, old_token))
        assert idp.fetches == 3


async def test_jwks_is_refetched_when_the_cache_expires(open_api: OpenApi, idp: JwksServer) -> None:
    # Long enough that two requests on a loaded machine (the whole suite) fall within it.
    async with open_api(jwt_jwks_cache_s=2) as api:
        for _ in range(2):
            assert (await list_tasks(api, bearer(ED.sign(claims())))).status_code == 200
        await asyncio.sleep(2.1)
        assert (await list_tasks(api, bearer(ED.sign(claims())))).status_code == 200
    assert idp.fetches == 2


async def test_unavailable_identity_provider_is_503_and_not_hammered(
    open_api: OpenApi, idp: JwksServer
) -> None:
    idp.status = 500
    async with open_api(jwt_jwks_refresh_s=0.5) as api:
        responses = await asyncio.gather(
            *(list_tasks(api, bearer(RSA.sign(claims()))) for _ in range(20))
        )
        for response in responses:
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"]
        assert idp.fetches == 1

        idp.status = 200
        await asyncio.sleep(0.6)
        assert (await list_tasks(api, bearer(RSA.sign(claims())))).status_code == 200
        assert idp.fetches == 2


async def test_identity_provider_outage_keeps_the_cached_keys(
    open_api: OpenApi, idp: JwksServer
) -> None:
    async with open_api(jwt_jwks_cache_s=0.3, jwt_jwks_refresh_s=0.3) as api:
        assert (await list_tasks(api, bearer(EC.sign(claims())))).status_code == 200
        idp.status = 503
        await asyncio.sleep(0.4)
        started = time.monotonic()
        for _ in range(10):
            response = await list_tasks(api, bearer(EC.sign(claims())))
            assert response.status_code == 200, response.text
        elapsed = time.monotonic() - started
        # One failed refetch, then the old keys until the next try, 0.3 s later: ten requests
        # on a loaded machine can outlast that, so the bound is the tries that time allows.
        assert 2 <= idp.fetches <= 2 + int(elapsed / 0.3)


@pytest.mark.parametrize(
    "document",
    [
        pytest.param("not a jwks", id="a-string"),
        pytest.param([], id="a-list"),
        pytest.param({"keys": 5}, id="keys-not-a-list"),
        pytest.param({"no": "keys"}, id="no-keys-member"),
    ],
)
async def test_malformed_jwks_is_503(open_api: OpenApi, idp: JwksServer, document: object) -> None:
    idp.document = document
    async with open_api() as api:
        response = await list_tasks(api, bearer(RSA.sign(claims())))
    assert response.status_code == 503, response.text


async def test_malformed_entries_in_the_jwks_are_skipped(
    open_api: OpenApi, idp: JwksServer
) -> None:
    idp.document = {
        "keys": [
            "not a key",
            {"kid": ["a", "list"], "kty": "RSA"},
            {"kid": "broken", "kty": "RSA", "n": "%%%", "e": "AQAB"},
            RSA.public_jwk,
        ]
    }
    async with open_api() as api:
        response = await list_tasks(api, bearer(RSA.sign(claims())))
        assert response.status_code == 200, response.text
        assert_unauthorized(
            await list_tasks(api, bearer(RSA.sign(claims(), headers={"kid": "broken"})))
        )


async def test_encryption_keys_in_the_jwks_are_ignored(open_api: OpenApi, idp: JwksServer) -> None:
    idp.document = {"keys": [{**RSA.public_jwk, "use": "enc"}, ED.public_jwk]}
    async with open_api() as api:
        assert_unauthorized(await list_tasks(api, bearer(RSA.sign(claims()))))
        assert (await list_tasks(api, bearer(ED.sign(claims())))).status_code == 200


async def test_unsupported_key_types_beside_good_keys_are_harmless(
    open_api: OpenApi, idp: JwksServer
) -> None:
    x25519 = {"kid": "x25519-1", "kty": "OKP", "crv": "X25519", "x": b64url(bytes(32))}
    idp.document = {
        "keys": [
            {"kid": "oct-1", "kty": "oct", "k": b64url(b"a shared secret in a jwks")},
            x25519,
            {"kid": "k1-1", "kty": "EC", "crv": "secp256k1", "x": "AA", "y": "AA"},
            {"kid": "future-1", "kty": "AKP", "alg": "ML-DSA-44", "pub": "AA"},
            RSA.public_jwk,
            EC.public_jwk,
            ED.public_jwk,
        ]
    }
    async with open_api() as api:
        for key in (RSA, EC, ED):
            response = await list_tasks(api, bearer(key.sign(claims())))
            assert response.status_code == 200, response.text
        forged = ED.sign(claims(), headers={"kid": x25519["kid"]})
        assert_unauthorized(await list_tasks(api, bearer(forged)))


# --- Tenancy: the path names the token's user -------------------------------------------


async def test_path_user_other_than_sub_is_forbidden(
    api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    response = await list_tasks(api, bearer(RSA.sign(claims(sub="alice"))), user="bob")
    assert response.status_code == 403, response.text
    assert await user_rows(engine) == []


async def test_bad_token_on_another_users_path_is_401_not_403(api: httpx.AsyncClient) -> None:
    token = RSA.sign(claims(sub="alice", exp=1))
    assert_unauthorized(await list_tasks(api, bearer(token), user="bob"))


async def test_user_is_created_on_first_sight(api: httpx.AsyncClient, engine: AsyncEngine) -> None:
    token = ED.sign(claims(sub="usr_01HZX8Q9", email="carol@example.com", name="Carol"))
    for _ in range(2):
        response = await list_tasks(api, bearer(token), user="usr_01HZX8Q9")
        assert response.status_code == 200, response.text
    assert await user_rows(engine) == [("usr_01HZX8Q9", "carol@example.com", "Carol")]


async def test_a_verified_token_is_remembered_only_until_it_expires(open_api: OpenApi) -> None:
    """Verification is cached per token, but a cached token still expires on time."""
    exp = int(time.time()) + 3
    token = bearer(HS.sign(claims(exp=exp)))
    async with open_api(jwt_leeway_s=0) as api:
        first = await list_tasks(api, token)
        again = await list_tasks(api, token)
        await asyncio.sleep(exp + 0.2 - time.time())
        expired = await list_tasks(api, token)
    assert first.status_code == again.status_code == 200
    assert_unauthorized(expired)
