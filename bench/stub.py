"""The stub responder's own time per message, and its accuracy, over the utterance table.

    .venv/bin/python -m bench.stub              # time per message (the stub's own work)
    .venv/bin/python -m bench.stub --accuracy   # also: cases passing, by kind, and failures

Each case of tests/stub_utterances.py runs in-process against a real database through the
real tools (BENCH_DATABASE_URL, whose public schema is dropped and migrated again; else an
embedded PostgreSQL). A message's time is its `respond` call minus the time spent inside
tool calls (the database), so it measures understanding, resolving and phrasing.
"""

import argparse
import asyncio
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from backend.migrations import migrate
from backend.services.stub import entities
from bench.harness import database
from tests.stub_utterances import CASES, run_case


async def _run(url: str, accuracy: bool) -> int:
    engine = create_async_engine(url)
    async with engine.begin() as connection:
        await connection.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        await connection.execute(text("CREATE SCHEMA public"))
    await migrate(engine)
    started = time.perf_counter()
    entities.warm_up()
    print(f"dateparser warm-up: {(time.perf_counter() - started) * 1000:.0f} ms (once, at startup)")
    timings: list[float] = []
    passed: Counter[str] = Counter()
    total: Counter[str] = Counter()
    failures: list[str] = []
    kinds = list(dict.fromkeys(case.kind for case in CASES))
    for i, case in enumerate(CASES):
        outcome = await run_case(engine, case, user=f"bench-{i}")
        timings += outcome.stub_seconds
        total[case.kind] += 1
        if outcome.ok:
            passed[case.kind] += 1
        else:
            failures.append(f"- [{case.kind}] {case.id}\n  {outcome.why}".replace("\n", "\n  "))
    await engine.dispose()
    ms = sorted(t * 1000 for t in timings)
    print(
        f"{len(ms)} messages: mean {statistics.fmean(ms):.2f} ms, median {ms[len(ms) // 2]:.2f}"
        f" ms, p95 {ms[int(len(ms) * 0.95)]:.2f} ms, max {ms[-1]:.2f} ms (the stub's own time)"
    )
    if accuracy:
        # the held-out sets' kinds are "<set> <family>": each set is totalled too
        for name in dict.fromkeys(kind.split(" ", 1)[0] for kind in kinds if " " in kind):
            of_set = [kind for kind in kinds if kind.startswith(f"{name} ")]
            passed[f"{name} (all)"] = sum(passed[kind] for kind in of_set)
            total[f"{name} (all)"] = sum(total[kind] for kind in of_set)
        width = max(len(kind) for kind in total)
        print(f"\n{'kind':<{width}} passed")
        for kind in total:
            print(f"{kind:<{width}} {passed[kind]:>3}/{total[kind]:<3}")
        print(f"{'all':<{width}} {sum(passed[kind] for kind in kinds):>3}/{len(CASES)}")
        print("\nFailures:" if failures else "\nNo failures.")
        print("\n".join(failures))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stub", description=__doc__)
    parser.add_argument("--accuracy", action="store_true", help="print accuracy by kind")
    args = parser.parse_args(argv)
    with database() as (url, _):
        return asyncio.run(_run(url, args.accuracy))


if __name__ == "__main__":
    sys.exit(main())
