"""Schemathesis against /openapi.json: no 5xx, and every answer is one the schema documents.

The real app and PostgreSQL, in-process over ASGI, signed in as a user whose tasks and
sessions exist, so requests get past auth and often reach real rows. Deterministic and
bounded (about 20 s): a few examples per operation, no Hypothesis files in the repository.

It drives schemathesis's engine, as `schemathesis run` does, rather than its pytest plugin:
`schemathesis.pytest.from_fixture`, the plugin's way to test an app that a fixture builds,
fails on pytest 9.2 (it writes `Node._nodeid`, which pytest renamed).
"""

import base64
import json
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis.configuration import set_hypothesis_home_dir
from schemathesis.engine import events, from_schema
from sqlalchemy.ext.asyncio import AsyncEngine

import backend
from backend.main import create_app
from backend.settings import Settings
from tests.chat_helpers import chat
from tests.conftest import serving, token_for
from tests.factories import make_task

BACKEND = str(Path(backend.__file__).parent)
USER = "fuzzer"
MAX_EXAMPLES = 10
# How often a generated value is taken from a dictionary below instead of made up. Cursors
# always are: a made-up one is just invalid, and the coverage phase sends those anyway.
DICTIONARY_PROBABILITY = 0.5

# The default checks that hold the service to its own description, plus the auth and
# stateful ones that follow from the contract. Left out on purpose:
# - positive_data_acceptance: the validators refuse more than a schema can say (a blank
#   message, an unknown timezone, a made-up cursor), so schema-valid data may get 422;
# - negative_data_rejection: lax parsing is intended (`{"completed": 0}` means false);
# - allow_header_conformance: Starlette's 405 lists one route's methods in `Allow`, not
#   every method of the path; the contract says nothing about 405s;
# - ensure_resource_availability: a retried create with the same Idempotency-Key replays
#   the first 201 even when that task has since been deleted, as the contract says;
# - object_level_authorization: needs a second user (test_auth.py covers tenancy);
# - max_response_time: timing is not a contract here (bench/ measures it).
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "ignored_auth",
    "missing_required_header",
    "unsupported_method",
    "use_after_free",
)


def _cursor(position: object) -> str:
    """A cursor as the service encodes one, around a position it never hands out."""
    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode().rstrip("=")


# Values random generation would hardly ever hit, each of which once answered 500.
EDGE_VALUES: dict[str, list[Any]] = {
    # UTC conversion leaves the range of Python's datetime.
    "due_dates": ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "9999-12-31"],
    "session_cursors": [
        _cursor(["2026-01-01T00:00:00+00:00", 5]),  # a number for the session id
        _cursor(["0001-01-01T00:00:00+14:00", "00000000-0000-0000-0000-000000000000"]),
    ],
    "message_cursors": [_cursor(10**30)],  # beyond bigint
}


@pytest.fixture(autouse=True)
def hypothesis_home(tmp_path: Path) -> Iterator[None]:
    """Hypothesis keeps caches under ./.hypothesis even without an example database."""
    set_hypothesis_home_dir(tmp_path / "hypothesis")
    yield
    set_hypothesis_home_dir(None)


@dataclass(frozen=True)
class Seeded:
    """Ids of rows that exist: `kept` ones for reads and edits, `doomed` ones for DELETE."""

    kept_tasks: list[str]
    doomed_tasks: list[str]
    kept_sessions: list[str]
    doomed_sessions: list[str]


@pytest.fixture
async def seeded(settings: Settings, engine: AsyncEngine) -> Seeded:
    async with serving(settings) as client:
        tasks = [
            await make_task(client, user=USER, title=f"Seeded {i}", tags=["seed"]) for i in range(5)
        ]
        sessions = [
            (await chat(client, f"Add a task to water plant {i}", user=USER))["session_id"]
            for i in range(2)
        ]
    refs = [[str(task["number"]), f"#{task['number']}", task["id"]] for task in tasks]
    return Seeded(
        kept_tasks=[ref for task_refs in refs[:3] for ref in task_refs],
        doomed_tasks=[ref for task_refs in refs[3:] for ref in task_refs],
        kept_sessions=sessions[:1],
        doomed_sessions=sessions[1:],
    )


def _from(dictionary: str, probability: float = DICTIONARY_PROBABILITY) -> dict[str, Any]:
    return {"dictionary": dictionary, "probability": probability}


def fuzz_config(seeded: Seeded) -> schemathesis.Config:
    values = {
        "kept_tasks": seeded.kept_tasks,
        "doomed_tasks": seeded.doomed_tasks,
        "kept_sessions": seeded.kept_sessions,
        "doomed_sessions": seeded.doomed_sessions,
        **EDGE_VALUES,
    }
    return schemathesis.Config.from_dict(
        {
            "headers": {"Authorization": f"Bearer {token_for(USER)}"},
            "parameters": {
                "path.user_id": USER,
                "path.task_id": _from("kept_tasks"),
                "path.session_id": _from("kept_sessions"),
                "body.due_at": _from("due_dates"),
            },
            "dictionaries": {name: {"values": entries} for name, entries in values.items()},
            "operations": [
                # A stream of events never ends, so no example of it could finish; its
                # answers (401, 403, 422 for a bad Last-Event-ID) are tests/test_events.py's.
                {"include-operation-id": "followEvents", "enabled": False},
                {
                    "include-operation-id": "deleteTask",
                    "parameters": {"path.task_id": _from("doomed_tasks")},
                },
                {
                    "include-operation-id": "deleteSession",
                    "parameters": {"path.session_id": _from("doomed_sessions")},
                },
                {
                    "include-operation-id": "listSessions",
                    "parameters": {"query.cursor": _from("session_cursors", 1.0)},
                },
                {
                    "include-operation-id": "listSessionMessages",
                    "parameters": {"query.cursor": _from("message_cursors", 1.0)},
                },
            ],
            "generation": {
                "max-examples": MAX_EXAMPLES,
                "deterministic": True,
                "database": "none",
                # A failure is reported as found: shrinking it would take minutes.
                "no-shrink": True,
            },
            "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
            "request-timeout": 10,
        }
    )


def _where(error: BaseException) -> str:
    """The deepest line of ours the exception passed, and the request (schemathesis notes it)."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [frame for frame in frames if frame.filename.startswith(BACKEND)] or frames
    place = f"{ours[-1].filename}:{ours[-1].lineno}" if ours else "?"
    return f"at {place}\n    " + " ".join(getattr(error, "__notes__", [])).strip()


def test_api_answers_as_documented(settings: Settings, seeded: Seeded) -> None:
    # Served on schemathesis's own event loop, which also runs the app's lifespan; its
    # pytest plugin ends that lifespan when the test is torn down.
    schema = schemathesis.openapi.from_asgi(
        "/openapi.json", create_app(settings), config=fuzz_config(seeded)
    )
    # Each distinct problem once, with a request that shows it.
    problems: dict[tuple[str, str], str] = {}
    scenarios = 0
    for event in from_schema(schema).execute():
        if isinstance(event, events.FatalError):
            raise event.exception
        if isinstance(event, events.NonFatalError):
            # An exception out of the app, which a server would answer with 500.
            error = event.value
            first_line = next(iter(str(error).splitlines()), "")
            problems.setdefault(
                (event.label, f"{type(error).__name__}: {first_line}"), _where(error)
            )
        elif isinstance(event, events.ScenarioFinished):
            scenarios += 1
            for checks in event.recorder.checks.values():
                for check in checks:
                    if (info := check.failure_info) is not None:
                        problem = f"{info.failure.title}: {info.failure.message}"
                        problems.setdefault((event.recorder.label, problem), info.code_sample)
    assert scenarios > 20, "schemathesis hardly ran"
    report = "\n\n".join(
        f"{label}: {problem}\n    {example}"
        for (label, problem), example in sorted(problems.items())
    )
    assert not problems, f"{len(problems)} problems:\n{report}"
