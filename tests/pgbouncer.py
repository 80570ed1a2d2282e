"""A real PgBouncer in transaction mode in front of a test database (Debian's `pgbouncer`).

`make test` runs part of the suite a second time through one (TEST_THROUGH_PGBOUNCER=1,
see tests/conftest.py); `python -m bench.versus --pooler` measures chat through one.
"""

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from sqlalchemy.engine import make_url

from tests.servers import free_port

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def available() -> bool:
    return os.access(PGBOUNCER, os.X_OK)


class PgBouncer:
    """PgBouncer on a free loopback port, pooling in transaction mode to the database of
    `direct_url`, with fewer server connections (`pool_size`) than its clients will open, so
    that consecutive transactions of one client really land on different server connections.
    `url` is `direct_url` through it."""

    def __init__(self, direct_url: str, *, pool_size: int = 8) -> None:
        self.direct_url = direct_url
        self.port = free_port()
        parsed = make_url(direct_url)
        self.url = parsed.set(host="127.0.0.1", port=self.port, query={}).render_as_string(
            hide_password=False
        )
        self._dir = Path(tempfile.mkdtemp(prefix="todo-agent-pgbouncer-"))
        # The database's socket directory (an embedded PostgreSQL) or its host and port.
        host = str(parsed.query.get("host") or parsed.host or "127.0.0.1")
        self._socket_dir = host if host.startswith("/") else None
        target = f"host={host} port={parsed.port or 5432} dbname={parsed.database}"
        if parsed.username:
            target += f" user={parsed.username}"
        if parsed.password:
            target += f" password={parsed.password}"
        (self._dir / "users.txt").write_text(f'"{parsed.username or "postgres"}" ""\n')
        (self._dir / "pgbouncer.ini").write_text(
            f"""[databases]
{parsed.database} = {target}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self._dir / "users.txt"}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 1000
"""
        )
        self.log = self._dir / "pgbouncer.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 10) -> Self:
        command = [PGBOUNCER, str(self._dir / "pgbouncer.ini")]
        if os.geteuid() == 0:  # it refuses to run as root: it drops to a user of its own,
            # the one whose socket directory it connects through (an embedded PostgreSQL's
            # data directory is its server's alone), else nobody
            user = "nobody"
            if self._socket_dir is not None:
                user = pwd.getpwuid(os.stat(self._socket_dir).st_uid).pw_name
            command[1:1] = ["-u", user]
            self._dir.chmod(0o755)
        with open(self.log, "ab") as output:  # the child keeps its own copy
            self._process = subprocess.Popen(command, stdout=output, stderr=output)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {self.log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"pgbouncer did not listen in {timeout_s} s: {self.log.read_text()}")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
