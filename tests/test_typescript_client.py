"""The typed TypeScript client (clients/typescript): its schema.d.ts is what the API
generates today, and the programs written against it (an openapi-fetch tour, the Next.js
files the docs show) pass `tsc --strict --noEmit` with the pinned ai, @ai-sdk/react and
better-auth types."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.node import require_node

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "clients" / "typescript"
# Each Next.js file, and the guide that shows it whole.
DOC_FILES = {
    "nextjs/lib/auth-client.ts": "docs/nextjs.md",
    "nextjs/lib/chat-transport.ts": "docs/nextjs.md",
    "nextjs/lib/todo-agent.ts": "docs/nextjs.md",
    "nextjs/app/todo-chat.tsx": "docs/nextjs.md",
    "nextjs/app/api/todo-agent-webhook/route.ts": "docs/events-webhooks-calendar.md",
    "nextjs/lib/use-task-events.ts": "docs/events-webhooks-calendar.md",
    "nextjs/lib/auth.ts": "docs/data.md",
}


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


def test_the_docs_show_the_files_that_are_type_checked() -> None:
    assert sorted(DOC_FILES) == sorted(
        str(path.relative_to(CLIENT)) for path in (CLIENT / "nextjs").rglob("*.ts*")
    ), "a Next.js file that no guide shows"
    for name, doc in DOC_FILES.items():
        fence = f"```{Path(name).suffix[1:]}\n// {name.removeprefix('nextjs/')}\n"
        assert f"{fence}{(CLIENT / name).read_text()}```" in (ROOT / doc).read_text(), name
