"""Reading a py-spy profile (`--format raw`, collapsed stacks): where the samples are.

    python -m bench.profile PROFILE.txt

prints the share of samples by area of the service (each sample counted once, in the first
area that matches its stack), by package (self: the innermost frame is there; inclusive:
the package is anywhere on the stack), by function, and by the service's own functions.
"""

import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable

_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")
TOP = 25


def _any(*needles: str) -> Callable[[list[str]], bool]:
    return lambda stack: any(needle in frame for frame in stack for needle in needles)


def _building_sql(stack: list[str]) -> bool:
    """Constructing statements in the service's SQL module, not executing them."""
    executing = ("Session.exec", "execute", "AsyncSession", "connection (")
    return _any("backend/services/turns.py")(stack) and not _any(*executing)(stack)


# In order: a sample belongs to the first area whose test its stack (frame texts) passes.
AREAS: list[tuple[str, Callable[[list[str]], bool]]] = [
    ("openai SDK: request transform (openai/_utils/_transform.py)", _any("openai/_utils/_tr")),
    (
        "openai SDK: HTTP transport (httpx2 and aiohttp, or httpcore2)",
        _any("httpx2/", "httpcore2/", "aiohttp/", "httpx_aiohttp/"),
    ),
    ("openai SDK: the rest (request building, response parsing)", _any("openai/")),
    ("SQL: building statements (backend/services/turns.py)", _building_sql),
    (
        "SQL: executing (SQLAlchemy session and engine, asyncpg)",
        _any("sqlalchemy/", "asyncpg/", "backend/db.py"),
    ),
    ("threadpool (sync dependencies run by anyio worker threads)", _any("threading.py")),
    ("tenacity (retry wrappers)", _any("tenacity/")),
    ("JWT (python-jose)", _any("jose/")),
    ("FastAPI, Starlette, pydantic", _any("fastapi/", "starlette/", "pydantic/")),
    ("uvicorn and the event loop", _any("uvicorn/", "asyncio/")),
]


def frames(stack: str) -> list[tuple[str, str]]:
    """(function, file) of each frame, outermost first; line numbers dropped."""
    found = []
    for frame in stack.split(";"):
        match = _FRAME.match(frame.strip())
        if match:
            found.append((match["function"], match["file"]))
        else:
            found.append((frame.strip(), ""))
    return found


def package(file: str) -> str:
    """`sqlalchemy/engine/base.py` -> `sqlalchemy`; the stdlib's `asyncio/events.py` ->
    `asyncio`; `<frozen importlib>` stays as it is."""
    return file.split("/", 1)[0] if "/" in file else file or "?"


def summarize(raw: str) -> str:
    stacks: list[tuple[list[tuple[str, str]], int]] = []
    for line in raw.splitlines():
        collapsed, _, number = line.rpartition(" ")
        if collapsed and number.isdigit():
            stacks.append((frames(collapsed), int(number)))
    total = sum(count for _, count in stacks)
    if not total:
        return "no samples\n"

    areas: Counter[str] = Counter()
    self_package: Counter[str] = Counter()
    in_package: Counter[str] = Counter()
    self_function: Counter[str] = Counter()
    in_function: Counter[str] = Counter()
    for stack, count in stacks:
        texts = [f"{function} ({file})" for function, file in stack]
        area = next((name for name, test in AREAS if test(texts)), "other")
        areas[area] += count
        leaf_function, leaf_file = stack[-1]
        self_package[package(leaf_file)] += count
        self_function[f"{leaf_function} ({leaf_file})"] += count
        for name in {package(file) for _, file in stack}:
            in_package[name] += count
        for name in {f"{function} ({file})" for function, file in stack}:
            in_function[name] += count

    def table(title: str, counts: Iterable[tuple[str, int]]) -> list[str]:
        rows = [f"{title}", f"{'%':>6}  {'samples':>7}  what"]
        rows += [f"{100 * n / total:6.1f}  {n:7d}  {name}" for name, n in counts]
        return [*rows, ""]

    own = [(name, n) for name, n in in_function.most_common() if "(backend/" in name]
    lines = [f"{total} samples", ""]
    lines += table("by area", areas.most_common())
    lines += table("by package, self (innermost frame)", self_package.most_common(TOP))
    lines += table("by package, inclusive (anywhere on the stack)", in_package.most_common(TOP))
    lines += table("functions, self", self_function.most_common(TOP))
    lines += table("the service's own functions, inclusive", own[:TOP])
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as raw_file:
        print(summarize(raw_file.read()))
