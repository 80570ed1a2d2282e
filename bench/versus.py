"""The service at earlier commits against the service now, with the raw floor, in one run.

    python -m bench.versus REV [REV ...] [--rounds 2] [--pooler]

Runs `todo-agent serve` once on each REV's `backend/` (exported with `git archive` into a
temporary directory put first on PYTHONPATH, with this checkout's installed packages) and
once on this checkout, plus the raw floor, at c=64 with the 0 ms model and no-tool turns;
rounds alternate the order (the REVs, this checkout, the raw floor, then the reverse). Each
REV's service has a database of its own beside the bench's (`<name>_before`, `<name>_before2`
..., emptied; it migrates it itself to REV's head), since the bench's is migrated to this
checkout's. Prints, per run, throughput, the server's and its database backends' CPU per
turn, the database connections opened and the other load on the machine; then, per server,
the median throughput and its ratio to the raw floor's median, and each step's change of
that ratio (two REVs in order measure what the commits between them cost, apart from what
came after). Same database rule as `python -m bench` (BENCH_DATABASE_URL).

`--pooler` also runs this checkout with what a pooler in transaction mode asks of it, right
after `now`: `pooler-safe`, straight to the database but told it is behind a pooler
(DATABASE_DIRECT_URL the same database by another spelling of its URL: no prepared
statement kept), and `pgbouncer`, through a PgBouncer in transaction mode in front of the
bench's database (`tests/pgbouncer.py`, Debian's `pgbouncer`). Their steps are what
pooler-safety costs a turn, then what the pooler itself adds.
"""

import argparse
import asyncio
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import replace
from io import BytesIO
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.engine import make_url

from bench.harness import BIN, REPO, Seeder, Server, asyncpg_dsn
from bench.report import NO_TOOL
from bench.run import QUICK, setup
from tests.pgbouncer import PgBouncer

PLAN = replace(QUICK, warmup_s=1.0, duration_s=3.0, min_samples=15, max_duration_s=5.0)


def export(rev: str, into: Path) -> None:
    archive = subprocess.run(
        ["git", "archive", rev, "backend"], cwd=REPO, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def own_database(url: str, suffix: str) -> str:
    """The URL of an empty database beside `url`'s, named after it with `suffix`."""
    name = f"{make_url(url).database}{suffix}"

    async def create() -> None:
        connection = await asyncpg.connect(asyncpg_dsn(url))
        try:
            await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await connection.execute(f'CREATE DATABASE "{name}"')
        finally:
            await connection.close()

    asyncio.run(create())
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.versus", description=__doc__)
    parser.add_argument("revs", nargs="*", metavar="rev", help="a commit to compare with")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--duration", type=float, default=PLAN.duration_s, help="seconds measured per run"
    )
    parser.add_argument(
        "--pooler", action="store_true", help="also this checkout through PgBouncer"
    )
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        plan = replace(PLAN, duration_s=args.duration, max_duration_s=args.duration + 2.0)
        bench = setup(stack, plan=plan, workers=1)
        seeders: dict[int, Seeder] = {}
        names: dict[int, str] = {}
        servers: list[Server] = []
        for index, rev in enumerate(args.revs):
            name = "before" if index == 0 else f"before{index + 1}"
            earlier = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-versus-")))
            export(rev, earlier)
            url = own_database(bench.service.env["DATABASE_URL"], f"_{name}")
            server = stack.enter_context(
                Server(
                    name,
                    [str(BIN / "todo-agent"), "serve"],
                    {**bench.service.env, "PYTHONPATH": str(earlier), "DATABASE_URL": url},
                    earlier / "service.log",
                )
            )
            seeders[id(server)], names[id(server)] = Seeder(url), rev
            servers.append(server)
        names[id(bench.service)], names[id(bench.raw_floor)] = "now", "raw"
        servers.append(bench.service)
        if args.pooler:
            direct = bench.service.env["DATABASE_URL"]
            pooler = stack.enter_context(PgBouncer(direct, pool_size=20))
            parsed = make_url(direct)  # the same database, spelled another way
            respelled = parsed.set(port=None if parsed.port else 5432)
            logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-pooler-")))
            for name, url in (("safe", direct), ("pooled", pooler.url)):
                env = {
                    **bench.service.env,
                    "DATABASE_URL": url,
                    "DATABASE_DIRECT_URL": respelled.render_as_string(hide_password=False),
                }
                server = stack.enter_context(
                    Server(name, [str(BIN / "todo-agent"), "serve"], env, logs / f"{name}.log")
                )
                names[id(server)] = "pooler-safe" if name == "safe" else "pgbouncer"
                servers.append(server)
        servers.append(bench.raw_floor)
        width = max(len(name) for name in names.values())
        throughputs: dict[int, list[float]] = {id(server): [] for server in servers}
        costs: dict[int, list[float]] = {id(server): [] for server in servers}
        for round_ in range(args.rounds):
            for server in servers if round_ % 2 == 0 else servers[::-1]:
                bench.model(0, NO_TOOL)
                seeder = seeders.get(id(server), bench.seeder)
                opened = seeder.connections_opened()
                run = bench.measure(server, 64, seeder)
                opened = seeder.connections_opened() - opened
                turns = max(1, sum(1 for s in run.outcome.samples if s.ok))
                # The bench counts its own servers' CPU as its own; a REV's server is not
                # among them, so its CPU is taken off here, not reported as other load.
                own = 0.0 if server in (bench.service, bench.raw_floor) else run.server_cpu_s
                other = max(0.0, run.busy_s - run.ours_s - own) / run.elapsed_s
                throughputs[id(server)].append(run.outcome.throughput)
                costs[id(server)].append((run.server_cpu_s + (run.db_cpu_s or 0.0)) / turns)
                print(
                    f"{names[id(server)]:{width}} {run.outcome.throughput:7.1f} turns/s  "
                    f"{1000 * run.server_cpu_s / turns:5.2f} CPU ms/turn  "
                    f"database {1000 * (run.db_cpu_s or 0.0) / turns:5.2f} ms/turn  "
                    f"{opened:3} connections opened  other load {other:.2f} cores"
                    + (f"  errors {run.outcome.errors}" if run.outcome.errors else ""),
                    flush=True,
                )
        raw = statistics.median(throughputs[id(bench.raw_floor)])
        previous = None
        for server in servers[:-1]:
            ratio = statistics.median(throughputs[id(server)]) / raw
            step = (
                ""
                if previous is None
                else f"  {100 * (ratio / previous - 1):+.1f}% on the one before"
            )
            print(
                f"{names[id(server)]:{width}} median {ratio * raw:7.1f} turns/s, "
                f"{ratio:.2f} of the raw floor's {raw:.1f}{step}"
            )
            previous = ratio
        revs = [server for server in servers if id(server) in seeders]
        paired(revs, names, throughputs, costs, bench.service)
    return 0


def paired(
    revs: Sequence[Server],
    names: dict[int, str],
    throughputs: dict[int, list[float]],
    costs: dict[int, list[float]],
    now: Server,
) -> None:
    """Each REV's server against this checkout's round by round: the two ran one after the
    other, so what drifts on the machine over minutes (other load, the database's caches)
    touches both alike. Prints the median of the rounds' ratios and their middle half, for
    the throughput and for the CPU a turn costs (the server's and its database backends')."""
    for server in revs:
        rounds = zip(throughputs[id(now)], throughputs[id(server)], strict=True)
        faster = sorted(n / b - 1 for n, b in rounds)
        spent = sorted(
            n / b - 1 for n, b in zip(costs[id(now)], costs[id(server)], strict=True) if b
        )
        print(
            f"now against {names[id(server)]}, paired by round ({len(faster)} rounds): "
            f"throughput {_spread(faster)}; CPU a turn (server and database) {_spread(spent)}"
        )


def _spread(changes: list[float]) -> str:
    """The median change and the middle half of them, as percentages."""
    if not changes:
        return "n/a"
    quarter = statistics.quantiles(changes, n=4) if len(changes) > 1 else changes * 3
    return (
        f"{100 * statistics.median(changes):+.1f}% "
        f"(middle half {100 * quarter[0]:+.1f}% to {100 * quarter[2]:+.1f}%)"
    )


if __name__ == "__main__":
    sys.exit(main())
