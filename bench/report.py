"""The bench's results: statistics, the targets, and the report as markdown and JSON."""

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

SERVICE, FLOOR, RAW_FLOOR = "service", "floor", "raw"
NO_TOOL, ONE_TOOL = "no-tool", "one-tool"


@dataclass(frozen=True)
class Latency:
    """Milliseconds."""

    n: int
    p50: float
    p95: float
    p99: float
    mean: float
    max: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> "Latency":
        values = sorted(v * 1000 for v in seconds)
        if not values:
            return cls(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        return cls(
            n=len(values),
            p50=percentile(values, 50),
            p95=percentile(values, 95),
            p99=percentile(values, 99),
            mean=sum(values) / len(values),
            max=values[-1],
        )

    def triple(self) -> str:
        return f"{_ms(self.p50)} / {_ms(self.p95)} / {_ms(self.p99)}"


def percentile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Cell:
    """One load level: a server, a model latency, a kind of turn, a number of clients."""

    target: str
    model_ms: int
    turn: str
    concurrency: int
    throughput: float  # turns per second
    latency: Latency
    errors: dict[str, int]
    server_cpu_ms_per_turn: float
    db_cpu_ms_per_turn: float | None
    generator_cpu_share: float  # of one core, during the window
    machine_busy_cores: float  # all processes, during the whole cell
    other_cores: float  # processes that are not part of the bench (other work on the machine)


@dataclass(frozen=True)
class Streaming:
    target: str
    model_ms: int
    first_delta: Latency  # request start -> first `event: delta` at the client
    model_first_chunk: Latency  # at the fake: request received -> first chunk sent
    overhead: Latency  # first_delta - model_first_chunk, per request
    before_model: Latency  # request start -> the fake receives the model request
    relay: Latency  # the fake's first chunk -> the client's first delta
    errors: dict[str, int]


@dataclass(frozen=True)
class Statements:
    session_messages: int
    no_tool_per_turn: float
    one_tool_per_turn: float | None
    turns: int


@dataclass(frozen=True)
class History:
    target: str
    short: Latency  # sessions of 10 messages
    long: Latency  # sessions of 10,000 messages


@dataclass(frozen=True)
class TaskList:
    few: Latency  # a user with 10 tasks
    many: Latency  # a member of 20 lists with 10,000 tasks
    plans: str = ""  # the many's page as the service sends it, with EXPLAIN ANALYZE (explain.py)


@dataclass(frozen=True)
class PromptFigures:
    """Tokens of a no-tool turn's model request, and how many of them providers can cache
    (bench/prompt.py)."""

    model: str
    encoding: str
    prompt_tokens: float  # per no-tool turn, mean of the requests measured
    shared_prefix_tokens: int  # identical at the start of every request (2 users x 2 turns)
    shared_share: float
    cacheable_tokens: int  # of those, what OpenAI caches: from 1,024, in steps of 128
    tools_tokens: int  # the tool definitions alone


@dataclass(frozen=True)
class Target:
    name: str
    measured: str
    limit: str
    passed: bool


@dataclass
class Results:
    meta: dict[str, Any]
    cells: list[Cell] = field(default_factory=list)
    streaming: list[Streaming] = field(default_factory=list)
    statements: list[Statements] = field(default_factory=list)
    history: list[History] = field(default_factory=list)
    tasks: TaskList | None = None
    memory_mib: dict[str, list[float]] = field(default_factory=dict)  # per worker, VmHWM
    prompt: PromptFigures | None = None
    targets: list[Target] = field(default_factory=list)

    def cell(self, target: str, model_ms: int, turn: str, concurrency: int) -> Cell | None:
        for cell in self.cells:
            if (cell.target, cell.model_ms, cell.turn, cell.concurrency) == (
                target,
                model_ms,
                turn,
                concurrency,
            ):
                return cell
        return None

    def to_json(self) -> str:
        return json.dumps(_finite(asdict(self)), indent=2, sort_keys=False) + "\n"


# --------------------------------------------------------------------------- targets


def evaluate(results: Results, *, slow_model_ms: int) -> list[Target]:
    targets: list[Target] = []

    service = results.cell(SERVICE, 0, NO_TOOL, 64)
    floor = results.cell(FLOOR, 0, NO_TOOL, 64)
    if service and floor and floor.throughput:
        ratio = service.throughput / floor.throughput
        targets.append(
            Target(
                "no-tool throughput at c=64, 0 ms model, vs the floor",
                f"{ratio:.2f} ({service.throughput:.0f} vs {floor.throughput:.0f} turns/s)",
                ">= 0.50",
                ratio >= 0.5,
            )
        )

    raw = results.cell(RAW_FLOOR, 0, NO_TOOL, 64)
    if service and raw and raw.throughput:
        ratio = service.throughput / raw.throughput
        targets.append(
            Target(
                "no-tool throughput at c=64, 0 ms model, vs the raw floor",
                f"{ratio:.2f} ({service.throughput:.0f} vs {raw.throughput:.0f} turns/s)",
                ">= 0.60",
                ratio >= 0.6,
            )
        )
        cpu = service.server_cpu_ms_per_turn / raw.server_cpu_ms_per_turn
        targets.append(
            Target(
                "no-tool CPU per turn at c=64, 0 ms model, vs the raw floor",
                f"{cpu:.2f} ({service.server_cpu_ms_per_turn:.2f} vs "
                f"{raw.server_cpu_ms_per_turn:.2f} ms)",
                "<= 1.60",
                cpu <= 1.6,
            )
        )

    slow = results.cell(SERVICE, slow_model_ms, NO_TOOL, 64)
    if slow:
        ratio = slow.latency.p99 / slow_model_ms
        targets.append(
            Target(
                f"no-tool p99 at c=64, {slow_model_ms} ms model, vs the model's latency",
                f"{ratio:.2f} (p99 {slow.latency.p99:.0f} ms)",
                "<= 1.20",
                ratio <= 1.2,
            )
        )

    if results.statements:
        counts = [s.no_tool_per_turn for s in results.statements]
        same = max(counts) - min(counts) < 0.01
        worst = max(counts)
        detail = ", ".join(
            f"{_count(s.no_tool_per_turn)} at {s.session_messages:,} messages"
            for s in results.statements
        )
        targets.append(
            Target(
                "SQL statements per no-tool turn, at any history length",
                detail,
                "<= 2, and equal",
                worst <= 2 and same,
            )
        )

    for history in results.history:
        if history.target != SERVICE:
            continue
        ratio = history.long.p50 / history.short.p50
        targets.append(
            Target(
                "turn latency in a 10,000-message session vs a 10-message one (p50)",
                f"{ratio:.2f} ({history.long.p50:.1f} vs {history.short.p50:.1f} ms)",
                "<= 1.15",
                ratio <= 1.15,
            )
        )

    for stream in results.streaming:
        if stream.target != SERVICE:
            continue
        targets.append(
            Target(
                f"time to first delta minus the model's first chunk, {stream.model_ms} ms model "
                "(p50)",
                f"{stream.overhead.p50:.1f} ms (first delta {stream.first_delta.p50:.1f} ms, "
                f"model {stream.model_first_chunk.p50:.1f} ms)",
                "<= 20 ms",
                stream.overhead.p50 <= 20,
            )
        )

    if (tasks := results.tasks) is not None:
        targets.append(
            Target(
                "task list of a member of 20 lists with 10,000 tasks (p50)",
                f"{tasks.many.p50:.1f} ms",
                "< 20 ms",
                tasks.many.p50 < 20,
            )
        )

    if (prompt := results.prompt) is not None:
        targets.append(
            Target(
                "prompt prefix identical across users and turns (no-tool turn)",
                f"{prompt.shared_prefix_tokens:,} of {prompt.prompt_tokens:,.0f} tokens "
                f"({prompt.shared_share:.0%}); {prompt.cacheable_tokens:,} cacheable",
                ">= 1,024 tokens (the provider's caching minimum)",
                prompt.cacheable_tokens >= 1024,
            )
        )
    return targets


# --------------------------------------------------------------------------- markdown


def markdown(results: Results) -> str:
    meta = results.meta
    lines = [
        "# todo-agent benchmark",
        "",
        f"`make bench`{' --quick' if meta.get('quick') else ''} on {meta['date']}, "
        f"commit `{meta['commit']}`. Machine: {meta['cpus']} CPUs, Python {meta['python']}, "
        f"PostgreSQL {meta['postgres']} ({meta['database']}). Servers: uvicorn, "
        f"{meta['workers']} worker(s) each, on loopback, with the fake model "
        "(`tests/fake_openai.py`) in the bench process and the load generator "
        "(closed loop, a minimal asyncio HTTP/1.1 client) in a process of its own.",
        "",
        f"Each load level runs {meta['plan']['rounds']} time(s) per server, alternating which "
        f"server goes first (the no-tool levels at c={max(meta['plan']['concurrencies'])}, "
        f"which the targets read, {meta['plan'].get('target_rounds', meta['plan']['rounds'])} "
        f"times); each run: {meta['plan']['warmup_s']} s warm-up, then at least "
        f"{meta['plan']['duration_s']} s and {meta['plan']['min_samples']} turns "
        f"(at most {meta['plan']['max_duration_s']} s). Every client is its own user with its "
        "own session (a session takes one turn at a time).",
        "",
        "## Targets",
        "",
        "| target | measured | limit | result |",
        "| --- | --- | --- | --- |",
    ]
    for target in results.targets:
        verdict = "PASS" if target.passed else "**FAIL**"
        lines.append(f"| {target.name} | {target.measured} | {target.limit} | {verdict} |")

    lines += [
        "",
        "## Chat turns (`POST /api/{user}/chat`)",
        "",
        "Throughput in turns/s; latency in ms; ratio = service / floor. A one-tool turn calls "
        "the model twice (add_todo, then the answer).",
        "",
        "| model | turn | c | turns/s service / floor | ratio | service p50 / p95 / p99 "
        "| floor p50 / p95 / p99 | p99 ratio | n service / floor | errors |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    pairs = _pairs(results)
    for (model_ms, turn, concurrency), service, floor in pairs:
        errors = {
            f"{name} {kind}": count
            for name, cell in ((SERVICE, service), (FLOOR, floor))
            for kind, count in cell.errors.items()
        }
        lines.append(
            f"| {model_ms} ms | {turn} | {concurrency} "
            f"| {service.throughput:.1f} / {floor.throughput:.1f} "
            f"| {_ratio(service.throughput, floor.throughput)} "
            f"| {service.latency.triple()} | {floor.latency.triple()} "
            f"| {_ratio(service.latency.p99, floor.latency.p99)} "
            f"| {service.latency.n} / {floor.latency.n} "
            f"| {', '.join(f'{k}: {v}' for k, v in errors.items()) or '-'} |"
        )
    lines += [
        "",
        "### Cost per turn",
        "",
        "CPU: the server process's user+system CPU time over the whole level (warm-up "
        "included) per turn answered; DB: the same for the bench database's PostgreSQL "
        "backends (connections closed during the level are missed). Other load: CPU cores "
        "busy with work that is not this bench (anything else running on the machine), "
        "during the service's / the floor's level; above ~0.3 the numbers are disturbed.",
        "",
        "| model | turn | c | CPU ms/turn service / floor | ratio | DB CPU ms/turn service / "
        "floor | other load, cores |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (model_ms, turn, concurrency), service, floor in pairs:
        lines.append(
            f"| {model_ms} ms | {turn} | {concurrency} "
            f"| {service.server_cpu_ms_per_turn:.2f} / {floor.server_cpu_ms_per_turn:.2f} "
            f"| {_ratio(service.server_cpu_ms_per_turn, floor.server_cpu_ms_per_turn)} "
            f"| {_opt(service.db_cpu_ms_per_turn)} / {_opt(floor.db_cpu_ms_per_turn)} "
            f"| {service.other_cores:.2f} / {floor.other_cores:.2f} |"
        )

    raw_pairs = _pairs(results, RAW_FLOOR)
    if raw_pairs:
        lines += [
            "",
            "### Against the raw floor",
            "",
            "The raw floor is the floor with a bare HTTP/1.1 client for the model request "
            "instead of httpx2, the openai SDK's transport (`BENCH_FLOOR_HTTP=raw`); it runs "
            "in the same rounds as the other two. Ratio = service / raw floor.",
            "",
            "| model | turn | c | turns/s service / raw floor | ratio | CPU ms/turn service / "
            "raw floor | ratio | p99 service / raw floor | other load, cores |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for (model_ms, turn, concurrency), service, raw in raw_pairs:
            lines.append(
                f"| {model_ms} ms | {turn} | {concurrency} "
                f"| {service.throughput:.1f} / {raw.throughput:.1f} "
                f"| {_ratio(service.throughput, raw.throughput)} "
                f"| {service.server_cpu_ms_per_turn:.2f} / {raw.server_cpu_ms_per_turn:.2f} "
                f"| {_ratio(service.server_cpu_ms_per_turn, raw.server_cpu_ms_per_turn)} "
                f"| {_ms(service.latency.p99)} / {_ms(raw.latency.p99)} "
                f"| {service.other_cores:.2f} / {raw.other_cores:.2f} |"
            )

    lines += [
        "",
        "## Streaming (`POST /api/{user}/chat/stream`, one client)",
        "",
        "First delta: from the request's start to the first `event: delta` at the client. "
        "Model's first chunk: at the fake, from receiving the model request to sending its "
        "first chunk. Overhead = first delta - model's first chunk, per request; it is the "
        "time before the model is asked (auth, the begin transaction, the SDK) plus the "
        "relay of the first chunk (relay = the fake's first chunk -> the client's first "
        "delta). ms, p50 / p95.",
        "",
        "| model | server | first delta | model's first chunk | overhead | before the model "
        "| relay | n |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in results.streaming:
        lines.append(
            f"| {s.model_ms} ms | {s.target} | {_pair(s.first_delta)} "
            f"| {_pair(s.model_first_chunk)} | {_pair(s.overhead)} | {_pair(s.before_model)} "
            f"| {_pair(s.relay)} | {s.first_delta.n} |"
        )

    lines += [
        "",
        "## SQL statements per turn (service, `todo_agent_db_statements_total`)",
        "",
        "Read from `GET /metrics` before and after sequential turns in one session.",
        "",
        "| session length | no-tool turn | one-tool turn | turns |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for st in results.statements:
        lines.append(
            f"| {st.session_messages:,} messages | {_count(st.no_tool_per_turn)} "
            f"| {_count(st.one_tool_per_turn)} | {st.turns} |"
        )

    lines += [
        "",
        "## History length (one client, no-tool turns, 0 ms model)",
        "",
        "One client; its turns alternate between 10 seeded sessions of each length, so both "
        "lengths meet the same conditions. ms, p50 / p95 / p99.",
        "",
        "| server | 10 messages | 10,000 messages | p50 ratio |",
        "| --- | ---: | ---: | ---: |",
    ]
    for h in results.history:
        lines.append(
            f"| {h.target} | {h.short.triple()} | {h.long.triple()} "
            f"| {_ratio(h.long.p50, h.short.p50)} |"
        )

    if results.tasks is not None:
        t = results.tasks
        lines += [
            "",
            "## Task list (`GET /api/{user}/tasks?limit=50`, one client, service)",
            "",
            "Requests alternate between the two users. ms.",
            "",
            "| user's tasks | p50 / p95 / p99 ms | n |",
            "| ---: | ---: | ---: |",
            f"| 10 | {t.few.triple()} | {t.few.n} |",
            f"| 10,000 in 20 lists | {t.many.triple()} | {t.many.n} |",
            f"| ratio (p50) | {_ratio(t.many.p50, t.few.p50)} | |",
        ]
        if t.plans:
            lines += [
                "",
                "<details><summary>The 10,000 tasks' page as the service sends it, with "
                "<code>EXPLAIN (ANALYZE, BUFFERS)</code> (<code>python -m bench.explain</code>)"
                "</summary>",
                "",
                "```text",
                t.plans,
                "```",
                "",
                "</details>",
            ]

    lines += [
        "",
        "## Peak memory per worker (VmHWM, after the whole run)",
        "",
        "| server | MiB per worker |",
        "| --- | ---: |",
    ]
    for name, values in results.memory_mib.items():
        lines.append(f"| {name} | {', '.join(f'{v:.0f}' for v in values)} |")

    if (prompt := results.prompt) is not None:
        lines += [
            "",
            f"## Prompt tokens per no-tool turn (tiktoken `{prompt.encoding}`, {prompt.model})",
            "",
            "Two users (different names, timezones, instructions), two turns each; the "
            "request as the service builds it, tools first (`python -m bench.prompt`).",
            "",
            "| prompt tokens | identical prefix | share | cacheable (OpenAI) | tools alone |",
            "| ---: | ---: | ---: | ---: | ---: |",
            f"| {prompt.prompt_tokens:,.0f} | {prompt.shared_prefix_tokens:,} "
            f"| {prompt.shared_share:.0%} | {prompt.cacheable_tokens:,} "
            f"| {prompt.tools_tokens:,} |",
        ]

    notes = meta.get("notes") or []
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"


def _pairs(
    results: Results, floor_name: str = FLOOR
) -> list[tuple[tuple[int, str, int], Cell, Cell]]:
    """(model_ms, turn, concurrency), the service's cell and the floor's, in table order."""
    keys = sorted(
        {(c.model_ms, c.turn, c.concurrency) for c in results.cells},
        key=lambda k: (k[0], k[1] != NO_TOOL, k[2]),
    )
    pairs = []
    for key in keys:
        service, floor = results.cell(SERVICE, *key), results.cell(floor_name, *key)
        if service is not None and floor is not None:
            pairs.append((key, service, floor))
    return pairs


def _ms(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _pair(latency: Latency) -> str:
    return f"{_ms(latency.p50)} / {_ms(latency.p95)}"


def _ratio(a: float, b: float) -> str:
    if not b or math.isnan(a) or math.isnan(b):
        return "-"
    return f"{a / b:.2f}"


def _count(value: float | None) -> str:
    return "failed" if value is None or math.isnan(value) else f"{value:g}"


def _opt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _finite(value: Any) -> Any:
    """JSON has no NaN: None instead; floats rounded for stable, readable diffs."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else round(value, 3)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
