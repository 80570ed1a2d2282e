"""The chat endpoints: a message in, the agent's answer out (whole, or as it is written)."""

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security.utils import get_authorization_scheme_param
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.context import AppContext
from backend.deps import Agent, Context, CurrentUser, IdempotencyKey, ensure_user
from backend.errors import DomainError, error_response
from backend.models.chat import ChatRequest, ChatResponse
from backend.models.errors import API_ERRORS, error_responses
from backend.services.agent import OpenAIAgentService, Turn
from backend.services.idempotency import Replay, check_key

router = APIRouter(prefix="/api/{user_id}", tags=["chat"], responses=API_ERRORS)
EventQueue = asyncio.Queue[tuple[str, dict[str, Any]]]
_ERRORS = error_responses(409, 429)
_REPLAYED = {"Idempotent-Replayed": "true"}


@router.post("/chat", operation_id="chat", response_model=ChatResponse, responses=_ERRORS)
async def chat(
    user: CurrentUser, agent: Agent, request: ChatRequest, idempotency_key: IdempotencyKey = None
) -> Any:
    """Send a message; the agent answers, using tools on the user's todos."""
    turn = await agent.begin(
        identity=user,
        request=request,
        idempotency_key=check_key(idempotency_key) if idempotency_key is not None else None,
    )
    if isinstance(turn, Replay):
        return JSONResponse(turn.body, turn.status_code, headers=_REPLAYED)
    # Shielded: if the client goes away, the turn still completes and is stored.
    answer = await asyncio.shield(agent.start(turn))
    # Already validated: serialize it once here rather than have FastAPI re-validate it.
    return Response(answer.model_dump_json(), media_type="application/json")


@router.post(
    "/chat/stream",
    operation_id="chatStream",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "Server-sent events: session, delta, tool_call, tool_result, "
            "then done (the same JSON as /chat) or error.",
            "content": {"text/event-stream": {}},
        },
        **_ERRORS,
    },
)
async def chat_stream(
    user: CurrentUser,
    agent: Agent,
    context: Context,
    request: ChatRequest,
    idempotency_key: IdempotencyKey = None,
) -> StreamingResponse:
    """Send a message and receive the answer as server-sent events while it is written."""
    turn = await agent.begin(
        identity=user,
        request=request,
        idempotency_key=check_key(idempotency_key) if idempotency_key is not None else None,
    )
    if isinstance(turn, Replay):
        events, headers = _replayed(turn), _REPLAYED
    else:
        events, headers = _start_streaming(agent, turn), {}
    return StreamingResponse(
        _frames(events, keepalive_s=context.settings.chat_stream_keepalive_s),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers},
    )


def _start_streaming(agent: OpenAIAgentService, turn: Turn) -> EventQueue:
    events: EventQueue = asyncio.Queue()
    agent.stream(turn, lambda event, data: events.put_nowait((event, data)))
    return events


def _replayed(replay: Replay) -> EventQueue:
    events: EventQueue = asyncio.Queue()
    for event in replay.events():
        events.put_nowait(event)
    return events


async def _frames(events: EventQueue, *, keepalive_s: float) -> AsyncIterator[str]:
    """SSE frames until `done` or `error`; comments keep idle proxies from closing."""
    while True:
        try:
            async with asyncio.timeout(keepalive_s):
                batch = [await events.get()]
        except TimeoutError:
            yield ": keep-alive\n\n"
            continue
        while not events.empty():  # whatever else is ready goes out in the same write
            batch.append(events.get_nowait())
        yield "".join(
            f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
            for event, data in batch
        )
        if any(event in ("done", "error") for event, _ in batch):
            return


class ChatFastPath:
    """`POST /api/{user_id}/chat` without FastAPI's request handling, for the plain case.

    A no-tool turn costs the service about a millisecond and a half of CPU, and FastAPI's
    routing, dependency solving, body parsing and response handling were a sixth of it. The
    route above stays the one FastAPI documents and serves; this ASGI layer, installed
    inside the CORS and server-error middleware, answers the requests it can prove plain
    with the very same steps (`verify`, `ensure_user`, `ChatRequest`, `agent.begin`,
    `agent.start`) and the same bytes. Anything else passes through to FastAPI untouched,
    its body replayed: another method or path, a root path, no bearer token, another
    content type, no Content-Length, an Idempotency-Key, a body that does not validate, a
    token that does not verify or names another user: the route answers those, with its
    own errors. What `begin` refuses and how a turn fails (`DomainError`s) are answered as the
    app's handler for them answers them."""

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
            turn = await context.agent.begin(identity=identity, request=request)
            assert not isinstance(turn, Replay)  # only with an Idempotency-Key
            # Shielded: if the client goes away, the turn still completes and is stored.
            answer = await asyncio.shield(context.agent.start(turn))
        except DomainError as refused:  # refused, or the turn failed (the database away)
            return error_response(refused)
        return answer.__pydantic_serializer__.to_json(answer)

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
