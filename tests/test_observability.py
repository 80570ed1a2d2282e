"""Request ids, JSON logs, the body size cap, Prometheus metrics, and a graceful stop."""

import asyncio
import io
import json
import logging
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from backend.logs import JsonFormatter, RequestIdFilter, request_id_var
from backend.settings import Settings
from tests.chat_helpers import chat, chat_stream, stored_messages
from tests.conftest import TEST_SECRET, auth, server_env, serving
from tests.fake_openai import FakeOpenAI, call, delay, error, hang, reply, tool_calls
from tests.servers import ServerProcess, free_port

CHAT_ROUTE = "/api/{user_id}/chat"
TOO_LARGE = {"detail": "Request body too large."}
# Counters the agent service moves (backend/services/agent.py and model_calls.py call
# backend.metrics and backend.logs).


class CapturedLogs:
    """Everything logged during a test, formatted exactly as the service writes it."""

    def __init__(self) -> None:
        self.stream = io.StringIO()

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    def entries(self, logger: str | None = None) -> list[dict[str, Any]]:
        entries = [json.loads(line) for line in self.text.splitlines()]
        return [entry for entry in entries if logger is None or entry["logger"] == logger]


@pytest.fixture
def logs() -> Iterator[CapturedLogs]:
    captured = CapturedLogs()
    handler = logging.StreamHandler(captured.stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield captured
    finally:
        root.removeHandler(handler)


class Scrape:
    """One `/metrics` answer, parsed."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples = [
            sample for family in text_string_to_metric_families(text) for sample in family.samples
        ]

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples called `name` whose labels include `labels`."""
        return sum(
            sample.value
            for sample in self.samples
            if sample.name == name and labels.items() <= sample.labels.items()
        )


async def scrape(client: httpx.AsyncClient) -> Scrape:
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return Scrape(response.text)


# --------------------------------------------------------------------------- request ids


async def test_every_response_carries_a_generated_request_id(client: httpx.AsyncClient) -> None:
    first = await client.get("/health")
    second = await client.get("/nowhere")
    ids = [first.headers["x-request-id"], second.headers["x-request-id"]]
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert ids[0] != ids[1]


async def test_a_callers_request_id_is_echoed_and_a_bad_one_replaced(
    client: httpx.AsyncClient,
) -> None:
    given = await client.get("/health", headers={"X-Request-ID": "edge-7f3a:retry=1"})
    assert given.headers["x-request-id"] == "edge-7f3a:retry=1"
    for bad in (b"x" * 129, b"caf\xc3\xa9", b"tab\there"):
        replaced = await client.get("/health", headers=[(b"X-Request-ID", bad)])
        assert replaced.headers["x-request-id"].encode() != bad
        assert len(replaced.headers["x-request-id"]) == 32


# --------------------------------------------------------------------------- logs


async def test_one_json_access_line_per_request_with_the_route_template(
    client: httpx.AsyncClient, logs: CapturedLogs
) -> None:
    headers = auth("alice")
    response = await client.post(
        "/api/alice/chat", json={"message": "my surprise party for Bob"}, headers=headers
    )
    assert response.status_code == 200
    missing = await client.get("/api/alice/nothing/here", headers=headers)

    access = logs.entries("todo_agent.access")
    assert len(access) == 2
    line = access[0]
    assert {key: line[key] for key in ("level", "method", "route", "status")} == {
        "level": "INFO",
        "method": "POST",
        "route": CHAT_ROUTE,
        "status": 200,
    }
    assert line["request_id"] == response.headers["x-request-id"]
    assert isinstance(line["latency_ms"], float)
    assert line["latency_ms"] > 0
    assert line["ts"].endswith("Z")
    assert line["message"] == f"POST {CHAT_ROUTE} 200"
    assert access[1]["route"] == "unmatched"
    assert access[1]["status"] == missing.status_code == 404
    assert access[1]["request_id"] == missing.headers["x-request-id"]
    # Nothing secret or personal, in any line logged meanwhile.
    token = headers["Authorization"].removeprefix("Bearer ")
    for private in (token, "Bearer", "surprise party", TEST_SECRET):
        assert private not in logs.text
    assert "alice" not in json.dumps(access)


async def test_an_unexpected_error_is_a_500_with_its_request_id_in_every_line(
    app: FastAPI, logs: CapturedLogs
) -> None:
    async def explode() -> None:
        raise RuntimeError("boom")

    app.add_api_route("/explode", explode)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.get("/explode", headers={"X-Request-ID": "trace-500"})

    assert response.status_code == 500
    assert response.headers["x-request-id"] == "trace-500"
    [error] = logs.entries("todo_agent.errors")
    [access] = logs.entries("todo_agent.access")
    assert error["request_id"] == access["request_id"] == "trace-500"
    assert "RuntimeError: boom" in error["exc"]
    assert (access["route"], access["status"], access["level"]) == ("/explode", 500, "WARNING")


def test_log_lines_carry_the_request_id_of_their_context(logs: CapturedLogs) -> None:
    service = logging.getLogger("todo_agent.test")
    token = request_id_var.set("req-42")
    try:
        service.warning("tool %s failed", "add_todo", extra={"tool": "add_todo"})
    finally:
        request_id_var.reset(token)
    service.warning("outside any request")
    try:
        raise ValueError("boom")
    except ValueError:
        service.exception("with a traceback")

    inside, outside, failed = logs.entries("todo_agent.test")
    assert inside["request_id"] == "req-42"
    assert inside["message"] == "tool add_todo failed"
    assert inside["tool"] == "add_todo"
    assert inside["level"] == "WARNING"
    assert "request_id" not in outside
    assert failed["level"] == "ERROR"
    assert "ValueError: boom" in failed["exc"]


# --------------------------------------------------------------------------- body size cap


async def test_a_body_whose_content_length_is_over_the_cap_is_refused(
    client: httpx.AsyncClient,
) -> None:
    body = json.dumps({"message": "x" * (65 * 1024)}).encode()
    response = await client.post(
        "/api/alice/chat",
        content=body,
        headers={**auth("alice"), "Content-Type": "application/json"},
    )
    assert response.status_code == 413
    assert response.json() == TOO_LARGE
    assert response.headers["x-request-id"]
    sessions = await client.get("/api/alice/sessions", headers=auth("alice"))
    assert sessions.json()["data"] == []


async def _chunked(*pieces: bytes, repeat_middle: int = 1) -> AsyncIterator[bytes]:
    yield pieces[0]
    for _ in range(repeat_middle):
        yield pieces[1]
    yield pieces[2]


async def test_a_chunked_body_that_grows_past_the_cap_is_refused(
    client: httpx.AsyncClient,
) -> None:
    headers = {**auth("alice"), "Content-Type": "application/json"}
    too_big = _chunked(b'{"message": "', b"x" * 8192, b'"}', repeat_middle=9)
    refused = await client.post("/api/alice/chat", content=too_big, headers=headers)
    small = _chunked(b'{"title": "', b"Chunked but small", b'"}')
    accepted = await client.post("/api/alice/tasks", content=small, headers=headers)

    assert refused.status_code == 413
    assert refused.json() == TOO_LARGE
    assert refused.headers["x-request-id"]
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["title"] == "Chunked but small"
    sessions = await client.get("/api/alice/sessions", headers=auth("alice"))
    assert sessions.json()["data"] == []


# --------------------------------------------------------------------------- metrics


async def test_metrics_expose_every_family_and_http_and_db_counters_move(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    before = await scrape(agent_client)
    for family in (
        "todo_agent_http_request_duration_seconds histogram",
        "todo_agent_db_statements_total counter",
        "todo_agent_model_calls_total counter",
        "todo_agent_model_call_seconds histogram",
        "todo_agent_tokens_total counter",
        "todo_agent_stub_fallbacks_total counter",
        "todo_agent_tool_calls_total counter",
        "todo_agent_chat_turns_total counter",
        "todo_agent_chat_turn_seconds histogram",
        "todo_agent_chat_turns_in_flight gauge",
    ):
        assert f"# TYPE {family}\n" in before.text
    model.script(reply("Hello!"))
    await chat(agent_client, "hi")
    after = await scrape(agent_client)

    chat_requests = {
        "name": "todo_agent_http_request_duration_seconds_count",
        "method": "POST",
        "route": CHAT_ROUTE,
        "status": "200",
    }
    assert after.value(**chat_requests) == before.value(**chat_requests) + 1
    assert (
        after.value("todo_agent_http_request_duration_seconds_bucket", route=CHAT_ROUTE, le="+Inf")
        == before.value(
            "todo_agent_http_request_duration_seconds_bucket", route=CHAT_ROUTE, le="+Inf"
        )
        + 1
    )
    scrapes = ("todo_agent_http_request_duration_seconds_count", "/metrics")
    assert after.value(scrapes[0], route=scrapes[1]) >= 1
    assert after.value("todo_agent_db_statements_total") > before.value(
        "todo_agent_db_statements_total"
    )


async def test_a_model_turn_counts_calls_tokens_tools_and_logs_one_line_each(
    agent_client: httpx.AsyncClient, model: FakeOpenAI, logs: CapturedLogs
) -> None:
    model.script(
        tool_calls(
            call("add_todo", {"title": "Milk"}),
            usage={"prompt_tokens": 100, "completion_tokens": 9},
        ),
        reply("Added task 1: Milk.", usage={"prompt_tokens": 130, "completion_tokens": 6}),
    )
    before = await scrape(agent_client)
    response = await agent_client.post(
        "/api/alice/chat", json={"message": "add milk please"}, headers=auth("alice")
    )
    after = await scrape(agent_client)

    def moved(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert response.status_code == 200
    assert moved("todo_agent_model_calls_total", outcome="ok") == 2
    assert moved("todo_agent_model_call_seconds_count") == 2
    assert moved("todo_agent_tokens_total", kind="prompt") == 230
    assert moved("todo_agent_tokens_total", kind="completion") == 15
    assert moved("todo_agent_tool_calls_total", tool="add_todo", outcome="ok") == 1
    assert moved("todo_agent_chat_turns_total", outcome="model") == 1
    assert moved("todo_agent_chat_turn_seconds_count") == 1
    assert moved("todo_agent_stub_fallbacks_total") == 0
    assert after.value("todo_agent_chat_turns_in_flight") == 0

    request_id = response.headers["x-request-id"]
    agent_lines = logs.entries("todo_agent.agent")
    calls = [line for line in agent_lines if line["message"] == "model call"]
    [turn] = [line for line in agent_lines if line["message"] == "turn"]
    assert [c["outcome"] for c in calls] == ["ok", "ok"]
    assert [c["tools"] for c in calls] == [["add_todo"], []]
    assert all(line["request_id"] == request_id for line in [*calls, turn])
    assert turn["session_id"] == response.json()["session_id"]
    assert turn["outcome"] == "model"
    assert turn["tools"] == ["add_todo"]
    assert turn["fallback_reason"] is None
    assert turn["model_calls"] == 2
    assert 0 < turn["model_ms"] <= turn["latency_ms"]
    assert "add milk" not in logs.text
    assert "Milk" not in logs.text


async def test_a_failing_model_counts_its_failure_kind_and_the_stub_fallback(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.default = error(503)
    before = await scrape(agent_client)
    answer = await chat(agent_client, "Add a task to buy milk")
    after = await scrape(agent_client)

    def moved(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert answer["using_stub"] is True
    assert moved("todo_agent_model_calls_total", outcome="http_5xx") == model.requests_count
    assert moved("todo_agent_model_calls_total", outcome="ok") == 0
    assert moved("todo_agent_stub_fallbacks_total", reason="http_5xx") == 1
    assert moved("todo_agent_tool_calls_total", tool="add_todo", outcome="ok") == 1
    assert moved("todo_agent_chat_turns_total", outcome="stub") == 1


@pytest.mark.parametrize("failure", ["timeout", "connection"])
async def test_a_model_that_times_out_or_cannot_be_reached_is_counted_as_such(
    model_settings: Settings, model: FakeOpenAI, engine: object, failure: str
) -> None:
    model.default = hang()
    unreachable = {"openai_base_url": f"http://127.0.0.1:{free_port()}/v1"}
    settings = model_settings.model_copy(
        update={
            "openai_timeout_s": 0.3,
            "openai_max_retries": 0,
            **(unreachable if failure == "connection" else {}),
        }
    )
    async with serving(settings) as client:
        before = await scrape(client)
        answer = await chat(client, "Add a task to buy milk")
        after = await scrape(client)
    assert answer["using_stub"] is True
    reason = {"name": "todo_agent_stub_fallbacks_total", "reason": failure}
    assert after.value(**reason) == before.value(**reason) + 1


async def test_without_a_model_the_stub_fallback_is_counted_as_no_api_key(
    client: httpx.AsyncClient,
) -> None:
    before = await scrape(client)
    await chat(client, "What's pending?")
    after = await scrape(client)
    reason = {"name": "todo_agent_stub_fallbacks_total", "reason": "no_api_key"}
    assert after.value(**reason) == before.value(**reason) + 1
    stub_turns = {"name": "todo_agent_chat_turns_total", "outcome": "stub"}
    assert after.value(**stub_turns) == before.value(**stub_turns) + 1


# --------------------------------------------------------------------------- real servers


def _json_lines(server: ServerProcess) -> list[dict[str, Any]]:
    """The server's output, which must be JSON lines only (uvicorn's included)."""
    return [json.loads(line) for line in server.logs().splitlines() if line.strip()]


async def test_sigterm_mid_turn_still_answers_stores_the_replies_and_exits_zero(
    tmp_path: Path, database_url: str, model: FakeOpenAI, engine: object
) -> None:
    env = server_env(database_url, model, SHUTDOWN_GRACE_S="20")
    model.default = delay(1.5, reply("Slow, but here it is."))
    server = ServerProcess(env, log=tmp_path / "first.log").start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as c:
            plain = asyncio.create_task(chat(c, "take your time", user="alice"))
            streamed = asyncio.create_task(chat_stream(c, "stream it slowly", user="bob"))
            await asyncio.to_thread(model.wait_for_requests, 2, 10)
            assert server.process is not None
            server.process.send_signal(signal.SIGTERM)
            answer, events = await plain, await streamed
        exit_code = await asyncio.to_thread(server.process.wait, 30)
    finally:
        server.kill()

    assert answer["response"] == "Slow, but here it is."
    done = dict(events)["done"]
    assert done["response"] == "Slow, but here it is."
    assert exit_code == 0, server.logs()
    access = {
        line["route"]: line for line in _json_lines(server) if line["logger"] == "todo_agent.access"
    }
    assert access[CHAT_ROUTE]["status"] == 200
    assert access[CHAT_ROUTE + "/stream"]["status"] == 200
    assert any(line["logger"] == "uvicorn.error" for line in _json_lines(server))

    with ServerProcess(env, log=tmp_path / "second.log") as second:
        async with httpx.AsyncClient(base_url=second.url) as c:
            alices = await stored_messages(c, answer["session_id"], user="alice")
            bobs = await stored_messages(c, done["session_id"], user="bob")
    assert [(m["role"], m["content"]) for m in alices] == [
        ("user", "take your time"),
        ("assistant", "Slow, but here it is."),
    ]
    assert [(m["role"], m["content"]) for m in bobs] == [
        ("user", "stream it slowly"),
        ("assistant", "Slow, but here it is."),
    ]


def test_metrics_of_several_workers_are_summed_in_every_scrape(
    tmp_path: Path, database_url: str, engine: object
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = server_env(database_url, TMPDIR=str(temp))
    health = {"name": "todo_agent_http_request_duration_seconds_count", "route": "/health"}
    with ServerProcess(env, workers=2, log=tmp_path / "serve.log") as server:
        # One metrics directory; beside it maybe multiprocessing's own (the document readers').
        metrics = [p for p in temp.iterdir() if p.name.startswith("todo-agent-metrics-")]
        assert len(metrics) == 1, list(temp.iterdir())
        start = Scrape(httpx.get(f"{server.url}/metrics").text).value(**health)
        for _ in range(20):  # a new connection each time, so both workers take some
            assert httpx.get(f"{server.url}/health").status_code == 200
        counts = [Scrape(httpx.get(f"{server.url}/metrics").text).value(**health) for _ in range(8)]
        assert server.stop() == 0

    assert counts == [start + 20] * 8, server.logs()
    # The metrics directory went with the server. (multiprocessing's own, of the workers'
    # document readers, is theirs to keep or clean: only a long TMPDIR makes one there.)
    assert [p for p in temp.iterdir() if not p.name.startswith("pymp-")] == []
    assert all(line["level"] != "ERROR" for line in _json_lines(server))
