"""caldav-server-tester (the `caldav` library's own probe of a server's features) against a
real `todo-agent serve`, its findings compared with the profile committed beside this file
(tests/caldav_profile.json: feature -> support level, as the tester names them).

A feature that gets worse fails the test; one that gets better fails it too, asking for the
profile to be updated, so the profile always says what the server does. Many of the
tester's probes use VEVENTs, which this server refuses (it stores VTODO only, as the
contract says): those read "unknown", "unsupported" or "ungraceful" here by design.

The tester (AGPL-3.0-or-later) and its caldav 3.x live apart from the environment, in
.venv/dav-tester (tests/dav_clients/server-tester.txt says why); it runs as its own
process, `tests/dav_clients/server_tester.py`, which also says how it works around the
tester's one crash on this server."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import auth, server_env
from tests.servers import ServerProcess

HERE = Path(__file__).resolve().parent
PROFILE = HERE / "caldav_profile.json"
TESTER = HERE / "dav_clients" / "server_tester.py"
TESTER_PATH = Path(sys.executable).parent.parent / "dav-tester"


@pytest.fixture(scope="module")
def server(
    database_url: str, engine: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("caldav-tester") / "serve.log"
    with ServerProcess(server_env(database_url), log=log) as started:
        yield started


def findings_of_the_tester(server: ServerProcess, user: str) -> dict[str, str]:
    """Every check of the tester, run against the server as `user` with an app password."""
    if not (TESTER_PATH / "caldav_server_tester").is_dir():
        problem = f"caldav-server-tester is not installed in {TESTER_PATH} (make .venv/.installed)"
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    made = httpx.post(f"{server.url}/api/{user}/app-passwords", headers=auth(user),
                      json={"name": "server tester"}, timeout=30)  # fmt: skip
    assert made.status_code == 201, made.text
    done = subprocess.run(
        [sys.executable, str(TESTER), server.url, made.json()["username"],
         made.json()["password"]],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(TESTER_PATH)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout
    findings: dict[str, str] = json.loads(done.stdout)
    return findings


def test_the_server_testers_findings_match_the_committed_profile(server: ServerProcess) -> None:
    expected: dict[str, str] = json.loads(PROFILE.read_text())
    found = findings_of_the_tester(server, "ada")
    changed = {
        feature: {"profile": expected.get(feature), "found": found.get(feature)}
        for feature in sorted(expected.keys() | found.keys())
        if expected.get(feature) != found.get(feature)
    }
    assert not changed, (
        "caldav-server-tester found the server different from tests/caldav_profile.json; "
        "a regression is to fix, an improvement is to write into the profile:\n"
        + json.dumps(changed, indent=2)
        + "\nfound:\n"
        + json.dumps(found, indent=2)
    )
