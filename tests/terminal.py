"""A real terminal for the tests: tmux, whose pseudo-terminal answers what prompt_toolkit
asks of a terminal and whose screen can be read back, as a person would see it.

Missing tmux: a failure under CI=true (CI installs it), a loud skip elsewhere."""

import os
import re
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import pytest

# remain-on-exit: the screen (and the exit status) stay readable after the program ends.
EXITED = "[todo-agent exited "  # the shell's line when the program ends: EXITED + "0]"
CONFIG = "set -g remain-on-exit on\nset -g history-limit 10000\n"


def require_tmux() -> str:
    found = shutil.which("tmux")
    if found:
        return found
    problem = "tmux is missing (apt-get install tmux)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: {problem}; the terminal tests must run in CI")
    print(f"\n*** SKIPPING terminal tests: {problem} ***")
    pytest.skip(f"TERMINAL TESTS SKIPPED: {problem}")


class Tmux:
    """`command` at a terminal of its own (a private tmux server: the person's own sessions
    are never touched): keys typed in, the screen read back."""

    def __init__(
        self, command: Sequence[str], *, env: Mapping[str, str], cwd: Path, width: int = 160
    ) -> None:
        self.tmux = require_tmux()
        self.socket = f"todo-agent-test-{uuid.uuid4().hex[:12]}"
        self.config = cwd / f"{self.socket}.conf"
        self.config.write_text(CONFIG)
        # The server is started here, so the program gets exactly this environment. A shell
        # around the program prints its exit status: tmux 3.3a sometimes leaves an ended
        # program a zombie for good (its SIGCHLD unhandled), so the pane never reads as dead.
        wrapped = f'{shlex.join(command)}; echo "{EXITED}$?]"'
        self._tmux(
            "new-session", "-d", "-x", str(width), "-y", "50", "-s", "t", wrapped,
            env=env, cwd=cwd,
        )  # fmt: skip

    def _tmux(
        self, *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> str:
        done = subprocess.run(
            [self.tmux, "-L", self.socket, "-f", str(self.config), *args],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    def screen(self) -> str:
        """Everything shown so far, wrapped lines joined."""
        return self._tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "t")

    def wait_for(self, text: str, *, times: int = 1, timeout_s: float = 15) -> str:
        """The screen once `text` shows on it (`times` times). A captured screen has no
        trailing spaces, so neither has `text` here."""
        text = text.rstrip()
        deadline = time.monotonic() + timeout_s
        while (screen := self.screen()).count(text) < times:
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not shown {times}x in {timeout_s} s:\n{screen}")
            time.sleep(0.1)
        return screen

    def say(self, line: str) -> None:
        """Type a line and press Enter."""
        self._tmux("send-keys", "-t", "t", "-l", line)
        self._tmux("send-keys", "-t", "t", "Enter")

    def exit_status(self, timeout_s: float = 30) -> int:
        """The program's exit status once it has ended (minus the signal that ended it)."""
        found = re.search(
            rf"{re.escape(EXITED)}(\d+)\]", self.wait_for(EXITED, timeout_s=timeout_s)
        )
        assert found
        status = int(found[1])
        return -(status - 128) if status > 128 else status  # the shell's 128+N for signal N

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        subprocess.run([self.tmux, "-L", self.socket, "kill-server"], capture_output=True)
        self.config.unlink(missing_ok=True)
