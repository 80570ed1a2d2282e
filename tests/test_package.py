"""The package is self-contained: a wheel built from the source tree, installed into a fresh
virtualenv, migrates and serves from an empty directory with no source tree beside it,
on the embedded PostgreSQL and on DATABASE_URL.

The wheel is built from a copy of the files git would put in a fresh clone (tracked and
not ignored), so nothing left over in the working tree (build/, egg-info) can slip in.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.servers import ServerProcess

ROOT = Path(__file__).resolve().parent.parent


def _run(*command: str | Path, cwd: Path = ROOT, timeout_s: float = 300) -> str:
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert result.returncode == 0, f"{command} exited {result.returncode}:\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    # Outside pytest's private tmp tree: the embedded PostgreSQL runs as its own user.
    path = Path(tempfile.mkdtemp(prefix="todo-agent-package-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def wheel(workdir: Path) -> Path:
    """The wheel `pip wheel` builds from a fresh-clone copy of the source tree."""
    source = workdir / "source"
    files = _run("git", "ls-files", "--cached", "--others", "--exclude-standard", "-z")
    for name in filter(None, files.split("\0")):
        origin = ROOT / name
        if not origin.exists() and not origin.is_symlink():
            continue  # deleted in the working tree, not yet committed
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if origin.is_symlink():
            target.symlink_to(os.readlink(origin))
        else:
            shutil.copy2(origin, target)
    dist = workdir / "dist"
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", dist, source)
    (built,) = dist.glob("todo_agent-*.whl")
    return built


@pytest.fixture(scope="module")
def todo_agent(workdir: Path, wheel: Path) -> Path:
    """`todo-agent` from the wheel installed (with the pinned dependencies) into a fresh venv."""
    venv = workdir / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    constraints = ROOT / "constraints.txt"
    # No byte-compiling of every installed module (most of pip's time here): the few the
    # commands import are compiled as they are.
    _run(
        *(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-compile"),
        *("-c", constraints, wheel),
    )
    # The installed package, not the source tree, is what runs.
    location = _run(python, "-c", "import backend; print(backend.__file__)", cwd=workdir)
    assert Path(location.strip()).is_relative_to(venv), location
    return venv / "bin" / "todo-agent"


def test_wheel_carries_the_migrations_and_no_tests(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    versions = [path.name for path in (ROOT / "backend" / "alembic" / "versions").glob("*.py")]
    assert versions
    assert {"backend/alembic/env.py", "backend/alembic/script.py.mako"} <= names
    assert {f"backend/alembic/versions/{name}" for name in versions} <= names
    top_level = {name.split("/", 1)[0] for name in names}
    assert top_level == {"backend", "todo_agent-0.1.0.dist-info"}, top_level


@pytest.mark.parametrize("database", ["embedded", "DATABASE_URL"])
def test_installed_wheel_migrates_serves_and_mints_tokens_from_an_empty_directory(
    todo_agent: Path,
    workdir: Path,
    database: str,
    engine: AsyncEngine,  # the shared test database, migrated to head
    database_url: str,
) -> None:
    empty = workdir / f"cwd-{database}"
    empty.mkdir()
    env = {"TODO_AGENT_DATA_DIR": str(workdir / f"data-{database}"), "PYTHONPATH": ""}
    if database == "DATABASE_URL":
        env["DATABASE_URL"] = database_url  # already at head: `migrate` is a no-op there
    command_env = {**os.environ, **env}

    def cli(*args: str) -> str:
        result = subprocess.run(
            [todo_agent, *args], cwd=empty, env=command_env, capture_output=True, text=True
        )
        assert result.returncode == 0, f"todo-agent {args[0]} failed:\n{result.stderr}"
        return result.stdout

    cli("migrate")
    with ServerProcess(env, command=[str(todo_agent), "serve"], cwd=empty) as server:
        deadline = time.monotonic() + 60
        while (ready := httpx.get(f"{server.url}/ready")).status_code != 200:
            assert time.monotonic() < deadline, ready.text
            time.sleep(0.1)
        token = cli("token", "packaged-user").strip()
        response = httpx.get(
            f"{server.url}/api/packaged-user/tasks", headers={"Authorization": f"Bearer {token}"}
        )
        assert response.status_code == 200, response.text
    assert list(empty.iterdir()) == []  # nothing needed, or left, beside the working directory
