"""The service at an earlier commit against the service now, with the raw floor, in one run.

    python -m bench.versus REV [--rounds 2]

Runs `todo-agent serve` twice, once on REV's `backend/` (exported with `git archive` into a
temporary directory put first on PYTHONPATH, with this checkout's installed packages) and
once on this checkout, plus the raw floor, at c=64 with the 0 ms model and no-tool turns;
rounds alternate the order (before, after, raw floor, then the reverse). REV's service has
a database of its own beside the bench's (`<name>_before`, emptied; it migrates it itself
to REV's head), since the bench's is migrated to this checkout's. Prints throughput,
server CPU per turn, the database connections opened during each run and the other load on
the machine. Same database rule as `python -m bench` (BENCH_DATABASE_URL).
"""

import argparse
import asyncio
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
    parser.add_argument("rev", help="the commit to compare with (e.g. main)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        earlier = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-versus-")))
        export(args.rev, earlier)
        bench = setup(stack, plan=PLAN, workers=1)
        before_url = own_database(bench.service.env["DATABASE_URL"], "_before")
        before = stack.enter_context(
            Server(
                "before",
                [str(BIN / "todo-agent"), "serve"],
                {**bench.service.env, "PYTHONPATH": str(earlier), "DATABASE_URL": before_url},
                earlier / "service.log",
            )
        )
        seeders = {id(before): Seeder(before_url)}
        names = {id(before): "before", id(bench.service): "after", id(bench.raw_floor): "raw"}
        servers = [before, bench.service, bench.raw_floor]
        for round_ in range(args.rounds):
            for server in servers if round_ % 2 == 0 else servers[::-1]:
                bench.model(0, NO_TOOL)
                seeder = seeders.get(id(server), bench.seeder)
                opened = seeder.connections_opened()
                run = bench.measure(server, 64)
                opened = seeder.connections_opened() - opened
                turns = max(1, sum(1 for s in run.outcome.samples if s.ok))
                other = max(0.0, run.busy_s - run.ours_s) / run.elapsed_s
                print(
                    f"{names[id(server)]:6} {run.outcome.throughput:7.1f} turns/s  "
                    f"{1000 * run.server_cpu_s / turns:5.2f} CPU ms/turn  "
                    f"{opened:3} connections opened  other load {other:.2f} cores"
                    + (f"  errors {run.outcome.errors}" if run.outcome.errors else ""),
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
