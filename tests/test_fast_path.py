"""`POST /api/{user_id}/chat` has two doors: ChatFastPath (backend/fast_path.py) answers the
plain request, the FastAPI route everything else. Every kind of body goes through both, and
the answers must be the same; a field added to ChatRequest must be added to the cases."""

import json
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import pytest
from fastapi import FastAPI
from pydantic import AliasChoices
from pydantic.fields import FieldInfo
from starlette.types import ASGIApp, Receive, Scope, Send

from backend.models.chat import MAX_MESSAGE_CHARS, ChatRequest
from backend.routers.chat import chat
from tests.conftest import auth

# In a body, the session its user already has (each user starts with one, and a task), and
# the call held in it for the user's yes (for the cases that start with one).
SESSION = "<the session>"
APPROVAL = "<the held call>"
PLAIN = "application/json"  # answered by the fast path
ROUTED = "application/json; charset=utf-8"  # another content type: passed to the route


Token = Literal["own", "another user's", "not a token"]


@dataclass(frozen=True)
class Case:
    body: Any  # JSON; bytes are sent as they are
    status: int
    token: Token = "own"
    held: bool = False  # the session starts with a delete held for the user's yes


CASES = {
    "a greeting": Case({"message": "hello"}, 200),
    "a tool call": Case({"message": "add buy milk tomorrow at 5pm"}, 200),
    "spaces around the message": Case({"message": "  show my tasks  "}, 200),
    "an unknown field": Case({"message": "hello", "mood": "cheerful"}, 200),
    "no message": Case({}, 422),
    "an empty message": Case({"message": ""}, 422),
    "a blank message": Case({"message": "   "}, 422),
    "a message that is not text": Case({"message": 7}, 422),
    "a message too long": Case({"message": "x" * (MAX_MESSAGE_CHARS + 1)}, 422),
    "the session": Case({"message": "mark it done", "session_id": SESSION}, 200),
    "a null session": Case({"message": "hello", "session_id": None}, 200),
    "an unknown session": Case(
        {"message": "hello", "session_id": "00000000-0000-0000-0000-000000000000"}, 404
    ),
    "a session id that is no uuid": Case({"message": "hello", "session_id": "first"}, 422),
    "the conversation": Case({"message": "show my tasks", "conversation_id": SESSION}, 200),
    "a null session and the conversation": Case(
        {"message": "what is on my list", "session_id": None, "conversation_id": SESSION}, 200
    ),
    "a conversation id that is no uuid": Case({"message": "hello", "conversation_id": 5}, 422),
    "a timezone": Case(
        {"message": "add call mom tomorrow at 9am", "timezone": "America/New_York"}, 200
    ),
    "a null timezone": Case({"message": "hello", "timezone": None}, 200),
    "an unknown timezone": Case({"message": "hello", "timezone": "Mars/Olympus"}, 422),
    "an empty timezone": Case({"message": "hello", "timezone": ""}, 422),
    "an approval": Case(
        {"session_id": SESSION, "approvals": [{"id": APPROVAL, "approved": True}]}, 200, held=True
    ),
    "a denial with a reason and a message": Case(
        {
            "message": "keep it",
            "session_id": SESSION,
            "approvals": [{"id": APPROVAL, "approved": False, "reason": "still need it"}],
        },
        200,
        held=True,
    ),
    "null approvals": Case({"message": "hello", "approvals": None}, 200),
    "a temporary turn": Case({"message": "hello", "temporary": True}, 200),
    "temporary that is no boolean": Case({"message": "hello", "temporary": "maybe"}, 422),
    "approvals without a session": Case(
        {"approvals": [{"id": APPROVAL, "approved": True}]}, 422, held=True
    ),
    "an unknown approval": Case(
        {"session_id": SESSION, "approvals": [{"id": "apr_unknown", "approved": True}]}, 409
    ),
    "approvals that are not a list": Case({"session_id": SESSION, "approvals": "yes"}, 422),
    "one approval answered twice": Case(
        {
            "session_id": SESSION,
            "approvals": [{"id": APPROVAL, "approved": True}, {"id": APPROVAL, "approved": False}],
        },
        422,
        held=True,
    ),
    "a list": Case([], 422),
    "a string": Case("hello", 422),
    "not JSON": Case(b'{"message": "hello"', 422),
    "a token that does not verify": Case({"message": "hello"}, 401, token="not a token"),
    "another user's token": Case({"message": "hello"}, 403, token="another user's"),
}


def test_the_cases_cover_every_field_of_the_chat_request() -> None:
    """Each name a field is accepted under is sent valid and invalid at least once."""
    for name, field in ChatRequest.model_fields.items():
        for key in _accepted_names(name, field):
            statuses = {
                case.status
                for case in CASES.values()
                if isinstance(case.body, dict) and key in case.body
            }
            assert 200 in statuses, f"no case sends a valid {key!r}: add one to CASES"
            assert statuses - {200}, f"no case sends an invalid {key!r}: add one to CASES"


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_the_fast_path_and_the_route_answer_alike(app: FastAPI, case: Case) -> None:
    """Alice's request is sent plain, Bob's the same with another content type; the two
    users start alike, so their answers must be the same but for ids and clocks."""
    witness = _Witness(app)
    transport = httpx.ASGITransport(app=witness)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answers = []
        for user, content_type in (("alice", PLAIN), ("bob", ROUTED)):
            started = await client.post(
                f"/api/{user}/chat", json={"message": "add water the plants"}, headers=auth(user)
            )
            session = started.json()["session_id"]
            held = None
            if case.held:
                asked = await client.post(
                    f"/api/{user}/chat",
                    json={"message": "delete task 1", "session_id": session},
                    headers=auth(user),
                )
                [held] = [approval["id"] for approval in asked.json()["pending_approvals"]]
            answer = await client.post(
                f"/api/{user}/chat",
                content=_encoded(case.body, session=session, approval=held),
                headers={"Content-Type": content_type, **_authorization(user, case.token)},
            )
            answers.append(_shape(answer, session=session))
    plain, routed = answers
    assert plain[0] == case.status
    assert plain == routed
    # What does not validate or verify the fast path leaves to the route, refusals and all.
    by_fast_path = case.status not in (401, 403, 422)
    steps = 3 if case.held else 2
    assert witness.endpoints[steps - 1 :: steps] == [None if by_fast_path else chat, chat]


class _Witness:
    """The app, noting for each request the endpoint FastAPI's router matched (Starlette
    writes it into the request's scope); a request the fast path answered never reaches
    the router, and has none."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.endpoints: list[Any] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
        self.endpoints.append(scope.get("endpoint"))


def _accepted_names(name: str, field: FieldInfo) -> set[str]:
    alias = field.validation_alias
    choices = alias.choices if isinstance(alias, AliasChoices) else [alias]
    return {name, *(choice for choice in (*choices, field.alias) if isinstance(choice, str))}


def _encoded(body: Any, *, session: str, approval: str | None) -> bytes:
    if isinstance(body, bytes):
        return body
    stand_ins = {f'"{SESSION}"': f'"{session}"', f'"{APPROVAL}"': f'"{approval}"'}
    encoded = json.dumps(body)
    for stand_in, value in stand_ins.items():
        encoded = encoded.replace(stand_in, value)
    return encoded.encode()


def _authorization(user: str, token: Token) -> dict[str, str]:
    if token == "not a token":
        return {"Authorization": "Bearer nonsense"}
    return auth("carol" if token == "another user's" else user)


# What differs from turn to turn: ids (numbered in order of appearance, so that equal ones
# stay equal) and clocks.
_IDS = frozenset(
    {"session_id", "conversation_id", "message_id", "id", "tool_call_id", "approval_id", "todo_id"}
)
_CLOCKS = frozenset({"timestamp", "local_time"})


def _shape(answer: httpx.Response, *, session: str) -> tuple[int, list[str], Any]:
    ids = {session: SESSION}

    def masked(value: Any) -> Any:
        if isinstance(value, list):
            return [masked(item) for item in value]
        if not isinstance(value, dict):
            return value
        return {
            key: "<clock>"
            if key in _CLOCKS
            else ids.setdefault(item, f"<id {len(ids)}>")
            if key in _IDS and isinstance(item, str)
            else masked(item)
            for key, item in value.items()
        }

    headers = sorted(name for name in answer.headers if name != "x-request-id")
    return answer.status_code, headers, masked(answer.json())
