"""What the bench runs on: the database, the server processes, and what /proc says of them."""

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import httpx

from backend.settings import normalize_database_url
from tests.servers import ServerProcess

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# The service reads these; a developer's shell must not leak into what is measured.
_SCRUBBED_PREFIXES = (
    "OPENAI_",
    "JWT_",
    "AGENT_",
    "CHAT_",
    "CORS_",
    "DB_",
    "TODO_AGENT_",
    "EMBEDDINGS_",
)
_SCRUBBED = ("DATABASE_URL", "ENVIRONMENT", "LOG_LEVEL")


def asyncpg_dsn(url: str) -> str:
    """A URL for asyncpg itself (no SQLAlchemy driver suffix)."""
    return normalize_database_url(url).replace("postgresql+asyncpg://", "postgresql://", 1)


@contextmanager
def database() -> Iterator[tuple[str, str]]:
    """(URL, where) of the database to use: BENCH_DATABASE_URL, else an embedded PostgreSQL
    in a temporary directory (it stops by itself when this process exits)."""
    if url := os.environ.get("BENCH_DATABASE_URL"):
        yield normalize_database_url(url), "BENCH_DATABASE_URL"
        return
    from backend.embedded_db import EmbeddedPostgres

    data_dir = Path(tempfile.mkdtemp(prefix="todo-agent-bench-db-"))
    yield EmbeddedPostgres(data_dir).start(), "embedded PostgreSQL (pgserver)"


def clean_env(**values: str) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(_SCRUBBED_PREFIXES) and name not in _SCRUBBED
    }
    env.update(values)
    return env


def reset_schema(url: str, env: Mapping[str, str]) -> None:
    """An empty `public` schema, then `todo-agent migrate` (Alembic to head)."""

    async def reset() -> None:
        connection = await asyncpg.connect(asyncpg_dsn(url))
        try:
            await connection.execute("DROP SCHEMA IF EXISTS public CASCADE; CREATE SCHEMA public")
        finally:
            await connection.close()

    asyncio.run(reset())
    subprocess.run(
        [str(BIN / "todo-agent"), "migrate"],
        env=dict(env),
        cwd=env.get("BENCH_CWD"),
        check=True,
        capture_output=True,
    )


# --------------------------------------------------------------------------- /proc


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (uvicorn --workers N forks N children)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        queue.extend(children.get(current, ()))
    return found


def cpu_seconds(pids: Sequence[int]) -> float:
    """User plus system CPU time of these processes (those still alive)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _CLOCK_TICKS


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent not idle (all cores), from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / _CLOCK_TICKS


def rss_mib(pid: int) -> float:
    """VmRSS: the process's resident set size now."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mib(pid: int) -> float:
    """VmHWM: the process's peak resident set size."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# --------------------------------------------------------------------------- servers


class Server(ServerProcess):
    """A benchmarked server process (the service or the floor), with its process tree."""

    def __init__(self, name: str, command: Sequence[str], env: Mapping[str, str], log: Path):
        cwd = env.get("BENCH_CWD")
        super().__init__(env, log=log, command=command, cwd=Path(cwd) if cwd else None)
        self.name = name

    def __enter__(self) -> "Server":
        # On a loaded shared machine importing the service takes half a minute, twice (the
        # server and its worker): more than a test's patience.
        return self.start(timeout_s=240)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def pids(self) -> list[int]:
        return descendants(self.pid)

    def workers(self) -> list[int]:
        """The processes that serve requests: the children when uvicorn forks workers, else
        the one process."""
        below = self.pids()[1:]
        return below or [self.pid]


def statements_total(server: Server) -> float:
    """The service's `todo_agent_db_statements_total` counter, from GET /metrics."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("todo_agent_db_statements_total "):
            return float(line.split()[1])
    raise LookupError("todo_agent_db_statements_total is not in /metrics")


# --------------------------------------------------------------------------- seeding


class Seeder:
    """Rows written straight into the service's tables with SQL."""

    def __init__(self, url: str) -> None:
        self.dsn = asyncpg_dsn(url)

    def run(self, sql: str, *args: object) -> None:
        async def execute() -> None:
            connection = await asyncpg.connect(self.dsn)
            try:
                await connection.execute(sql, *args)
            finally:
                await connection.close()

        asyncio.run(execute())

    def fetch(self, sql: str, *args: object) -> list[tuple[object, ...]]:
        async def fetch() -> list[tuple[object, ...]]:
            connection = await asyncpg.connect(self.dsn)
            try:
                return [tuple(row) for row in await connection.fetch(sql, *args)]
            finally:
                await connection.close()

        return asyncio.run(fetch())

    def users(self, ids: Sequence[str]) -> None:
        """The users, each with their Inbox (as the service makes them on first sight)."""
        self.run(
            "INSERT INTO users (id, name) SELECT id, 'Bench ' || id FROM unnest($1::text[]) AS id "
            "ON CONFLICT (id) DO NOTHING",
            list(ids),
        )
        self.run(
            "INSERT INTO lists (id, owner_id, name, inbox) SELECT gen_random_uuid(), id, 'Inbox',"
            " true FROM unnest($1::text[]) AS id ON CONFLICT (owner_id) WHERE inbox DO NOTHING",
            list(ids),
        )
        self.run(
            "INSERT INTO list_members (list_id, user_id, role) SELECT id, owner_id, 'owner'"
            " FROM lists WHERE inbox AND owner_id = ANY($1::text[]) ON CONFLICT DO NOTHING",
            list(ids),
        )

    def sessions(self, owner: str, count: int, messages: int) -> list[str]:
        """`count` sessions of `owner`, each with `messages` alternating user/assistant
        messages, oldest first."""
        rows = self.fetch(
            """
            INSERT INTO agent_sessions (id, user_id, title, created_at, updated_at)
            SELECT gen_random_uuid(), $1, 'Seeded session ' || i,
                   now() - interval '30 days', now() - interval '1 day'
            FROM generate_series(1, $2) AS i
            RETURNING id
            """,
            owner,
            count,
        )
        ids = [str(row[0]) for row in rows]
        self.run(
            """
            INSERT INTO agent_messages (id, session_id, user_id, role, content, created_at)
            SELECT gen_random_uuid(), s, $2,
                   CASE WHEN n % 2 = 1 THEN 'user' ELSE 'assistant' END,
                   CASE WHEN n % 2 = 1
                        THEN 'Seeded question ' || n || ': what is still open on my list?'
                        ELSE 'Seeded answer ' || n || ': you have a few tasks left for today.'
                   END,
                   now() - interval '30 days' + n * interval '1 second'
            FROM unnest($1::uuid[]) AS s, generate_series(1, $3) AS n
            ORDER BY s, n
            """,
            ids,
            owner,
            messages,
        )
        self.run("VACUUM ANALYZE agent_messages")
        return ids

    def tasks(self, owner: str, count: int, *, lists: int = 1) -> None:
        """`count` tasks of `owner`'s, spread over their Inbox and `lists - 1` more lists of
        their own (the database numbers them for every member, as the service's do)."""
        self.run(
            """
            INSERT INTO lists (id, owner_id, name)
            SELECT gen_random_uuid(), $1, 'Seeded list ' || n FROM generate_series(2, $2) AS n
            """,
            owner,
            lists,
        )
        self.run(
            "INSERT INTO list_members (list_id, user_id, role) SELECT id, owner_id, 'owner'"
            " FROM lists WHERE owner_id = $1 AND NOT inbox",
            owner,
        )
        self.run(
            """
            INSERT INTO tasks (id, list_id, created_by, title, description, priority, tags,
                               due_at, completed)
            SELECT gen_random_uuid(), l.id, $1, 'Seeded task ' || n,
                   CASE WHEN n % 3 = 0 THEN 'Some details about task ' || n END,
                   (ARRAY['low', 'medium', 'high'])[n % 3 + 1],
                   ARRAY['home', 'work'],
                   now() + (n % 40 - 10) * interval '1 day',
                   n % 4 = 0
            FROM generate_series(1, $2) AS n,
                 LATERAL (SELECT id FROM lists WHERE owner_id = $1
                          ORDER BY inbox DESC, name OFFSET n % $3 LIMIT 1) AS l
            ORDER BY n
            """,
            owner,
            count,
            lists,
        )
        # As autovacuum would have by now: the visibility map lets counts use the index alone.
        self.run("VACUUM ANALYZE tasks")
        self.run("VACUUM ANALYZE task_numbers")

    def server_version(self) -> str:
        return str(self.fetch("SHOW server_version")[0][0])

    def connections_opened(self) -> int:
        """Connections ever opened to the bench database (this one included)."""
        sql = "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
        return int(str(self.fetch(sql)[0][0]))


def postgres_cpu() -> dict[int, float]:
    """CPU seconds of every PostgreSQL process on this machine, by PID."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().startswith("postgres"):
                    found[int(entry.name)] = cpu_seconds([int(entry.name)])
            except OSError:
                continue
    return found


def database_cpu_since(seeder: Seeder, before: Mapping[int, float]) -> float | None:
    """CPU seconds the bench database's backends used since `before` (a `postgres_cpu()`
    snapshot); backends that exited meanwhile are missed. None for a remote server."""
    rows = seeder.fetch(
        "SELECT pid FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    now = postgres_cpu()
    pids = [int(str(row[0])) for row in rows if int(str(row[0])) in now]
    if not pids:
        return None
    return sum(now[pid] - before.get(pid, 0.0) for pid in pids)


@contextmanager
def one_service(name: str, secret: str, **settings: str) -> Iterator[tuple[Server, str, str]]:
    """One `todo-agent serve` worker on a freshly migrated database (BENCH_DATABASE_URL, else
    an embedded one), signing with `secret`, no rate limit, quiet logs, and `settings`:
    (the server, the database URL, where the database is)."""
    with database() as (url, where):
        env = clean_env(
            DATABASE_URL=url,
            JWT_SECRET=secret,
            CHAT_RATE_LIMIT_PER_MINUTE="0",
            LOG_LEVEL="WARNING",
            **settings,
        )
        reset_schema(url, env)
        log = Path(tempfile.mkdtemp(prefix=f"bench-{name}-")) / "serve.log"
        command = [str(BIN / "todo-agent"), "serve", "--workers", "1"]
        with Server("service", command, env, log) as server:
            yield server, url, where


def write_results(name: str, text: str, result: Mapping[str, object]) -> None:
    """Print the report and keep it, with its figures, in bench/results/NAME.{md,json}."""
    print(text)
    results = REPO / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{name}.md").write_text(text)
    (results / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
