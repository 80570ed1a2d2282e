"""Real `todo-agent serve` processes, for behaviour that crosses processes."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx

TODO_AGENT = str(Path(sys.executable).parent / "todo-agent")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def run_cli(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TODO_AGENT, *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )


class ServerProcess:
    """A server on a free loopback port (or `port`, chosen before), ready once `GET /health`
    answers 200: by default `todo-agent serve`; `command` runs another one (it gets `--port`
    appended)."""

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        workers: int = 1,
        log: Path | None = None,
        command: Sequence[str] | None = None,
        cwd: Path | None = None,
        port: int | None = None,
    ):
        self.env = {**os.environ, **env}
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        base = command or [TODO_AGENT, "serve", "--workers", str(workers)]
        self.command = [*base, "--port", str(self.port)]
        self.cwd = cwd
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    # A loaded machine (the whole suite) may take a minute or more to start one.
    def start(self, timeout_s: float = 180) -> Self:
        with open(self.log or os.devnull, "ab") as output:  # the child keeps its own copy
            self.process = subprocess.Popen(
                self.command, env=self.env, cwd=self.cwd, stdout=output, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout_s
        # One client for every ask: each new one loads the certificate authorities again,
        # 60 ms of CPU taken from the starting server ten times a second.
        with httpx.Client(timeout=1) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"server exited with {self.process.returncode}: {self.logs()}"
                    )
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"server did not start: {self.logs()}")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def logs(self) -> str:
        return self.log.read_text() if self.log and self.log.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                self.stop(timeout_s=15)
            except subprocess.TimeoutExpired:
                self.kill()


@contextmanager
def server_processes(
    env: Mapping[str, str], logs: Path, names: Sequence[str]
) -> Iterator[list[ServerProcess]]:
    """One `todo-agent serve` per name, on one environment, each logging to `logs/NAME.log`;
    not started here (see `start_all`), and all killed at the end."""
    servers = [ServerProcess(env, log=logs / f"{name}.log") for name in names]
    try:
        yield servers
    finally:
        for server in servers:
            server.kill()


def start_all(servers: Sequence[ServerProcess], *, timeout_s: float = 180) -> None:
    """Start those of the servers that are not running, side by side (each takes seconds)."""
    stopped = [server for server in servers if not server.running]
    with ThreadPoolExecutor(max_workers=max(1, len(stopped))) as pool:
        list(pool.map(lambda server: server.start(timeout_s), stopped))


def stop_all(servers: Sequence[ServerProcess]) -> None:
    """Stop the running servers with SIGTERM, all at once."""
    up = [server for server in servers if server.running]
    with ThreadPoolExecutor(max_workers=max(1, len(up))) as pool:
        list(pool.map(lambda server: server.stop(), up))


async def until(
    condition: Callable[[], Awaitable[bool]], *, timeout_s: float, message: str
) -> None:
    """Wait for `condition` to hold, asking every 50 ms; fail with `message` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not await condition():
        assert time.monotonic() < deadline, message
        await asyncio.sleep(0.05)
