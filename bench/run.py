"""The benchmark, end to end: set up, drive every load level, report."""

import argparse
import asyncio
import gc
import json
import math
import multiprocessing
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx

from backend.auth import create_token
from backend.services.agent import prompt_messages
from backend.services.tools import TOOL_DEFINITIONS
from backend.settings import Settings
from bench import load, profile, prompt
from bench.explain import task_list_plans
from bench.harness import (
    BIN,
    REPO,
    Seeder,
    Server,
    clean_env,
    cpu_seconds,
    database,
    database_cpu_since,
    machine_busy_seconds,
    peak_rss_mib,
    postgres_cpu,
    reset_schema,
    statements_total,
)
from bench.load import Client, Outcome, Target, Workload
from bench.report import (
    FLOOR,
    NO_TOOL,
    ONE_TOOL,
    RAW_FLOOR,
    SERVICE,
    Cell,
    History,
    Latency,
    Results,
    Statements,
    Streaming,
    TaskList,
    evaluate,
    markdown,
)
from tests.fake_openai import FakeOpenAI, JSONObject, Step, call, reply, tool_calls

REPLY = "Sure. I have noted that, and I will remind you about it later today."
TOOL_REPLY = "Done: I added task 1, buy oat milk and bread."
LONG_SESSION = 10_000
SHORT_SESSION = 10


@dataclass(frozen=True)
class Plan:
    warmup_s: float
    duration_s: float
    min_samples: int
    max_duration_s: float
    stream_turns: int
    sequential_s: float
    sql_turns: int
    rounds: int = 2  # per load level and server, alternating which server goes first
    # The no-tool levels at the highest concurrency, which the CPU, throughput and p99
    # targets read: more rounds, so that one disturbed run moves their ratios less.
    target_rounds: int = 4
    concurrencies: tuple[int, ...] = (1, 16, 64)
    model_ms: tuple[int, ...] = (0, 300)


FULL = Plan(
    warmup_s=1.0,
    duration_s=3.0,
    min_samples=15,
    max_duration_s=6.0,
    stream_turns=30,
    sequential_s=3.0,
    sql_turns=20,
)
QUICK = Plan(
    warmup_s=0.3,
    duration_s=1.0,
    min_samples=5,
    max_duration_s=3.0,
    stream_turns=8,
    sequential_s=0.7,
    sql_turns=5,
    rounds=1,
    target_rounds=1,
)


def one_tool(body: JSONObject) -> Step:
    """First an add_todo call; once its result is in the conversation, the answer."""
    if body["messages"][-1]["role"] == "tool":
        return reply(TOOL_REPLY)
    return tool_calls(call("add_todo", {"title": "Buy oat milk and bread"}))


@dataclass(frozen=True)
class _Run:
    outcome: Outcome
    server_cpu_s: float
    db_cpu_s: float | None
    busy_s: float  # the whole machine's busy CPU time
    ours_s: float  # the part of it that this bench used
    elapsed_s: float


def _cell(target: str, model_ms: int, turn: str, concurrency: int, runs: list[_Run]) -> Cell:
    """One load level's results over its rounds."""
    outcomes = [run.outcome for run in runs]
    turns = max(1, sum(1 for o in outcomes for s in o.samples if s.ok))
    db = [run.db_cpu_s for run in runs]
    elapsed = sum(run.elapsed_s for run in runs)
    errors: Counter[str] = Counter()
    for outcome in outcomes:
        errors.update(outcome.errors)
    return Cell(
        target=target,
        model_ms=model_ms,
        turn=turn,
        concurrency=concurrency,
        throughput=load.throughput(outcomes),
        latency=Latency.of([s.end - s.start for o in outcomes for s in o.measured if s.ok]),
        errors=dict(errors),
        server_cpu_ms_per_turn=1000 * sum(run.server_cpu_s for run in runs) / turns,
        db_cpu_ms_per_turn=None if None in db else 1000 * sum(d or 0.0 for d in db) / turns,
        generator_cpu_share=max(o.cpu_s / (o.window[1] - o.window[0]) for o in outcomes),
        machine_busy_cores=sum(run.busy_s for run in runs) / elapsed,
        other_cores=sum(max(0.0, run.busy_s - run.ours_s) for run in runs) / elapsed,
    )


class Bench:
    def __init__(
        self,
        *,
        plan: Plan,
        fake: FakeOpenAI,
        seeder: Seeder,
        service: Server,
        floor: Server,
        raw_floor: Server,
        pool: ProcessPoolExecutor,
        secret: str,
    ) -> None:
        self.plan = plan
        self.fake = fake
        self.seeder = seeder
        self.service = service
        self.floor = floor
        self.raw_floor = raw_floor
        self.pool = pool
        self.secret = secret
        self.started = time.monotonic()
        self.meta: dict[str, Any] = {}

    def log(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:5.0f}s] {text}", file=sys.stderr, flush=True)

    def token(self, user: str) -> str:
        return create_token(secret=self.secret, user_id=user, ttl_s=4 * 3600)

    def model(self, model_ms: int, turn: str) -> None:
        """Fresh fake: no records kept from before, this latency, this kind of turn."""
        self.fake.clear()
        self.fake.latency_s = model_ms / 1000
        self.fake.default = one_tool if turn == ONE_TOOL else reply(REPLY)

    def drive(self, workload: Workload) -> Outcome:
        # The fake model's thread shares this process with everything the bench keeps (its
        # records of every request, the results so far): a full collection here stalled the
        # fake for about 200 ms once in every 300 ms c=64 run, and every turn waiting on it
        # then (its p99 read 1.4 to 1.8 x its 300 ms, whatever server it answered). What the
        # fake allocates while a run lasts is freed by reference counting; cycles wait for
        # the collection between runs.
        gc.collect()
        gc.disable()
        try:
            return self.pool.submit(load.run, workload).result()
        finally:
            gc.enable()

    # -- the grid ----------------------------------------------------------------------

    def grid(self) -> list[Cell]:
        cells = []
        for model_ms in self.plan.model_ms:
            for turn in (NO_TOOL, ONE_TOOL):
                for concurrency in self.plan.concurrencies:
                    servers = (self.service, self.floor, self.raw_floor)
                    runs: dict[str, list[_Run]] = {server.name: [] for server in servers}
                    # Rounds alternate the order (A-B-C, then C-B-A), so that drift (table
                    # growth, autovacuum, other work on the machine) touches all alike.
                    targeted = turn == NO_TOOL and concurrency == max(self.plan.concurrencies)
                    rounds = self.plan.target_rounds if targeted else self.plan.rounds
                    for round_ in range(rounds):
                        for server in servers if round_ % 2 == 0 else servers[::-1]:
                            self.model(model_ms, turn)
                            runs[server.name].append(self.measure(server, concurrency))
                    for server in servers:
                        cell = _cell(server.name, model_ms, turn, concurrency, runs[server.name])
                        cells.append(cell)
                        self.log(
                            f"{server.name:7} {model_ms:3} ms {turn:8} c={concurrency:<2} "
                            f"{cell.throughput:7.1f} turns/s  p50 {cell.latency.p50:6.1f}  "
                            f"p99 {cell.latency.p99:6.1f} ms  "
                            f"{cell.server_cpu_ms_per_turn:.2f} CPU ms/turn  "
                            f"other load {cell.other_cores:.2f}"
                            + (f"  errors {cell.errors}" if cell.errors else "")
                        )
        return cells

    def measure(self, server: Server, concurrency: int, seeder: Seeder | None = None) -> "_Run":
        """One run of `concurrency` clients, each its own user starting its own session;
        `seeder` reaches the server's database when it is not the bench's."""
        users = [f"{server.name}-{i}" for i in range(concurrency)]
        workload = Workload(
            base_url=server.url,
            kind="chat",
            clients=tuple(Client.of(f"/api/{u}/chat", self.token(u)) for u in users),
            warmup_s=self.plan.warmup_s,
            ramp_s=self.fake.latency_s,
            duration_s=self.plan.duration_s,
            min_samples=self.plan.min_samples,
            max_duration_s=self.plan.max_duration_s,
        )
        both = [*self.service.pids(), *self.floor.pids(), *self.raw_floor.pids()]
        cpu, cpu_both = cpu_seconds(server.pids()), cpu_seconds(both)
        db, busy, mine = postgres_cpu(), machine_busy_seconds(), time.process_time()
        began = time.monotonic()
        outcome = self.drive(workload)
        db_cpu = database_cpu_since(seeder or self.seeder, db)
        # What this bench ran: the servers, their database backends, the generator and this
        # process (the fake model's thread). The rest of the machine's CPU is other work.
        ours = (
            cpu_seconds(both)
            - cpu_both
            + (db_cpu or 0.0)
            + outcome.total_cpu_s
            + (time.process_time() - mine)
        )
        return _Run(
            outcome=outcome,
            server_cpu_s=cpu_seconds(server.pids()) - cpu,
            db_cpu_s=db_cpu,
            busy_s=machine_busy_seconds() - busy,
            ours_s=ours,
            elapsed_s=time.monotonic() - began,
        )

    # -- streaming ---------------------------------------------------------------------

    def streaming(self, server: Server, model_ms: int) -> Streaming:
        self.model(model_ms, NO_TOOL)
        user = f"{server.name}-0"
        outcome = self.drive(
            Workload(
                base_url=server.url,
                kind="stream",
                clients=(Client.of(f"/api/{user}/chat/stream", self.token(user)),),
                warmup_s=0.0,
                warmup_requests=3,
                duration_s=0.0,
                min_samples=self.plan.stream_turns,
                max_duration_s=120.0,
            )
        )
        records = [r for r in self.fake.requests if r.first_byte_at is not None]
        first, model, overhead, before, relay = [], [], [], [], []
        for sample in outcome.measured:
            # One client, one model call per turn: the call made while this request ran.
            match = [r for r in records if sample.start <= r.received_at <= sample.end]
            if not sample.ok or sample.first is None or len(match) != 1:
                continue
            record = match[0]
            assert record.first_byte_at is not None
            first.append(sample.first - sample.start)
            model.append(record.first_byte_at - record.received_at)
            overhead.append(first[-1] - model[-1])
            before.append(record.received_at - sample.start)
            relay.append(sample.first - record.first_byte_at)
        result = Streaming(
            target=server.name,
            model_ms=model_ms,
            first_delta=Latency.of(first),
            model_first_chunk=Latency.of(model),
            overhead=Latency.of(overhead),
            before_model=Latency.of(before),
            relay=Latency.of(relay),
            errors=outcome.errors,
        )
        self.log(
            f"{server.name:7} {model_ms:3} ms stream: first delta p50 "
            f"{result.first_delta.p50:.1f} ms, overhead p50 {result.overhead.p50:.1f} ms"
        )
        return result

    # -- SQL statements ----------------------------------------------------------------

    def statements(self) -> list[Statements]:
        owner = "service-sql"
        counts = []
        with httpx.Client(
            base_url=self.service.url,
            headers={"Authorization": f"Bearer {self.token(owner)}"},
            timeout=60,
        ) as http:

            def turns(session: str, count: int) -> None:
                for _ in range(count):
                    response = http.post(
                        f"/api/{owner}/chat", json={"message": REPLY, "session_id": session}
                    )
                    response.raise_for_status()

            def per_turn(session: str, turn: str) -> float:
                self.model(0, turn)
                try:
                    turns(session, 1)  # warm: the user's first sight, prepared statements
                    before = statements_total(self.service)
                    turns(session, self.plan.sql_turns)
                except httpx.HTTPError as failure:
                    self.log(f"service SQL statements: a turn failed: {failure}")
                    return math.nan
                return (statements_total(self.service) - before) / self.plan.sql_turns

            for messages in (SHORT_SESSION, LONG_SESSION):
                session = self.seeder.sessions(owner, 1, messages)[0]
                counts.append(
                    Statements(
                        session_messages=messages,
                        no_tool_per_turn=per_turn(session, NO_TOOL),
                        one_tool_per_turn=per_turn(session, ONE_TOOL),
                        turns=self.plan.sql_turns,
                    )
                )
                self.log(f"service SQL statements per turn at {messages} messages: {counts[-1]}")
        return counts

    # -- history length and the task list ---------------------------------------------

    def alternating(self, server: Server, kind: str, targets: Sequence[Target]) -> list[Latency]:
        """One client making the given requests in turn; the latency of each kind (targets
        alternate between kinds: even ones are the first kind, odd ones the second)."""
        client = Client(tuple(targets))
        outcome = self.drive(
            Workload(
                base_url=server.url,
                kind="get" if kind == "get" else "chat",
                clients=(client,),
                warmup_s=0.3,
                warmup_requests=max(len(targets), 6),
                duration_s=self.plan.sequential_s,
                min_samples=40,
                max_duration_s=60.0,
            )
        )
        if outcome.errors:
            self.log(f"{server.name} {kind}: errors {outcome.errors}")
        return [
            Latency.of([s.end - s.start for s in outcome.measured if s.ok and s.target % 2 == i])
            for i in (0, 1)
        ]

    def history(self, server: Server) -> History:
        self.model(0, NO_TOOL)
        owner = f"{server.name}-hist"
        token, path = self.token(owner), f"/api/{owner}/chat"
        short = self.seeder.sessions(owner, 10, SHORT_SESSION)
        long = self.seeder.sessions(owner, 10, LONG_SESSION)
        # Short and long sessions alternate, turn by turn, so that both meet the same load.
        targets = [Target(path, token, s) for pair in zip(short, long, strict=True) for s in pair]
        short_latency, long_latency = self.alternating(server, "chat", targets)
        result = History(target=server.name, short=short_latency, long=long_latency)
        self.log(
            f"{server.name:7} history: p50 {result.short.p50:.1f} ms at 10 messages, "
            f"{result.long.p50:.1f} ms at 10,000"
        )
        return result

    def task_list(self) -> TaskList:
        self.seeder.tasks("tasks-few", 10)
        self.seeder.tasks("tasks-many", 10_000, lists=20)  # a member of 20 lists
        targets = [
            Target(f"/api/{u}/tasks?limit=50", self.token(u)) for u in ("tasks-few", "tasks-many")
        ]
        few, many = self.alternating(self.service, "get", targets)
        self.log(
            f"service task list: p50 {few.p50:.1f} ms at 10 tasks, {many.p50:.1f} at 10,000 "
            "in 20 lists"
        )
        plans = asyncio.run(task_list_plans(self.seeder.dsn, "tasks-many"))
        return TaskList(few=few, many=many, plans=plans)

    # -- the profile -------------------------------------------------------------------

    def profile(self, directory: Path) -> None:
        """py-spy on the service's worker during one more c=64, 0 ms, no-tool level (not
        one of the reported ones, so the sampling does not touch the numbers)."""
        spy = shutil.which("py-spy", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
        if spy is None:
            self.log("no py-spy (.venv/bin/pip install py-spy): skipping the profile")
            return
        directory.mkdir(parents=True, exist_ok=True)
        worker = self.service.workers()[0]
        seconds = max(int(self.plan.duration_s * 3), 3)
        raw = directory / "service-c64-0ms-no-tool.txt"
        self.model(0, NO_TOOL)
        spy_process = subprocess.Popen(
            [
                *(spy, "record", "--pid", str(worker), "--rate", "250"),
                *("--duration", str(seconds), "--format", "raw", "--nonblocking"),
                *("--output", str(raw)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        users = [f"{self.service.name}-{i}" for i in range(64)]
        self.drive(
            Workload(
                base_url=self.service.url,
                kind="chat",
                clients=tuple(Client.of(f"/api/{u}/chat", self.token(u)) for u in users),
                warmup_s=0.0,
                duration_s=seconds + 1.0,
                max_duration_s=seconds + 1.0,
            )
        )
        spy_process.wait(timeout=60)
        if raw.exists():
            summary = profile.summarize(raw.read_text())
            (directory / "summary.txt").write_text(summary)
            self.log(f"profile: {raw} and {directory / 'summary.txt'}")
            print(summary, file=sys.stderr)


# --------------------------------------------------------------------------- main


def floor_spec(path: Path) -> Path:
    """The model request the service sends, for the floor to send the same."""
    settings = Settings.model_construct()  # the defaults, as the servers' clean environment
    options: dict[str, Any] = {
        "model": settings.agent_model_name,
        "tools": TOOL_DEFINITIONS,
        "tool_choice": "auto",
        "max_completion_tokens": settings.agent_max_tokens,
    }
    if settings.agent_temperature is not None:
        options["temperature"] = settings.agent_temperature
    prefix = prompt_messages("Bench floor-0", ZoneInfo("UTC"), None)
    path.write_text(json.dumps({"prefix": prefix, "options": options}))
    return path


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _commit() -> str:
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("-dirty" if _git("status", "--porcelain") else "")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark todo-agent against the floor (bench/floor.py); "
        "writes bench/results/latest.{md,json} (--quick: quick.{md,json}).",
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run (~2 minutes)")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn workers per server")
    parser.add_argument(
        "--out", type=Path, default=REPO / "bench" / "results", help="where the report goes"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="also profile the service with py-spy under c=64, 0 ms, no-tool load",
    )
    parser.add_argument(
        "--profile-only", type=Path, metavar="DIR", help="only the profile, no report"
    )
    return parser.parse_args(argv)


def setup(stack: ExitStack, *, plan: Plan, workers: int) -> Bench:
    """The database (schema reset, migrated, users seeded), the fake model, both servers and
    the load generator's process, all closed by `stack`."""
    workdir = Path(tempfile.mkdtemp(prefix="todo-agent-bench-"))
    secret = "bench-" + secrets.token_urlsafe(32)
    url, where = stack.enter_context(database())
    fake = stack.enter_context(FakeOpenAI())
    env = clean_env(
        DATABASE_URL=url,
        JWT_SECRET=secret,
        OPENAI_API_KEY="bench",
        OPENAI_BASE_URL=fake.base_url,
        CHAT_RATE_LIMIT_PER_MINUTE="0",
        LOG_LEVEL="WARNING",
        BENCH_CWD=str(workdir),  # away from a developer's .env
        BENCH_FLOOR_SPEC=str(floor_spec(workdir / "floor-spec.json")),
        PYTHONPATH=str(REPO),
    )
    print(f"bench: {where}; logs under {workdir}", file=sys.stderr)
    reset_schema(url, env)
    seeder = Seeder(url)
    users = [f"{name}-{i}" for name in (SERVICE, FLOOR, RAW_FLOOR) for i in range(64)]
    seeder.users([*users, "service-sql", "service-hist", "floor-hist", "tasks-few", "tasks-many"])
    options = ["--workers", str(workers)]
    service = stack.enter_context(
        Server(SERVICE, [str(BIN / "todo-agent"), "serve", *options], env, workdir / "service.log")
    )
    floor = stack.enter_context(
        Server(FLOOR, [sys.executable, "-m", "bench.floor", *options], env, workdir / "floor.log")
    )
    raw_floor = stack.enter_context(
        Server(
            RAW_FLOOR,
            [sys.executable, "-m", "bench.floor", *options],
            {**env, "BENCH_FLOOR_HTTP": "raw"},
            workdir / "raw-floor.log",
        )
    )
    pool = stack.enter_context(
        ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    )
    bench = Bench(
        plan=plan,
        fake=fake,
        seeder=seeder,
        service=service,
        floor=floor,
        raw_floor=raw_floor,
        pool=pool,
        secret=secret,
    )
    bench.meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "postgres": seeder.server_version(),
        "database": where,
        "workers": workers,
        "plan": asdict(plan),
    }
    return bench


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    plan = QUICK if args.quick else FULL
    with ExitStack() as stack:
        bench = setup(stack, plan=plan, workers=args.workers)
        if args.profile_only:
            bench.profile(args.profile_only)
            return 0
        results = Results(meta={**bench.meta, "quick": args.quick})
        service, floor = bench.service, bench.floor
        results.cells = bench.grid()
        results.streaming = [
            bench.streaming(server, model_ms)
            for model_ms in plan.model_ms
            for server in (service, floor)
        ]
        results.statements = bench.statements()
        results.history = [bench.history(server) for server in (service, floor)]
        results.tasks = bench.task_list()
        results.memory_mib = {
            server.name: [peak_rss_mib(pid) for pid in server.workers()]
            for server in (service, floor, bench.raw_floor)
        }
        results.prompt = prompt.measure()
        if args.profile:
            bench.profile(args.profile)
        results.meta["seconds"] = round(time.monotonic() - bench.started)
        results.meta["notes"] = notes(results)
    results.targets = evaluate(results, slow_model_ms=max(plan.model_ms))
    report = markdown(results)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "quick" if args.quick else "latest"
    (args.out / f"{stem}.md").write_text(report)
    (args.out / f"{stem}.json").write_text(results.to_json())
    print(report)
    print(f"bench: wrote {args.out / stem}.md and .json", file=sys.stderr)
    return 0  # a report, not a test: the targets say PASS or FAIL, the exit code does not


def notes(results: Results) -> list[str]:
    generator = max((c.generator_cpu_share for c in results.cells), default=0.0)
    other = [c.other_cores for c in results.cells]
    disturbed = sum(1 for o in other if o > 0.3)
    return [
        "The floor (bench/floor.py) is a raw ASGI app on the same uvicorn: asyncpg, the same "
        "JWT check (python-jose), 3 statements per no-tool turn (user message + history read "
        "in one transaction, reply + session update in one statement), and the model called "
        "over httpx2 (the openai SDK's own transport) with the same request body (system "
        "prompt, history, the 6 tool definitions). It leaves out the SDK's own work, the rate "
        "limiter, the session lease and FastAPI/pydantic/SQLAlchemy. The raw floor is the "
        "same app with a bare HTTP/1.1 client (bench.load's) for the model request in place "
        "of httpx2: its ratio also counts the cost of the SDK's transport.",
        "Target 2 (p99 vs model latency) is read on no-tool turns; a one-tool turn calls the "
        "model twice. The streaming target is read on the p50 of per-request overhead.",
        "Load-level clients start a new session each run, so their model requests carry a "
        "short history; the service's per-request cost in the openai SDK grows with the "
        "number of messages sent (see the history table for turns with a full 20-message "
        "history).",
        f"The load generator used at most {generator:.0%} of a core. Other work on the "
        f"machine: {max(other, default=0.0):.2f} cores at most, "
        f"{sum(other) / max(len(other), 1):.2f} on average; {disturbed} of {len(other)} "
        "load levels had more than 0.3 cores of it (their numbers are disturbed; CPU ms per "
        "turn is the measure it disturbs least).",
    ]
