"""A push service, an ntfy server and a browser's subscription, for the notification tests.

`FakePushService` is a real HTTP server on 127.0.0.1 (a thread of its own, so server
processes started by a test reach it too) that takes what a push service takes: it checks
each request's VAPID token (RFC 8292: `Authorization: vapid t=<JWT>,k=<key>`, the JWT's
`aud`, `exp` and ES256 signature against the key) and keeps the body, which
`BrowserSubscription.decrypt` reads as the browser would (RFC 8291 `aes128gcm`, with the
subscription's own private key and auth secret). Answers are scripted per path
(`answer(path, 410)`, a redirect, a slow answer); anything else is 201. The same server
records ntfy posts (any path; headers and body kept).
"""

from __future__ import annotations

import base64
import json
import os
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import http_ece  # type: ignore[import-untyped]
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(value: str) -> bytes:
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    vapid: dict[str, Any] | None  # the verified JWT's claims (push only)
    vapid_key: str | None
    at: float = field(default_factory=time.monotonic)


class BrowserSubscription:
    """What a browser makes when a page subscribes: a P-256 key pair and an auth secret."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._key = ec.generate_private_key(ec.SECP256R1())
        self.auth = os.urandom(16)

    def to_json(self) -> dict[str, Any]:
        public = self._key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return {
            "endpoint": self.endpoint,
            "expirationTime": None,
            "keys": {"p256dh": b64url(public), "auth": b64url(self.auth)},
        }

    def decrypt(self, body: bytes) -> dict[str, Any]:
        plain = http_ece.decrypt(
            body, private_key=self._key, auth_secret=self.auth, version="aes128gcm"
        )
        decoded: dict[str, Any] = json.loads(plain)
        return decoded


def _peer_gone(connection: socket.socket) -> bool:
    """Whether the client closed its end (its process was killed)."""
    try:
        ready, _, _ = select.select([connection], [], [], 0)
        return bool(ready) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # A delivery loop opens up to 64 connections at once (a claimed batch); with the default
    # backlog of 5 the kernel drops the rest, and their sends wait for SYN retransmits
    # (seconds) or time out: a push service's stall, not the sender's.
    request_queue_size = 128


class FakePushService:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.refused: list[str] = []  # why a request's VAPID token was refused
        # Slow answers (`delay`): how many are being waited for now, and those whose sender
        # went away before the answer (not accepted, so not in `received`).
        self.waiting = 0
        self.dropped: list[Received] = []
        self._answers: dict[str, list[tuple[int, dict[str, str], float]]] = {}
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                status, headers, delay = service._next_answer(self.path)
                headers_in = {name.lower(): value for name, value in self.headers.items()}
                claims, key = service._vapid(headers_in, self.path)
                received = Received(self.path, headers_in, body, claims, key)
                if delay:
                    with service._lock:
                        service.waiting += 1
                    time.sleep(delay)
                    with service._lock:
                        service.waiting -= 1
                    if _peer_gone(self.connection):
                        # The sender died waiting: the message was never accepted.
                        with service._lock:
                            service.dropped.append(received)
                        self.close_connection = True
                        return
                with service._lock:
                    service.received.append(received)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakePushService:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def clear(self) -> None:
        with self._lock:
            self.received.clear()
            self.refused.clear()
            self.dropped.clear()
            self._answers.clear()

    def answer(
        self, path: str, *statuses: int, headers: dict[str, str] | None = None, delay: float = 0
    ) -> None:
        """The next requests to `path` get these statuses, in order (then 201)."""
        with self._lock:
            self._answers.setdefault(path, []).extend(
                (status, headers or {}, delay) for status in statuses
            )

    def to(self, path: str) -> list[Received]:
        with self._lock:
            return [request for request in self.received if request.path == path]

    def _next_answer(self, path: str) -> tuple[int, dict[str, str], float]:
        with self._lock:
            queued = self._answers.get(path)
            if queued:
                return queued.pop(0)
        return 201, {}, 0.0

    def _vapid(
        self, headers: dict[str, str], path: str
    ) -> tuple[dict[str, Any] | None, str | None]:
        authorization = headers.get("authorization", "")
        if not authorization.startswith("vapid "):
            return None, None
        try:
            parts = dict(item.strip().split("=", 1) for item in authorization[6:].split(","))
            raw = b64url_decode(parts["k"])
            public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw)
            claims: dict[str, Any] = jwt.decode(
                parts["t"], public, algorithms=["ES256"], audience=self.url
            )
        except Exception as error:  # kept, and the test says why
            with self._lock:
                self.refused.append(f"{path}: {error!r}")
            return None, None
        return claims, parts["k"]

    def endpoints(self, count: int) -> Iterator[str]:
        for n in range(count):
            yield f"{self.url}/push/{n}-{os.urandom(4).hex()}"
