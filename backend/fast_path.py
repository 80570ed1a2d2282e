"""The chat fast path: middleware that answers a plain `POST /api/{user_id}/chat` itself,
through the route's own `answer_chat`, and passes anything else through to FastAPI.
tests/test_fast_path.py sends every kind of body both ways and compares the answers."""

import re
from typing import Any

import orjson
from fastapi.responses import Response
from fastapi.security.utils import get_authorization_scheme_param
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.context import AppContext
from backend.deps import ensure_user
from backend.errors import DomainError, error_response
from backend.models.chat import ChatRequest
from backend.routers.chat import answer_chat, chat
from backend.services.idempotency import Replay


class ChatFastPath:
    """`POST /api/{user_id}/chat` without FastAPI's request handling, for the plain case.

    A no-tool turn costs the service about a millisecond and a half of CPU, and FastAPI's
    routing, dependency solving, body parsing and response handling were a sixth of it. The
    route (`backend.routers.chat.chat`) stays the one FastAPI documents and serves; this
    ASGI layer, installed inside the CORS and server-error middleware, answers the requests
    it can prove plain with the very same steps (`verify`, `ensure_user`, `ChatRequest`, and
    the route's own `answer_chat`: `agent.begin`, `agent.replica.start`) and the same bytes.
    Anything else passes through to FastAPI untouched, its body replayed: another method or
    path, a root path, no bearer token, another content type, no Content-Length, an
    Idempotency-Key, a body that does not validate, a token that does not verify or names
    another user: the route answers those, with its own errors. What `begin` refuses and
    how a turn fails (`DomainError`s) are answered as the app's handler for them answers
    them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._route: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or scope.get("root_path")
            or (match := _CHAT_PATH.fullmatch(scope["path"])) is None
        ):
            await self.app(scope, receive, send)
            return
        scope["route"] = self._chat_route(scope)  # the template, for logs and metrics
        token: str | None = None
        plain = sized = keyed = False
        for name, value in scope["headers"]:
            if name == b"content-length":
                # A chunked body is counted against the size cap as it is read, which the
                # route handles.
                sized = True
            elif name == b"authorization":  # read as FastAPI's HTTPBearer reads it
                scheme, credentials = get_authorization_scheme_param(value.decode("latin-1"))
                token = credentials if scheme.lower() == "bearer" and credentials else None
            elif name == b"content-type":
                plain = value == b"application/json"
            elif name == b"idempotency-key":
                keyed = True
        if not (plain and sized and not keyed and token is not None):
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay(None, message, receive), send)
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
        answer = await self._answer(scope, match[1], token, body)
        if answer is None:
            await self.app(scope, _replay(body, None, receive), send)
        elif isinstance(answer, bytes):
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-length", str(len(answer)).encode()),
                        (b"content-type", b"application/json"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": answer})
        else:
            await answer(scope, receive, send)

    async def _answer(
        self, scope: Scope, user_id: str, token: str, body: bytes
    ) -> bytes | Response | None:
        """The turn's answer (or the response refusing it), or None to let FastAPI answer."""
        context: AppContext = scope["app"].state.context
        try:
            request = ChatRequest.model_validate(orjson.loads(body))
            identity = await context.verifier.verify(token)
        except (ValueError, DomainError):  # not JSON, not valid, not verified
            return None
        if identity.user_id != user_id:
            return None
        try:
            await ensure_user(context, identity)
            answer = await answer_chat(agent=context.agent, identity=identity, request=request)
        except DomainError as refused:  # refused, or the turn failed (the database away)
            return error_response(refused)
        assert not isinstance(answer, Replay)  # only with an Idempotency-Key
        return answer

    def _chat_route(self, scope: Scope) -> Any:
        if self._route is None:
            self._route = next(
                route
                for route in scope["app"].router.routes
                if getattr(route, "endpoint", None) is chat
            )
        return self._route


_CHAT_PATH = re.compile(r"/api/([^/]+)/chat")


def _replay(body: bytes | None, last: Message | None, receive: Receive) -> Receive:
    """`receive` for the app after the body was read here: the whole body once (or the
    disconnect that cut it short), then what the client sends next."""
    pending: list[Message] = [last] if last is not None else []
    if body is not None:
        pending.append({"type": "http.request", "body": body, "more_body": False})

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed
