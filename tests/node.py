"""Running the Node programs under tests/js/: each has its own package.json and lockfile
(installed by `make test` with `npm ci`), takes its input as arguments or JSON on stdin,
and prints one JSON document on stdout."""

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

JS_DIR = Path(__file__).resolve().parent / "js"


def require_node(project: str | None = None, *, root: Path = JS_DIR) -> str:
    """The `node` executable (and, given a project under tests/js/ or `root`, its installed
    modules). Missing: a failure under CI=true, a loud skip elsewhere."""
    node = shutil.which("node")
    problem = None
    if node is None:
        problem = "node is not installed"
    elif project is not None and not (root / project / "node_modules").is_dir():
        problem = f"{root / project} is not installed (run `make test`, which runs `npm ci`)"
    if problem is None:
        assert node is not None
        return node
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: {problem}; the Node tests must run in CI")
    print(f"\n*** SKIPPING Node tests: {problem} ***")
    pytest.skip(f"NODE TESTS SKIPPED: {problem}")


def run_node(
    project: str,
    script: str,
    *args: str,
    stdin: Any = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 60,
) -> Any:
    """Run tests/js/PROJECT/SCRIPT with node and return the JSON it prints."""
    node = require_node(project)
    result = subprocess.run(
        [node, script, *args],
        cwd=JS_DIR / project,
        input=None if stdin is None else json.dumps(stdin),
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"node {script} exited {result.returncode}:\n{result.stderr}\n{result.stdout}"
        )
    return json.loads(result.stdout)
