"""`todo-agent chat` as a person or a script uses it: a subprocess against a real server."""

import contextlib
import json
import os
import queue
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest

from backend.services.dev_sign_in import dev_user_id
from tests.conftest import TEST_SECRET, auth, server_env, token_for
from tests.fake_openai import FakeOpenAI, call, error, reply, tool_calls
from tests.servers import TODO_AGENT, ServerProcess, run_cli
from tests.terminal import Tmux


@pytest.fixture(scope="module")
def server(
    database_url: str,
    fake_openai_server: FakeOpenAI,
    engine: object,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerProcess]:
    env = server_env(
        database_url,
        fake_openai_server,
        OPENAI_MAX_RETRIES="0",
        REMINDER_POLL_S="0.2",  # a reminder a second ahead fires within the test's wait
    )
    with ServerProcess(env, log=tmp_path_factory.mktemp("chat-cli") / "serve.log") as process:
        yield process


@pytest.fixture
def name() -> str:
    """A new person per test: the server outlives the tables between tests."""
    return f"Chat Tester {uuid.uuid4().hex[:8]}"


WORKDIR = Path(os.environ.get("TMPDIR", "/tmp"))


def _environment(env: dict[str, str] | None) -> dict[str, str]:
    """Only the environment given: no secret or token of this machine leaks in."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("JWT_", "TODO_AGENT_"))}
    return {
        **clean,
        "TODO_AGENT_DATA_DIR": str(WORKDIR / "nowhere"),
        "COLUMNS": "160",  # tables as wide as a real terminal's, not a pipe's 80
        **(env or {}),
    }


def chat(
    server: ServerProcess, *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`todo-agent chat --url ...` in an empty directory, with only the environment given."""
    return subprocess.run(
        [TODO_AGENT, "chat", "--url", server.url, *args],
        input=stdin,
        env=_environment(env),
        cwd=WORKDIR,
        capture_output=True,
        text=True,
        timeout=60,
    )


class OpenChat:
    """`todo-agent chat` left open, as a person leaves it: stdin stays open, stdout is read
    line by line as it comes."""

    def __init__(self, server: ServerProcess, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [TODO_AGENT, "chat", "--url", server.url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=_environment(env),
            cwd=WORKDIR,
            text=True,
        )
        self.seen: list[str] = []
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))

    def wait_for(self, text: str, timeout_s: float = 10) -> str:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"{text!r} not printed within {timeout_s} s: {self.seen}")

    def say(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def close(self) -> int:
        if self.process.poll() is None:
            with contextlib.suppress(BrokenPipeError):
                self.say("/quit")
        try:
            return self.process.wait(timeout=10)
        finally:
            if self.process.poll() is None:
                self.process.kill()


def test_one_message_prints_the_streamed_answer_and_exits(
    server: ServerProcess, model: FakeOpenAI, name: str
) -> None:
    model.script(
        tool_calls(call("add_todo", {"title": "Buy milk"})),
        reply("Added task 1: Buy milk.", chunks=["Added task 1:", " Buy milk."]),
    )
    done = chat(server, "--user", name, "-m", "add milk", env={"JWT_SECRET": TEST_SECRET})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Added task 1: Buy milk.\n"  # the answer alone: fit for scripts
    assert "Added task 1: Buy milk" in done.stderr  # the tool activity, beside it
    user = dev_user_id(name)
    tasks = httpx.get(f"{server.url}/api/{user}/tasks", headers=auth(user)).json()
    assert [task["title"] for task in tasks["data"]] == ["Buy milk"]
    sent = model.requests[0].body
    assert sent["stream"] is True


def test_a_scripted_session_uses_the_commands(
    server: ServerProcess, model: FakeOpenAI, name: str
) -> None:
    model.script(
        tool_calls(call("add_todo", {"title": "Water <b>plants</b>", "priority": "high"})),
        reply("Added task 1."),
        reply("Second session."),
    )
    token = token_for(dev_user_id(name), name=name)
    lines = [
        "add plants",
        "/tasks",
        "/new",
        "hello again",
        "/sessions",
        "/nonsense",
        "/quit",
        "never sent",
    ]
    done = chat(server, stdin="\n".join(lines) + "\n", env={"TODO_AGENT_TOKEN": token})
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"as {name} ({dev_user_id(name)})" in out
    assert "⚙ Added task 1: Water <b>plants</b>" in out
    assert "agent> Added task 1." in out
    assert "Water <b>plants</b>" in out.split("you> /tasks", 1)[1]  # the table
    assert "high" in out
    assert "New chat." in out
    assert "agent> Second session." in out
    sessions = out.split("you> /sessions", 1)[1]
    assert "hello again (current)" in sessions
    assert "add plants" in sessions
    assert "/open ID" in out.split("you> /nonsense", 1)[1]  # help for what it does not know
    assert "never sent" not in out
    assert len(model.requests) == 3


def test_tasks_show_steps_under_their_plan_and_settings_are_shown(
    server: ServerProcess, name: str
) -> None:
    user = dev_user_id(name)
    api = httpx.Client(base_url=f"{server.url}/api/{user}", headers=auth(user))
    plan = {"title": "Move house", "steps": ["Book the van", "Pack boxes"]}
    assert api.post("/tasks", json=plan).status_code == 201
    assert api.post("/tasks", json={"title": "Call mom"}).status_code == 201
    assert api.patch("/tasks/2/complete", json={"completed": True}).status_code == 200
    changes = {"display_name": "Ana", "timezone": "Europe/Lisbon", "instructions": "Be brief."}
    assert api.patch("/settings", json=changes).status_code == 200

    lines = ["/tasks", "/settings", "/quit"]
    token = token_for(user, name=name)
    done = chat(server, stdin="\n".join(lines) + "\n", env={"TODO_AGENT_TOKEN": token})
    assert done.returncode == 0, done.stderr
    tasks, settings = done.stdout.split("you> /tasks", 1)[1].split("you> /settings", 1)
    rows = [line for line in tasks.splitlines() if "Move house" in line or "└" in line]
    assert "1/2" in rows[0]  # the plan's progress
    assert "└ Book the van" in rows[1]  # its steps, indented, in order
    assert "✓" in rows[1]
    assert "└ Pack boxes" in rows[2]
    assert "Call mom" in tasks
    assert "└ Call mom" not in tasks
    for value in ("Ana", "Europe/Lisbon", "Be brief.", "gpt-4o-mini"):
        assert value in settings


def test_export_writes_everything_of_the_user_to_a_file(
    server: ServerProcess, name: str, tmp_path: Path
) -> None:
    user = dev_user_id(name)
    api = httpx.Client(base_url=f"{server.url}/api/{user}", headers=auth(user))
    plan = {"title": "Move house", "steps": ["Book the van", "Pack boxes"]}
    assert api.post("/tasks", json=plan).status_code == 201
    target = tmp_path / "mine.json"
    lines = [f"/export {target}", f"/export {tmp_path / 'missing' / 'x.json'}", "/quit"]
    token = token_for(user, name=name)
    done = chat(server, stdin="\n".join(lines) + "\n", env={"TODO_AGENT_TOKEN": token})
    assert done.returncode == 0, done.stderr
    assert f"Exported everything of yours to {target} (" in done.stdout
    assert "Cannot write" in done.stdout  # said in plain words; the chat goes on
    document = json.loads(target.read_text())
    assert document["format"] == "todo-agent-export/1"
    [task] = document["tasks"]
    assert [step["title"] for step in task["steps"]] == ["Book the van", "Pack boxes"]
    assert "/export FILE" in done.stdout  # in the help shown at the start


def test_the_development_secret_in_the_data_dir_signs_in(
    server: ServerProcess, model: FakeOpenAI, name: str, tmp_path: Path
) -> None:
    # As `make run` leaves it: the secret the server made, under the data dir.
    (tmp_path / "jwt_secret").write_text(TEST_SECRET)
    model.script(reply("Hello."))
    done = chat(server, "--user", name, "-m", "hi", env={"TODO_AGENT_DATA_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Hello.\n"


def test_without_a_token_or_secret_it_says_what_to_do(server: ServerProcess) -> None:
    done = chat(server, "-m", "hi")
    assert done.returncode == 2
    assert "TODO_AGENT_TOKEN" in done.stderr


def test_errors_are_told_in_plain_words(server: ServerProcess, name: str) -> None:
    expired = token_for(dev_user_id(name), ttl_s=-3600)
    done = chat(server, "-m", "hi", "--token", expired)
    assert done.returncode == 1
    assert "not valid or has expired" in done.stderr
    assert done.stdout == ""
    unreachable = chat(server, "-m", "hi", "--url", "http://127.0.0.1:9", "--token", expired)
    assert unreachable.returncode == 1
    assert "Cannot reach the service at http://127.0.0.1:9" in unreachable.stderr


def test_a_past_session_goes_on_with_session_or_open(
    server: ServerProcess, model: FakeOpenAI, name: str
) -> None:
    user = dev_user_id(name)
    model.script(reply("First answer."), reply("Second answer."), reply("Third answer."))
    first = httpx.post(
        f"{server.url}/api/{user}/chat", json={"message": "First question"}, headers=auth(user)
    ).json()
    session = first["session_id"]
    env = {"JWT_SECRET": TEST_SECRET}
    done = chat(server, "--user", name, "--session", session, "-m", "Second question", env=env)
    assert done.stdout == "Second answer.\n", done.stderr
    repl = chat(server, "--user", name, stdin=f"/open {session}\nThird question\n", env=env)
    assert "you> First question" in repl.stdout  # the history, as it was
    assert "agent> Second answer." in repl.stdout
    assert "agent> Third answer." in repl.stdout
    messages = httpx.get(
        f"{server.url}/api/{user}/sessions/{session}/messages", headers=auth(user)
    ).json()["data"]
    assert [m["content"] for m in messages if m["role"] == "user"] == [
        "First question",
        "Second question",
        "Third question",
    ]


def test_tasks_show_a_repeating_task_s_rule_and_its_reminder_in_local_time(
    server: ServerProcess, name: str
) -> None:
    user = dev_user_id(name)
    api = httpx.Client(base_url=f"{server.url}/api/{user}", headers=auth(user))
    remind = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    task = {"title": "Team sync", "recurrence": "FREQ=WEEKLY;BYDAY=MO"}
    created = api.post("/tasks", json={**task, "remind_at": remind.isoformat()})
    assert created.status_code == 201, created.text

    token = token_for(user, name=name)
    env = {"TODO_AGENT_TOKEN": token, "TZ": "Europe/Berlin"}
    done = chat(server, stdin="/tasks\n/quit\n", env=env)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if "Team sync" in line)
    assert "every Monday" in row
    local = remind.astimezone(ZoneInfo("Europe/Berlin")).strftime("%Y-%m-%d %H:%M")
    assert local in row  # the reminder, in the terminal's own time


def test_an_open_chat_prints_a_reminder_as_it_fires(server: ServerProcess, name: str) -> None:
    user = dev_user_id(name)
    session = OpenChat(server, env={"TODO_AGENT_TOKEN": token_for(user, name=name)})
    try:
        session.wait_for("reminders show here as they fire")  # following the events
        soon = datetime.now(UTC) + timedelta(seconds=1.5)
        task = {"title": "Take the <b>cake</b> out", "remind_at": soon.isoformat()}
        created = httpx.post(f"{server.url}/api/{user}/tasks", json=task, headers=auth(user))
        assert created.status_code == 201, created.text
        line = session.wait_for("⏰ Reminder:")
        assert "⏰ Reminder: Take the <b>cake</b> out (task 1)" in line

        session.say("/tasks")  # the chat goes on as before
        session.wait_for("Take the <b>cake</b> out")
    finally:
        assert session.close() == 0, session.seen


def test_user_alice_is_the_user_alice_of_todo_agent_token(server: ServerProcess) -> None:
    minted = run_cli("token", "alice", env={"JWT_SECRET": TEST_SECRET})
    assert minted.returncode == 0, minted.stderr
    headers = {"Authorization": f"Bearer {minted.stdout.strip()}"}
    made = httpx.post(f"{server.url}/api/alice/tasks", json={"title": "Feed Bob"}, headers=headers)
    assert made.status_code == 201, made.text

    done = chat(server, "--user", "alice", stdin="/tasks\n", env={"JWT_SECRET": TEST_SECRET})
    assert done.returncode == 0, done.stderr
    assert "as alice (alice)" in done.stdout
    assert "Feed Bob" in done.stdout.split("you> /tasks", 1)[1]


# ---------------------------------------------------------------- ask first, undo after

# The stub answers (the model fails at once): it asks before it deletes, with the default
# `confirm`, and reads "yes" and "no".


def _milk_and_mom(server: ServerProcess, model: FakeOpenAI, name: str) -> httpx.Client:
    model.default = error(500)
    user = dev_user_id(name)
    api = httpx.Client(base_url=f"{server.url}/api/{user}", headers=auth(user))
    for title in ("Buy milk", "Call mom"):
        assert api.post("/tasks", json={"title": title}).status_code == 201
    return api


def _titles(api: httpx.Client) -> list[str]:
    return [task["title"] for task in api.get("/tasks").json()["data"]]


def _at_a_terminal(server: ServerProcess, name: str, *args: str) -> Tmux:
    token = token_for(dev_user_id(name), name=name)
    command = [TODO_AGENT, "chat", "--url", server.url, *args]
    return Tmux(command, env=_environment({"TODO_AGENT_TOKEN": token}), cwd=WORKDIR)


def test_at_a_terminal_a_held_delete_asks_y_n_and_undo_takes_it_back(
    server: ServerProcess, model: FakeOpenAI, name: str
) -> None:
    api = _milk_and_mom(server, model, name)
    question = "Delete task 1 “Buy milk”? [y/N] "
    with _at_a_terminal(server, name) as terminal:
        terminal.wait_for("you> ")
        terminal.say("delete the milk task")
        terminal.wait_for(question)
        assert _titles(api) == ["Buy milk", "Call mom"]  # nothing runs before the answer
        terminal.say("n")
        terminal.wait_for("⚙ Not done (you said no): Delete task 1 “Buy milk”")
        assert _titles(api) == ["Buy milk", "Call mom"]

        terminal.say("delete the milk task")
        terminal.wait_for(question, times=2)
        terminal.say("y")
        screen = terminal.wait_for("agent> Here is what I did: Deleted task 1: Buy milk.")
        # In order: the question after the answer that asks it, the call's effect after the yes.
        assert re.search(
            r"agent> Delete task 1 “Buy milk”\? Reply yes.*\n.*\n"
            r"Delete task 1 “Buy milk”\? \[y/N\] y\n  ⚙ Deleted task 1: Buy milk\n",
            screen,
        ), screen
        assert _titles(api) == ["Call mom"]

        terminal.say("/trash")
        assert re.search(r"│ 1 +│ Buy milk", terminal.wait_for("/restore N brings one back"))
        terminal.say("/undo")
        terminal.wait_for("Undone: brought back task 1 “Buy milk”.")
        assert _titles(api) == ["Buy milk", "Call mom"]
        terminal.say("/undo")
        terminal.wait_for("Nothing to undo in this session.")
        terminal.say("/quit")
        assert terminal.exit_status() == 0


def test_a_call_left_waiting_by_m_says_how_to_answer_and_is_asked_at_open(
    server: ServerProcess, model: FakeOpenAI, name: str
) -> None:
    api = _milk_and_mom(server, model, name)
    env = {"JWT_SECRET": TEST_SECRET}
    asked = chat(server, "--user", name, "-m", "delete the milk task", env=env)
    assert asked.returncode == 0, asked.stderr
    question = "Delete task 1 “Buy milk”? Reply yes to go ahead, or no to leave it.\n"
    assert asked.stdout == question  # no terminal to ask at: the question, and it waits
    assert "⏸ waiting for your yes: Delete task 1 “Buy milk”" in asked.stderr
    found = re.search(r"todo-agent chat --session (\S+) -m yes \(or no\)", asked.stderr)
    assert found, asked.stderr
    assert _titles(api) == ["Buy milk", "Call mom"]

    # Opened at a terminal, the call still waiting is asked about.
    with _at_a_terminal(server, name) as terminal:
        terminal.wait_for("you> ")
        terminal.say(f"/open {found[1]}")
        terminal.wait_for("Delete task 1 “Buy milk”? [y/N] ")
        terminal.say("yes")
        terminal.wait_for("⚙ Deleted task 1: Buy milk")
        assert _titles(api) == ["Call mom"]
        terminal.say("/quit")
        assert terminal.exit_status() == 0


def test_from_a_pipe_the_next_line_answers_and_the_trash_and_undo_commands_work(
    server: ServerProcess, model: FakeOpenAI, name: str
) -> None:
    api = _milk_and_mom(server, model, name)
    lines = ["delete the milk task", "yes", "/trash", "/restore 1", "/trash", "/undo", "/help"]
    done = chat(
        server, "--user", name, stdin="\n".join(lines) + "\n", env={"JWT_SECRET": TEST_SECRET}
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    asked, answered = out.split("you> yes", 1)
    assert "⏸ waiting for your yes: Delete task 1 “Buy milk”" in asked
    assert "answer yes or no on the next line" in asked
    assert "[y/N]" not in out  # no terminal: nobody to ask
    assert "⚙ Deleted task 1: Buy milk" in answered
    trash, restored, empty, undo, help_ = answered.split("you> /", 5)[1:]
    assert "Buy milk" in trash
    assert "Restored task 1: Buy milk" in restored
    assert "The trash is empty." in empty
    # Restored by hand since: the turn that deleted it is not undone (the service says why).
    assert "has changed since" in undo
    assert "/undo" in help_
    assert _titles(api) == ["Buy milk", "Call mom"]


# ---------------------------------------------------------------- lists


def test_lists_shows_each_list_with_role_and_pending_and_list_shows_one(
    server: ServerProcess, name: str
) -> None:
    user = dev_user_id(name)
    owner = f"{user}-owner"
    me = httpx.Client(base_url=f"{server.url}/api/{user}", headers=auth(user))
    them = httpx.Client(base_url=f"{server.url}/api/{owner}", headers=auth(owner))
    groceries = them.post("/lists", json={"name": "Groceries"}).json()["id"]
    invited = them.post(f"/lists/{groceries}/invitations", json={"role": "viewer"})
    assert me.post(f"/invitations/{invited.json()['token']}/accept").status_code == 200
    assert me.post("/lists", json={"name": "Work"}).status_code == 201
    assert me.post("/tasks", json={"title": "Call mom"}).status_code == 201
    for title in ("Milk", "Eggs"):
        made = them.post("/tasks", json={"title": title, "list_id": groceries})
        assert made.status_code == 201, made.text
    assert them.patch("/tasks/1", json={"assignee_id": user}).status_code == 200

    lines = ["/lists", "/list groceries", "/list Nowhere", "/tasks", "/help"]
    token = token_for(user, name=name)
    done = chat(server, stdin="\n".join(lines) + "\n", env={"TODO_AGENT_TOKEN": token})
    assert done.returncode == 0, done.stderr
    lists, one, nowhere, tasks, help_ = done.stdout.split("you> /", 5)[1:]
    assert "/list NAME shows one" in lists
    assert re.search(r"│ Inbox +│ owner +│ +│ 1 +│", lists), lists
    assert re.search(r"│ Groceries +│ viewer +│ ✓ +│ 2 +│", lists), lists
    assert re.search(r"│ Work +│ owner +│ +│ 0 +│", lists), lists
    # One list's tasks, under this reader's own numbers, with whom each is assigned to.
    assert "Groceries (2; you are its viewer)" in one
    assert re.search(r"│ 2 +│ Milk +│ you +│", one), one
    assert re.search(r"│ 3 +│ Eggs +│ +│", one), one
    assert "Call mom" not in one
    assert "No list called “Nowhere”. Your lists: Inbox, Groceries, Work." in nowhere
    # All tasks name their list once they span lists.
    assert re.search(r"│ 1 +│ Call mom +│ Inbox +│", tasks), tasks
    assert re.search(r"│ 2 +│ Milk +│ Groceries +│ you +│", tasks), tasks
    assert "/lists" in help_


def test_docs_add_uploads_a_file_and_docs_lists_them(
    server: ServerProcess, name: str, tmp_path: Path
) -> None:
    user = dev_user_id(name)
    api = httpx.Client(base_url=f"{server.url}/api/{user}", headers=auth(user))
    assert api.post("/lists", json={"name": "Home"}).status_code == 201
    checklist = tmp_path / "moving.md"
    checklist.write_text("# Moving\n\n## Week before\n\n- [ ] call the movers\n")
    env = {"TODO_AGENT_TOKEN": token_for(user, name=name)}

    def docs_add(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [TODO_AGENT, "docs", "add", *args, "--url", server.url],
            env=_environment(env), cwd=WORKDIR, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    added = docs_add(str(checklist), "--list", "home")
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == "Added “Moving” to home (1 passage)."
    notes = tmp_path / "notes.txt"
    notes.write_text("The wifi password is on the router.")
    assert docs_add(str(notes)).returncode == 0
    refused = docs_add(str(tmp_path / "photo.png"))
    assert refused.returncode == 1
    assert "Cannot read" in refused.stderr
    (tmp_path / "photo.png").write_bytes(b"\x89PNG\r\n")
    refused = docs_add(str(tmp_path / "photo.png"))
    assert (refused.returncode, "415" in refused.stderr) == (1, True)
    nowhere = docs_add(str(notes), "--list", "Nowhere")
    assert "No list called “Nowhere”. Your lists: Inbox, Home." in nowhere.stderr

    done = chat(server, stdin="/docs\n/help\n", env=env)
    assert done.returncode == 0, done.stderr
    shown = done.stdout.split("you> /docs", 1)[1]
    assert re.search(r"│ notes +│ Inbox +│ 1 +│", shown), shown
    assert re.search(r"│ Moving +│ Home +│ 1 +│", shown), shown
    assert shown.index("notes") < shown.index("Moving")  # newest first
    assert "/docs" in done.stdout.split("you> /help", 1)[1]


# ---------------------------------------------------------------- memories


def test_memory_lists_what_the_assistant_remembers(server: ServerProcess, name: str) -> None:
    user = dev_user_id(name)
    env = {"TODO_AGENT_TOKEN": token_for(user, name=name)}
    empty = chat(server, stdin="/memory\n", env=env)
    assert empty.returncode == 0, empty.stderr
    assert "Nothing remembered yet" in empty.stdout
    api = httpx.Client(base_url=f"{server.url}/api/{user}", headers=auth(user))
    for fact in ("My dentist is Dr. Lee", "My gate code is 4711"):
        assert api.post("/memories", json={"text": fact}).status_code == 201
    done = chat(server, stdin="/memory\n/help\n", env=env)
    assert done.returncode == 0, done.stderr
    shown, help_ = done.stdout.split("you> /memory", 1)[1].split("you> /help", 1)
    assert shown.index("My gate code is 4711") < shown.index("My dentist is Dr. Lee")
    assert "user" in shown
    assert "/memory" in help_
