"""Prometheus metrics: what the service is doing, for `/metrics`."""

from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest

DB_STATEMENTS = Counter(
    "todo_agent_db_statements_total", "SQL statements sent to PostgreSQL (engine events)."
)


def render() -> tuple[bytes, str]:
    return generate_latest(), CONTENT_TYPE_LATEST
