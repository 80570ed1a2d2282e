"""An embedded PostgreSQL (the `pgserver` package's binaries) for development and tests."""

import subprocess
import warnings
from pathlib import Path
from typing import Any

from backend.settings import normalize_database_url


class EmbeddedPostgres:
    """A PostgreSQL cluster under `data_dir/pgdata`, reached over a Unix socket there.

    Starting is idempotent and shared: several processes can ask for the same data dir and
    get the one running server; it stops when the last of them exits.
    """

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = data_dir.resolve() / "pgdata"

    def start(self) -> str:
        """Start (or join) the server and return its asyncpg URL."""
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        server = _server(self.pgdata)
        server.ensure_postgres_running()  # a no-op unless it was stopped under us
        return normalize_database_url(server.get_uri())

    def stop(self) -> None:
        """Stop the server now (fast shutdown: open connections are cut)."""
        from pgserver._commands import POSTGRES_BIN_PATH

        subprocess.run(  # noqa: S603 (our own pg_ctl, fixed arguments)
            [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(self.pgdata), "-w", "-m", "fast", "stop"],
            check=True,
            capture_output=True,
            user=_server(self.pgdata).system_user,
        )


def _server(pgdata: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from pgserver.postgres_server import get_server

    return get_server(pgdata, cleanup_mode="stop")
