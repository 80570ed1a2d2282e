"""The documents' commands work verbatim against `todo-agent serve`, and their links hold.

Every ```sh block of README.md and of each guide in docs/ is run, in order, in one bash
shell per file, against a real server (`localhost:8000` becomes its port): the README's
against a fresh server started as `make run` starts it (an embedded PostgreSQL, a secret
generated in its data dir); the guides' against one server on the test database, each
guide as a user of its own (`alice` becomes `alice-<guide>`), so that each starts from an
empty account. A block that cannot run here says why on the line before it,
`<!-- not run: why -->`. Output and other languages go in other fences and never run; a
shell block fenced as `bash`, `console` or `shell` fails here, so that no command escapes
by its fence. Each block must exit 0 and print no `"detail"` (the API's error body), and
each file's commands must print what its prose says they do (EXPECTED).
"""

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import run

import pytest

from tests.conftest import TEST_SECRET, server_env
from tests.servers import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GUIDES = sorted((ROOT / "docs").glob("*.md"))
DOCUMENTS = [README, *GUIDES]

# What each file's commands must print, beyond exiting 0 without an error body; a pair is
# a text and the exact number of times it must appear.
EXPECTED: dict[str, list[str | tuple[str, int]]] = {
    "README.md": ['"response":"Added task 1: Buy milk (due ', '"name":"add_todo"'],
    "docs/tutorial.md": [
        '"title":"Buy groceries"',
        '"number":2',
        '"completed":true',
        "Added task 3: Call the plumber",
        "event: done",
        ("Added task 4: Buy milk", 2),  # the idempotent retry replays the first answer
        "Updated task 3: Call the plumber (due ",
        "Marked task 1 as complete: Buy groceries.",
        "Most urgent first:",
    ],
    "docs/digest.md": ['Added task 1 \\"Buy milk\\".', 'Added task 5 \\"Call contact 4\\".'],
    "docs/chat-api.md": [
        "Updated task 1: Almond milk.",
        '"title":"Milk"',
        "deleted: 204",
        "event: session",
        "event: done",
    ],
    "docs/tasks-and-settings.md": [
        '"title":"Move flat"',
        '"steps_total":3',
        '"steps_done":1',
        '"title":"Hand over keys"',
        '"instructions":"Answer in Portuguese."',
    ],
    "docs/stub.md": [
        "Added task 1: Call the bank (high priority, due ",
        "Added 3 tasks",
        "Marked task 4 as complete: Flour.",
        "Marked task 5 as complete: Email Jo.",
        "Added task 7: The move (0/3 steps done), with 3 steps",
        "I can manage your todo list",
    ],
    "docs/time-and-reminders.md": [
        '"recurrence_text":"every other Thursday"',
        '"remind_at":"2030-03-07T22:30:00Z"',
        # the next occurrence: 18:00 in New York again, now on daylight-saving time
        '"next":{',
        '"due_at":"2030-03-21T22:00:00Z"',
        "Added task 3: Take out the trash (due ",
    ],
    "docs/caldav.md": [
        '"name":"iPhone"',
        "<d:href>/dav/principals/alice-caldav/</d:href>",
        "revoked: 204",
        "after revoking: 401",
    ],
    "docs/events-webhooks-calendar.md": [
        "event: task.created",
        '"specversion":"1.0"',
        "BEGIN:VEVENT",
        "SUMMARY:Water the plants",
        "revoked: 204",
    ],
    "docs/nextjs.md": [
        'data: {"type":"start"',
        '"toolName":"add_todo"',
        '"delta":"Added task 1: Buy milk."',
        "data: [DONE]",
    ],
    "docs/mcp.md": ['"isError":false', '"name":"add_todo"', '"resource":"http://localhost:'],
    "docs/web-and-terminal.md": [
        "Added task 1: Buy milk.",
        "your lists: /list NAME shows one",
        "Inbox (1; you are its owner)",
    ],
    "docs/approvals-and-undo.md": [
        "deleted: 204",
        '"deleted_at":"',
        '"title":"Plan the party"',
        '"action":"removed"',
        "Nothing to undo in this session.",
        "Delete task 6 “Buy milk”? Reply yes to go ahead, or no to leave it.",
        "Here is what I did: Deleted task 6: Buy milk.",
    ],
    "docs/lists-and-sharing.md": [
        '"role":"editor"',
        "Added task 1: Milk",
        '"title":"Milk"',
        '"role":"owner"',
    ],
    "docs/documents.md": [
        '"title":"Moving","media_type":"text/markdown","bytes":69,"passages":1',
        '"title":"Packing"',
        '"heading":"Moving \u203a Week before"',
    ],
    "docs/memory.md": [
        '"text":"I work Monday to Thursday"',
        'I\'ll remember: \\"My dentist is Dr. Lee\\"',
        'From memory (you told me): \\"My dentist is Dr. Lee\\".',
        "I don't remember anything about you yet.",
    ],
    "docs/notifications.md": [
        '"reminders":["push"]',
        '"quiet_hours":{"start":"22:00"',
        '"queued":0',
        '"public_key":"',
    ],
    "docs/operations.md": ['"status":"ok"', '"migrations":"at head"', 'route="/health"'],
    "docs/data.md": [
        'content-disposition: attachment; filename="todo-agent-export.json"',
        "todo-agent-export/1 ['Move flat', 'Water the plants'] 2",
        '{"lists":1,"tasks":4,"documents":0,"sessions":1,"messages":2,"memories":0}',
        '"title":"Move flat"',
        "erased: 204",
        ('{"data":[],"count":0}', 2),
        "hook: 204",
        "replayed: 409",
    ],
}
# The identity provider's webhook secret the guides' server runs with (docs/data.md signs
# with it).
DOCS_IDENTITY_SECRET = "whsec_dG9kby1hZ2VudCBkb2NzIGlkZW50aXR5IHNlY3JldA=="

_FENCE = re.compile(r"^```(?P<language>[^\s`]*)[^\n]*\n(?P<code>.*?)^```[ \t]*$", re.M | re.S)
_NOT_RUN = re.compile(r"<!-- not run: (?P<reason>\S.*?) -->")
_SHELL_FENCES = frozenset({"bash", "console", "shell", "shell-session", "zsh"})
_MARK = re.compile(r"\n::block (\d+)::\n")
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


@dataclass(frozen=True)
class Block:
    line: int
    language: str
    code: str
    not_run: str | None  # why not, when the line before it says so

    @property
    def runs(self) -> bool:
        return self.language == "sh" and self.not_run is None


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for fence in _FENCE.finditer(text):
        before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        marker = _NOT_RUN.fullmatch(before)
        found.append(
            Block(
                line=text.count("\n", 0, fence.start()) + 1,
                language=fence["language"],
                code=fence["code"],
                not_run=marker["reason"] if marker else None,
            )
        )
    return found


def name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def run_document(path: Path, *, port: int, env: dict[str, str], user: str = "alice") -> str:
    """Run the file's runnable blocks in one shell, as a reader would paste them; fail on
    the first block that exits non-zero, or any that prints an error body."""
    runnable = [block for block in blocks(path) if block.runs]
    script = "".join(f"printf '\\n::block {block.line}::\\n'\n{block.code}" for block in runnable)
    script = script.replace("localhost:8000", f"localhost:{port}")
    script = re.sub(r"\balice\b", user, script)
    result = run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=90,
    )
    pieces = _MARK.split(result.stdout)
    outputs = dict(zip(pieces[1::2], pieces[2::2], strict=True))
    if result.returncode != 0:
        failed = list(outputs)[-1] if outputs else "?"
        pytest.fail(
            f"{name(path)}: the block at line {failed} exited {result.returncode}\n"
            f"stderr: {result.stderr}\nstdout: {outputs.get(failed, result.stdout)[-2000:]}"
        )
    for line, output in outputs.items():
        assert '"detail"' not in output, f"{name(path)}, the block at line {line}:\n{output}"
    return result.stdout


def check_expected(path: Path, output: str) -> None:
    for expected in EXPECTED[name(path)]:
        text, times = expected if isinstance(expected, tuple) else (expected, None)
        if times is None:
            assert text in output, f"{name(path)} printed no {text!r}:\n{output[-3000:]}"
        else:
            assert output.count(text) == times, f"{name(path)}: {text!r} not {times} times"


# --------------------------------------------------------------------------- the commands


def test_the_readme_gets_a_chat_answered_on_a_fresh_server() -> None:
    """What a newcomer does: `make run` (no database, no key, no secret configured), then
    the README's curl with a token from `todo-agent token`."""
    data_dir = Path(tempfile.mkdtemp(prefix="todo-agent-readme-"))
    env = {"TODO_AGENT_DATA_DIR": str(data_dir)}
    try:
        with ServerProcess(env) as server:
            output = run_document(README, port=server.port, env=env)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    check_expected(README, output)


@pytest.fixture(scope="module")
def guide_server(
    database_url: str, engine: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("docs") / "serve.log"
    env = server_env(database_url, IDENTITY_WEBHOOK_SECRET=DOCS_IDENTITY_SECRET)
    with ServerProcess(env, log=log) as server:
        yield server


@pytest.mark.parametrize(
    "guide",
    [guide for guide in GUIDES if any(block.runs for block in blocks(guide))],
    ids=lambda guide: guide.stem,
)
def test_the_guide_commands_run(guide: Path, guide_server: ServerProcess, tmp_path: Path) -> None:
    env = {"JWT_SECRET": TEST_SECRET, "TODO_AGENT_DATA_DIR": str(tmp_path)}
    output = run_document(guide, port=guide_server.port, env=env, user=f"alice-{guide.stem}")
    check_expected(guide, output)


# --------------------------------------------------------------------------- the rules


def test_every_shell_block_runs_or_says_why_not() -> None:
    for path in DOCUMENTS:
        for block in blocks(path):
            where = f"{name(path)}:{block.line}"
            assert block.language not in _SHELL_FENCES, f"{where}: fence shell as sh"
            assert block.not_run is None or block.language == "sh", f"{where}: not a sh block"
        runs = any(block.runs for block in blocks(path))
        assert runs == (name(path) in EXPECTED), f"{name(path)}: EXPECTED and its commands"


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings."""
    headings = re.findall(r"^#+ (.+)$", _FENCE.sub("", path.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_every_relative_link_leads_somewhere() -> None:
    for path in DOCUMENTS:
        text = _FENCE.sub("", path.read_text())
        for link in _LINK.finditer(text):
            target = link["target"]
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            destination = (path.parent / file).resolve() if file else path
            assert destination.exists(), f"{name(path)}: {target} is missing"
            if anchor:
                assert anchor in _anchors(destination), f"{name(path)}: no #{anchor} there"


def test_the_docs_index_links_every_guide() -> None:
    index = (ROOT / "docs" / "index.md").read_text()
    for guide in GUIDES:
        if guide.name != "index.md":
            assert f"]({guide.name})" in index, f"docs/index.md does not link {guide.name}"
