"""The tutorial's walk-through (docs/tutorial.md) works verbatim against `todo-agent serve`."""

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.servers import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "docs" / "tutorial.md"


def walkthrough() -> str:
    """The tutorial's shell blocks, but those marked `<!-- not run: ... -->` (`make run`)."""
    blocks = re.findall(r"(?<!-->\n)```sh\n(.*?)```", TUTORIAL.read_text(), re.DOTALL)
    assert blocks, "the tutorial has no walk-through"
    return "".join(blocks)


def test_the_tutorial_walkthrough_runs_against_a_fresh_server() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="todo-agent-readme-"))
    env = {"TODO_AGENT_DATA_DIR": str(data_dir)}
    try:
        with ServerProcess(env) as server:
            script = walkthrough().replace("localhost:8000", f"localhost:{server.port}")
            result = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script],
                cwd=ROOT,
                env={**os.environ, **env},
                capture_output=True,
                text=True,
                timeout=60,
            )
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    assert result.returncode == 0, result.stderr
    output = result.stdout
    assert '"title":"Buy groceries"' in output
    assert '"number":2' in output
    assert '"completed":true' in output
    assert "Added task 3: Call the plumber" in output
    assert "event: done" in output
    assert output.count("Added task 4: Buy milk") == 2  # the idempotent retry replays
    assert "Updated task 3: Call the plumber (due " in output
    assert "Marked task 1 as complete: Buy groceries." in output
    assert "Most urgent first:" in output
    assert '"detail"' not in output
