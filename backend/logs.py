"""Structured logs: one JSON object per line on stderr, each tagged with its request id.

`configure_logging` runs once per process (the CLI, and the app factory for workers and
for servers started without the CLI). Every logger, uvicorn's included, propagates to the
one root handler; uvicorn's access log is off because `backend.middleware` writes ours.

Log lines carry ids, names, counts and timings. Message text, tokens, secrets and
Authorization headers are never logged at INFO.
"""

import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any, TextIO

# The request being served; asyncio tasks started while serving it (a chat turn) inherit it.
request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)

MAX_REQUEST_ID_LENGTH = 128

# Attributes every LogRecord has; anything else on a record came in through `extra=`.
_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
    "request_id",
    "color_message",  # uvicorn's ANSI-coloured copy of the message
}
# Libraries that log routine detail at INFO: a line per outgoing HTTP call (the model,
# JWKS), the embedded PostgreSQL's command lines, the MCP SDK's transport per request.
_CHATTY_LOGGERS = ("httpx", "httpx2", "httpcore", "pgserver", "alembic.runtime.plugins", "mcp")

_agent_logger = logging.getLogger("todo_agent.agent")


def new_request_id() -> str:
    """32 random hex digits: the shape of uuid4().hex, at a third of the cost."""
    return os.urandom(16).hex()


def valid_request_id(value: str) -> bool:
    """A caller's X-Request-ID is echoed and logged only when it is short printable ASCII."""
    return 0 < len(value) <= MAX_REQUEST_ID_LENGTH and value.isascii() and value.isprintable()


class RequestIdFilter(logging.Filter):
    """Stamps each record with the request id of the context it was logged in."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "message", "request_id", ...extra fields, "exc"}`."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            entry["request_id"] = request_id
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRIBUTES:
                entry[key] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


def _timestamp(created: float) -> str:
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{millis:03d}Z"


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever `sys.stderr` is at the time (test runners swap it)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _: TextIO) -> None:
        pass


def configure_logging(level: str) -> None:
    """JSON lines on stderr for every logger, at `level`. Safe to call more than once: the
    handler is installed once, the level follows the latest call."""
    root = logging.getLogger()
    root.setLevel(level)
    if not any(isinstance(handler, _StderrHandler) for handler in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(JsonFormatter())
        handler.addFilter(RequestIdFilter())
        root.addHandler(handler)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.asgi"):
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True
    access = logging.getLogger("uvicorn.access")
    access.handlers.clear()
    access.propagate = False
    access.disabled = True
    for name in _CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))


def log_model_call(
    *,
    session_id: uuid.UUID | str,
    latency_ms: float,
    outcome: str,
    tools: Sequence[str] = (),
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
) -> None:
    """One line per model call (each attempt, retries included). `tools`: the names of
    the tools the model asked for."""
    if _agent_logger.isEnabledFor(logging.INFO):
        _agent_logger.info(
            "model call",
            extra={
                "session_id": str(session_id),
                "latency_ms": round(latency_ms, 1),
                "outcome": outcome,
                "tools": list(tools),
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
            },
        )


def log_turn(
    *,
    session_id: uuid.UUID | str,
    outcome: str,
    latency_ms: float,
    model_ms: float,
    model_calls: int,
    tools: Sequence[str],
    fallback_reason: str | None,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
) -> None:
    """One line per chat turn: how it was answered, where the time went, what it did."""
    if _agent_logger.isEnabledFor(logging.INFO):
        _agent_logger.info(
            "turn",
            extra={
                "session_id": str(session_id),
                "outcome": outcome,
                "latency_ms": round(latency_ms, 1),
                "model_ms": round(model_ms, 1),
                "model_calls": model_calls,
                "tools": list(tools),
                "fallback_reason": fallback_reason,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
            },
        )
