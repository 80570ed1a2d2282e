"""The typed TypeScript client (clients/typescript): its schema.d.ts is what the API
generates today, and the programs written against it (an openapi-fetch tour, the README's
Next.js files) pass `tsc --strict --noEmit` with the pinned ai, @ai-sdk/react and
better-auth types."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.node import require_node

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "clients" / "typescript"
README_FILES = [
    "nextjs/lib/auth-client.ts",
    "nextjs/lib/chat-transport.ts",
    "nextjs/lib/todo-agent.ts",
    "nextjs/app/todo-chat.tsx",
    "nextjs/app/api/todo-agent-webhook/route.ts",
    "nextjs/lib/use-task-events.ts",
]


@pytest.fixture(scope="module")
def node() -> str:
    return require_node("typescript", root=CLIENT.parent)


def test_the_committed_schema_is_a_fresh_generation(node: str, tmp_path: Path) -> None:
    fresh = tmp_path / "schema.d.ts"
    subprocess.run(
        [sys.executable, str(CLIENT / "generate.py"), "--out", str(fresh)], check=True, timeout=120
    )
    committed = (CLIENT / "schema.d.ts").read_text()
    assert fresh.read_text() == committed, "the API changed: run `make client` and commit"


def test_the_example_programs_type_check_strictly(node: str) -> None:
    result = subprocess.run(
        [node, "node_modules/typescript/bin/tsc", "-p", "tsconfig.json", "--strict", "--noEmit"],
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_readme_shows_the_files_that_are_type_checked() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Use it from Next.js") :]
    for name in README_FILES:
        fence = f"```{Path(name).suffix[1:]}\n// {name.removeprefix('nextjs/')}\n"
        assert f"{fence}{(CLIENT / name).read_text()}```" in section, name
