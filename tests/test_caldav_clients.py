"""The clients people use against a real `todo-agent serve`: the `caldav` library (what
Errands and many scripts use), and `vdirsyncer` syncing to a folder that `todoman` edits.
Both run as their own processes (`tests/dav_clients/caldav_steps.py`, the two CLIs).

Licences, for these test-only dependencies: caldav is GPL-3.0-or-later OR Apache-2.0 (1.x:
2.0 and later bring niquests, whose urllib3-future replaces urllib3 in the environment),
vobject Apache-2.0, vdirsyncer BSD-3-Clause, todoman ISC; none of them ships with the
service."""

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import auth, server_env
from tests.servers import ServerProcess

STEPS = Path(__file__).resolve().parent / "dav_clients" / "caldav_steps.py"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def server(
    database_url: str, engine: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("caldav") / "serve.log"
    with ServerProcess(server_env(database_url), log=log) as started:
        yield started


def api(server: ServerProcess, method: str, path: str, user: str, **kwargs: Any) -> Any:
    response = httpx.request(method, f"{server.url}/api/{user}{path}", headers=auth(user),
                             timeout=30, **kwargs)  # fmt: skip
    assert response.status_code < 300, response.text
    return response.json() if response.content else None


def password_for(server: ServerProcess, user: str) -> str:
    made = api(server, "POST", "/app-passwords", user, json={"name": "laptop"})
    return str(made["password"])


def caldav_steps(server: ServerProcess, user: str, password: str, *steps: str) -> Any:
    """The `caldav` library, in a process of its own, doing `steps`; what it saw, as JSON."""
    done = subprocess.run(
        [sys.executable, str(STEPS), server.url, user, password, *steps],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout)


# -- the caldav library --------------------------------------------------------------------


def test_the_caldav_library_discovers_lists_creates_edits_and_completes_todos(
    server: ServerProcess,
) -> None:
    password = password_for(server, "ada")
    api(server, "POST", "/tasks", "ada", json={"title": "Milk", "priority": "high"})
    seen = caldav_steps(server, "ada", password, "discover", "create", "edit", "complete")
    assert seen["calendars"] == ["Inbox"]
    assert seen["components"] == ["VTODO"]
    assert "Milk" in seen["todos"]
    tasks = api(server, "GET", "/tasks?status=all", "ada")["data"]
    by_title = {task["title"]: task for task in tasks}
    assert by_title["Buy stamps (edited)"]["completed"] is True
    assert by_title["Buy stamps (edited)"]["priority"] == "low"
    assert by_title["Buy stamps (edited)"]["tags"] == ["errands"]


def test_a_task_added_in_the_chat_or_rest_without_a_priority_reaches_the_caldav_library_without_one(
    server: ServerProcess,
) -> None:
    password = password_for(server, "eve")
    api(server, "POST", "/tasks", "eve", json={"title": "Post the letter"})
    api(server, "POST", "/tasks", "eve", json={"title": "Book the vet", "priority": "medium"})
    api(server, "POST", "/chat", "eve", json={"message": "add water the ferns"})
    seen = caldav_steps(server, "eve", password, "priorities")
    assert seen["priorities"] == {
        "Post the letter": None,
        "Book the vet": 5,
        "Water the ferns": None,
    }
    tasks = api(server, "GET", "/tasks", "eve")["data"]
    assert {task["title"]: task["priority"] for task in tasks} == {
        "Post the letter": "none", "Book the vet": "medium", "Water the ferns": "none"
    }  # fmt: skip


def test_the_caldav_library_syncs_by_token_across_a_change_and_a_delete(
    server: ServerProcess,
) -> None:
    password = password_for(server, "bo")
    one = api(server, "POST", "/tasks", "bo", json={"title": "One"})
    api(server, "POST", "/tasks", "bo", json={"title": "Two"})
    first = caldav_steps(server, "bo", password, "sync")
    assert sorted(first["titles"]) == ["One", "Two"]
    api(server, "DELETE", f"/tasks/{one['id']}", "bo")
    api(server, "POST", "/tasks", "bo", json={"title": "Three"})
    second = caldav_steps(server, "bo", password, f"sync={first['token']}")
    assert sorted(second["titles"]) == ["Three"]
    assert [url.rsplit("/", 1)[1] for url in second["deleted"]] == [f"{one['id']}.ics"]
    unchanged = caldav_steps(server, "bo", password, f"sync={second['token']}")
    assert (unchanged["titles"], unchanged["deleted"]) == ([], [])


def test_the_caldav_library_makes_a_list_and_a_viewer_cannot_write(
    server: ServerProcess,
) -> None:
    password = password_for(server, "cy")
    made = caldav_steps(server, "cy", password, "mkcalendar=Garden")
    assert made["calendars"] == ["Inbox", "Garden"]
    garden = next(item for item in api(server, "GET", "/lists", "cy")["data"]
                  if item["name"] == "Garden")  # fmt: skip
    invitation = api(server, "POST", f"/lists/{garden['id']}/invitations", "cy",
                     json={"role": "viewer"})  # fmt: skip
    api(server, "POST", f"/invitations/{invitation['token']}/accept", "dee")
    viewer = password_for(server, "dee")
    refused = caldav_steps(server, "dee", viewer, "write=Garden")
    assert refused["refused"] is True
    assert api(server, "GET", f"/tasks?list={garden['id']}", "cy")["count"] == 0


# -- vdirsyncer and todoman ----------------------------------------------------------------


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]')")
    return found


class Folder:
    """A vdirsyncer pair between the person's calendars and a folder, and todoman on it."""

    def __init__(self, root: Path, server: ServerProcess, user: str, password: str) -> None:
        self.root = root
        self.folder = root / "calendars"
        self.folder.mkdir()
        (root / "status").mkdir()
        config = root / "vdirsyncer.conf"
        config.write_text(
            "[general]\n"
            f'status_path = "{root / "status"}"\n\n'
            "[pair tasks]\n"
            'a = "local"\nb = "remote"\ncollections = ["from b"]\n'
            'conflict_resolution = "b wins"\nmetadata = ["displayname"]\n\n'
            '[storage local]\ntype = "filesystem"\n'
            f'path = "{self.folder}"\nfileext = ".ics"\n\n'
            '[storage remote]\ntype = "caldav"\n'
            f'url = "{server.url}/"\nusername = "{user}"\npassword = "{password}"\n'
            'item_types = ["VTODO"]\n'
        )
        todoman = root / "todoman_config.py"  # read as a Python module
        todoman.write_text(
            f'path = "{self.folder}/*"\ndate_format = "%Y-%m-%d"\ntime_format = "%H:%M"\n'
            'default_list = "Inbox"\n'
        )
        self.env = {
            **os.environ,
            "VDIRSYNCER_CONFIG": str(config),
            "TODOMAN_CONFIG": str(todoman),
            "XDG_CACHE_HOME": str(root / "cache"),
            "TZ": "UTC",
        }

    def vdirsyncer(self, *args: str) -> str:
        return self._run(_tool("vdirsyncer"), *args)

    def todo(self, *args: str) -> str:
        return self._run(_tool("todo"), *args)

    def _run(self, *command: str) -> str:
        done = subprocess.run(command, env=self.env, capture_output=True, text=True,
                              timeout=120, input="y\n" * 20)  # fmt: skip
        assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
        return done.stdout

    def sync(self) -> None:
        self.vdirsyncer("discover")
        self.vdirsyncer("sync")
        self.vdirsyncer("metasync")

    def todos(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = json.loads(
            self.todo("--porcelain", "list", "--status", "ANY") or "[]"
        )
        return listed


def test_vdirsyncer_and_todoman_edit_tasks_both_ways(server: ServerProcess, tmp_path: Path) -> None:
    password = password_for(server, "eve")
    api(server, "POST", "/tasks", "eve", json={"title": "Pay rent", "due_at": "2030-02-01"})
    folder = Folder(tmp_path, server, "eve", password)
    folder.sync()
    assert [todo["summary"] for todo in folder.todos()] == ["Pay rent"]
    # Made, edited and completed in todoman, synced: the service has it.
    folder.todo("new", "-l", "Inbox", "--due", "2030-03-01", "Renew passport")
    rent = next(todo for todo in folder.todos() if todo["summary"] == "Pay rent")
    folder.todo("edit", str(rent["id"]), "--priority", "high")
    folder.sync()
    tasks = {task["title"]: task for task in api(server, "GET", "/tasks", "eve")["data"]}
    assert set(tasks) == {"Pay rent", "Renew passport"}
    assert tasks["Pay rent"]["priority"] == "high"
    assert tasks["Renew passport"]["due_at"].startswith("2030-03-01")
    passport = next(todo for todo in folder.todos() if todo["summary"] == "Renew passport")
    folder.todo("done", str(passport["id"]))
    folder.sync()
    assert api(server, "GET", f"/tasks/{tasks['Renew passport']['id']}", "eve")["completed"]
    # A change by REST reaches the folder on the next sync.
    api(server, "PATCH", f"/tasks/{tasks['Pay rent']['id']}", "eve", json={"title": "Pay the rent"})
    folder.sync()
    assert "Pay the rent" in [todo["summary"] for todo in folder.todos()]


def test_todoman_completing_a_repeating_task_makes_the_next_one(
    server: ServerProcess, tmp_path: Path
) -> None:
    password = password_for(server, "fay")
    api(server, "POST", "/tasks", "fay", json={"title": "Water plants",
        "due_at": "2030-01-07T09:00:00Z", "recurrence": "FREQ=WEEKLY"})  # fmt: skip
    folder = Folder(tmp_path, server, "fay", password)
    folder.sync()
    plants = next(todo for todo in folder.todos() if todo["summary"] == "Water plants")
    folder.todo("done", str(plants["id"]))
    folder.sync()
    tasks = api(server, "GET", "/tasks?status=all", "fay")["data"]
    assert sorted((task["completed"], task["due_at"][:10]) for task in tasks) == [
        (False, "2030-01-14"), (True, "2030-01-07"),
    ]  # fmt: skip
    folder.sync()
    summaries = sorted((todo["summary"], todo["completed"]) for todo in folder.todos())
    assert summaries == [("Water plants", False), ("Water plants", True)]
