"""Prometheus metrics: what the service is doing, for `/metrics`.

With several worker processes (`todo-agent serve --workers N`), `serve` points
PROMETHEUS_MULTIPROC_DIR at a fresh directory before the workers start; each worker then
writes its samples there and a scrape of any worker aggregates all of them. Without it,
metrics live in process memory and a scrape reads them directly.
"""

import functools
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

# A process a worker starts as the server goes away (multiprocessing's spawn of a document
# reader imports this module again) may find the metrics directory already removed: it
# keeps its metrics in memory then, rather than failing to start. Before prometheus_client
# is imported, since it picks its storage at import time.
if (_given := os.environ.get("PROMETHEUS_MULTIPROC_DIR")) and not os.path.isdir(_given):
    del os.environ["PROMETHEUS_MULTIPROC_DIR"]

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Read once: prometheus_client picks its storage (memory or files) at import time too.
_MULTIPROC_DIR = os.environ.get(MULTIPROC_DIR_ENV)
# No `*_created` series next to every counter and histogram: nothing here reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]

DB_STATEMENTS = Counter(
    "todo_agent_db_statements_total",
    "SQL statements sent to PostgreSQL for requests and turns (the outbox's background loops "
    "are not counted).",
)
# Off in the tasks of background loops: their polling is not what a request costs.
_COUNTING: ContextVar[bool] = ContextVar("todo_agent_counting_statements", default=True)


def count_statement() -> None:
    if _COUNTING.get():
        DB_STATEMENTS.inc()


def not_counting_statements() -> None:
    """Called first in a background task: the statements it sends are not counted."""
    _COUNTING.set(False)


HTTP_REQUEST_SECONDS = Histogram(
    "todo_agent_http_request_duration_seconds",
    "HTTP requests, from the first byte in to the last byte out (streams included), by "
    "method, route template ('unmatched' when no route took the request) and status.",
    ["method", "route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)

MODEL_CALLS = Counter(
    "todo_agent_model_calls_total",
    "Calls to the model (each attempt), by outcome: ok, rate_limited, timeout, connection, "
    "http_4xx, http_5xx, bad_response.",
    ["outcome"],
)
MODEL_CALL_SECONDS = Histogram(
    "todo_agent_model_call_seconds",
    "Time per model call (each attempt, whatever its outcome).",
    buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60),
)
TOKENS = Counter("todo_agent_tokens_total", "Tokens the model reported using, by kind.", ["kind"])
STUB_FALLBACKS = Counter(
    "todo_agent_stub_fallbacks_total",
    "Turns answered by the stub responder, by reason: no_api_key, token_budget, or the "
    "model failure that made it take over (rate_limited, timeout, http_5xx, ...).",
    ["reason"],
)
TOOL_CALLS = Counter(
    "todo_agent_tool_calls_total",
    "Tool calls carried out, by tool, outcome (ok, error) and who called: agent (the model "
    "or the stub in a chat turn) or mcp (a client of /mcp).",
    ["tool", "outcome", "via"],
)
CHAT_TURNS = Counter(
    "todo_agent_chat_turns_total",
    "Chat turns, by outcome: model (the model answered), stub (the stub answered), error.",
    ["outcome"],
)
CHAT_TURN_SECONDS = Histogram(
    "todo_agent_chat_turn_seconds",
    "Time to answer and store a chat turn.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120),
)
CHAT_TURNS_IN_FLIGHT = Gauge(
    "todo_agent_chat_turns_in_flight",
    "Chat turns running now (streamed ones included).",
    multiprocess_mode="livesum",
)
APPROVALS = Counter(
    "todo_agent_approvals_total",
    "Tool calls held for the person's yes, and how they were answered",
    ["tool", "state"],  # state: held, approved, denied, expired
)

# Events: the outbox, the live streams, reminders and webhooks.
EVENTS_WRITTEN = Gauge(
    "todo_agent_events_written",
    "Events written to the outbox since the database was created (its id sequence; read by "
    "each replica every few seconds).",
    multiprocess_mode="max",
)
EVENTS_STREAMED = Counter(
    "todo_agent_events_streamed_total", "Events sent to open event streams (each stream counts)."
)
EVENT_STREAMS_OPEN = Gauge(
    "todo_agent_event_streams_open", "Event streams open now.", multiprocess_mode="livesum"
)
TURNS_TAKEN_OVER = Counter(
    "todo_agent_turns_taken_over_total",
    "Turns whose replica died or drained, finished by this one once their lease lapsed.",
)
REMINDERS_FIRED = Counter(
    "todo_agent_reminders_fired_total", "Reminders fired, by whether they were late.", ["late"]
)
REMINDER_LAG_SECONDS = Histogram(
    "todo_agent_reminder_lag_seconds",
    "From a reminder's time to its firing.",
    buckets=(0.5, 1, 2, 3, 5, 10, 30, 60, 300, 3600, 86400),
)
NOTIFY_DELIVERIES = Counter(
    "todo_agent_notify_deliveries_total",
    "Notification sends (reminders, daily plans, tests, codes), by channel (push, email, "
    "ntfy) and outcome: delivered, retry, gone (a push subscription the service said is "
    "gone), failed, refused (an address not allowed), gave_up (after the last retry), held "
    "(quiet hours).",
    ["channel", "outcome"],
)
WEBHOOK_DELIVERIES = Counter(
    "todo_agent_webhook_deliveries_total",
    "Webhook delivery attempts, by outcome: delivered, retry (failed, will be retried), "
    "gave_up (failed after the last retry).",
    ["outcome"],
)
WEBHOOK_BACKLOG = Gauge(
    "todo_agent_webhook_backlog",
    "Events still to be delivered to the webhook (read every few seconds).",
    multiprocess_mode="max",
)


def failure_kind(reason: str) -> str:
    """A failure reason as a low-cardinality label: http_503 -> http_5xx."""
    if reason.startswith("http_") and reason[5:].isdigit():
        return f"http_{reason[5]}xx"
    return reason


@functools.cache
def _child(metric: Any, *values: str) -> Any:
    """The child of `metric` for these label values: `labels()` takes a lock and builds a
    key on every call, and a turn records several. Label values here come from fixed sets."""
    return metric.labels(*values)


def record_model_call(
    *,
    seconds: float,
    outcome: str,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    cached_tokens: int = 0,
) -> None:
    """One model call: `outcome` is "ok" or the failure reason (rate_limited, http_503...).
    Cached tokens are the part of the prompt tokens the provider served from its cache."""
    _child(MODEL_CALLS, failure_kind(outcome)).inc()
    MODEL_CALL_SECONDS.observe(seconds)
    if prompt_tokens:
        _child(TOKENS, "prompt").inc(prompt_tokens)
    if completion_tokens:
        _child(TOKENS, "completion").inc(completion_tokens)
    if cached_tokens:
        _child(TOKENS, "cached").inc(cached_tokens)


def record_stub_fallback(reason: str) -> None:
    _child(STUB_FALLBACKS, failure_kind(reason)).inc()


def record_tool_call(tool: str, *, ok: bool, via: Literal["agent", "mcp"] = "agent") -> None:
    """`tool` must come from a fixed set (the known tool names, or "unknown")."""
    _child(TOOL_CALLS, tool, "ok" if ok else "error", via).inc()


def record_approval(tool: str, state: str) -> None:
    """A call held (`held`), or answered (`approved`, `denied`, `expired`); `tool` is a
    known tool name (only those are held)."""
    _child(APPROVALS, tool, state).inc()


@dataclass
class TrackedTurn:
    outcome: str = "error"  # set to "model" or "stub" once the reply is stored
    started: float = field(default_factory=time.perf_counter)

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started


@contextmanager
def track_turn() -> Iterator[TrackedTurn]:
    """Count a turn in flight while the block runs, then by its outcome and duration."""
    tracked = TrackedTurn()
    CHAT_TURNS_IN_FLIGHT.inc()
    try:
        yield tracked
    finally:
        CHAT_TURNS_IN_FLIGHT.dec()
        _child(CHAT_TURNS, tracked.outcome).inc()
        CHAT_TURN_SECONDS.observe(tracked.elapsed_s)


def render() -> tuple[bytes, str]:
    if _MULTIPROC_DIR is None:
        return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
    # Every worker's files, read fresh for each scrape (prometheus_client's recipe).
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=_MULTIPROC_DIR)  # type: ignore[no-untyped-call]
    return generate_latest(registry), CONTENT_TYPE_LATEST


def release_process_metrics() -> None:
    """A worker that stops takes its in-flight gauge with it (counters stay summed)."""
    if _MULTIPROC_DIR is not None:
        multiprocess.mark_process_dead(os.getpid(), path=_MULTIPROC_DIR)  # type: ignore[no-untyped-call]
