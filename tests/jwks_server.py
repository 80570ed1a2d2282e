"""A fake identity provider for the tests: signing keys, and a JWKS served over real HTTP."""

import base64
import hashlib
import hmac
import json
import threading
from dataclasses import dataclass
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, cast

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jose import jwk, jwt

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_uint(value: int) -> str:
    return b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


def compact(header: dict[str, Any], payload: bytes, signature: bytes = b"") -> str:
    """A JWS in compact form, from parts the caller chose (for forging tokens by hand)."""
    header_json = json.dumps(header, separators=(",", ":")).encode()
    return f"{b64url(header_json)}.{b64url(payload)}.{b64url(signature)}"


def encode_claims(claims: dict[str, Any]) -> bytes:
    return json.dumps(claims, separators=(",", ":")).encode()


def hs256_token(secret: bytes, header: dict[str, Any], payload: bytes) -> str:
    """HS256 by hand, so the "secret" can be anything (a public key, for the confusion attack)."""
    signing_input = compact(header, payload).rsplit(".", 1)[0]
    signature = hmac.new(secret, signing_input.encode("ascii"), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


@dataclass(frozen=True)
class SharedSecret:
    """An HMAC signer (HS256 unless told): what JWT_SECRET signs."""

    secret: str
    algorithm: str = "HS256"

    def sign(self, claims: dict[str, Any], *, headers: dict[str, Any] | None = None) -> str:
        token: str = jwt.encode(claims, self.secret, algorithm=self.algorithm, headers=headers)
        return token


@dataclass(frozen=True)
class SigningKey:
    """An asymmetric key of the identity provider: RS256, ES256 (P-256) or EdDSA (Ed25519)."""

    algorithm: str
    kid: str
    private_key: PrivateKey

    @classmethod
    def generate(cls, algorithm: str, *, kid: str) -> "SigningKey":
        private_key: PrivateKey
        if algorithm == "RS256":
            private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        elif algorithm == "ES256":
            private_key = ec.generate_private_key(ec.SECP256R1())
        elif algorithm == "EdDSA":
            private_key = ed25519.Ed25519PrivateKey.generate()
        else:
            raise ValueError(algorithm)
        return cls(algorithm=algorithm, kid=kid, private_key=private_key)

    @property
    def public_jwk(self) -> dict[str, str]:
        common = {"kid": self.kid, "alg": self.algorithm, "use": "sig"}
        key = self.private_key
        if isinstance(key, rsa.RSAPrivateKey):
            numbers = key.public_key().public_numbers()
            return {
                **common,
                "kty": "RSA",
                "n": _b64url_uint(numbers.n),
                "e": _b64url_uint(numbers.e),
            }
        if isinstance(key, ec.EllipticCurvePrivateKey):
            point = key.public_key().public_numbers()
            return {
                **common,
                "kty": "EC",
                "crv": "P-256",
                "x": b64url(point.x.to_bytes(32, "big")),
                "y": b64url(point.y.to_bytes(32, "big")),
            }
        raw = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return {**common, "kty": "OKP", "crv": "Ed25519", "x": b64url(raw)}

    def public_key_bytes(self, encoding: serialization.Encoding) -> bytes:
        return self.private_key.public_key().public_bytes(
            encoding, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def sign(self, claims: dict[str, Any], *, headers: dict[str, Any] | None = None) -> str:
        """A token with `kid` set to this key's, unless `headers` overrides it (None drops it)."""
        extra = {"kid": self.kid, **(headers or {})}
        extra = {name: value for name, value in extra.items() if value is not None}
        if isinstance(self.private_key, ed25519.Ed25519PrivateKey):
            # python-jose cannot sign EdDSA; build the JWS by hand.
            header = {"alg": "EdDSA", "typ": "JWT", **extra}
            signing_input = compact(header, encode_claims(claims)).rsplit(".", 1)[0]
            signature = self.private_key.sign(signing_input.encode("ascii"))
            return f"{signing_input}.{b64url(signature)}"
        token: str = jwt.encode(claims, self._jose_key, algorithm=self.algorithm, headers=extra)
        return token

    @cached_property
    def _jose_key(self) -> Any:
        # Loading an RSA PEM is slow (the key is checked); do it once per key, not per token.
        pem = self.private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return jwk.construct(pem.decode(), self.algorithm)


class JwksServer:
    """Serves `document` as JSON (with `status`) at any path on 127.0.0.1 from a background
    thread, and records the path of every GET so tests can count fetches."""

    def __init__(self, document: Any = None) -> None:
        self.document: Any = {"keys": []} if document is None else document
        self.status = 200
        self._paths: list[str] = []
        self._lock = threading.Lock()
        self._httpd = _HttpServer(("127.0.0.1", 0), _Handler)
        self._httpd.jwks = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/.well-known/jwks.json"

    @property
    def fetches(self) -> int:
        with self._lock:
            return len(self._paths)

    def serve(self, *keys: SigningKey) -> None:
        self.document = {"keys": [key.public_jwk for key in keys]}

    def _record(self, path: str) -> tuple[int, bytes]:
        with self._lock:
            self._paths.append(path)
            return self.status, json.dumps(self.document).encode()

    def __enter__(self) -> "JwksServer":
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    jwks: JwksServer


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, body = cast(_HttpServer, self.server).jwks._record(self.path)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep the test output quiet
