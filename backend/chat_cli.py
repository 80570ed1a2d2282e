"""`todo-agent chat`: a terminal chat against a running service, through its public API only.

    todo-agent chat [--url URL] [--user NAME] [--session ID] [--token T] [-m MESSAGE]

A token comes from `--token` / `TODO_AGENT_TOKEN`, or is minted here when the service's
secret is known on this machine (JWT_SECRET, or the development secret in the data dir),
for the same user the web page's name sign-in gives (`--user alice` is the user `alice`).
Reads lines from a terminal (with editing and history) or from a pipe. While it is open, a
background thread follows the user's events and prints reminders as they fire.

A tool call held for the person's yes is asked about at a terminal (`Delete task 3 “Buy
milk”? [y/N] `) and the answers go back as the next request. From a pipe there is no one to
ask: the question is printed, and the next line (or, after `-m`, the next run) answers it.
"""

import argparse
import contextlib
import json
import mimetypes
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import httpx
from jose import jwt
from jose.exceptions import JOSEError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from backend.services.dev_sign_in import mint_dev_token
from backend.settings import ConfigError, Settings

DEFAULT_URL = "http://127.0.0.1:8000"
HELP = (
    "/tasks  your tasks · /lists  your lists · /list NAME  one list's tasks · /trash  deleted"
    " ones · /restore N · /undo  take back the last change · /sessions  past chats · /open ID"
    "  continue one · /docs  your documents · /memory  what it remembers of you · /settings"
    " · /export FILE  all your data · /new · /quit"
)
Event = Callable[[str, dict[str, Any]], None]
# Longer than the service's keep-alive interval (15 s): a silent stream is a dead one.
EVENTS_READ_TIMEOUT_S = 45.0
# Pauses before following the events again after a drop: doubling, up to a few seconds.
RECONNECT_FIRST_S, RECONNECT_MAX_S = 0.5, 5.0


class ChatError(Exception):
    """Something the person should be told in plain words; the chat goes on."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status, when the service answered


@dataclass
class Credentials:
    token: str
    user_id: str
    name: str


def add_arguments(parser: argparse.ArgumentParser, *, chatting: bool = True) -> None:
    """The service and who is speaking; and, for the chat itself, its session and message."""
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the service (default {DEFAULT_URL})")
    parser.add_argument("--user", help="your name, for a locally minted development token")
    parser.add_argument(
        "--token", default=os.environ.get("TODO_AGENT_TOKEN"), help="a bearer token to use"
    )
    if chatting:
        parser.add_argument("--session", help="continue this session id")
        parser.add_argument("-m", "--message", help="send one message, print the answer, exit")


def credentials(args: argparse.Namespace) -> Credentials:
    if args.token:
        try:
            claims = jwt.get_unverified_claims(args.token)
        except JOSEError as error:
            raise ConfigError("--token / TODO_AGENT_TOKEN is not a JWT.") from error
        # Only read to know the user id for the path; the service verifies the token.
        user_id = claims.get("sub")
        if not isinstance(user_id, str) or not user_id:
            raise ConfigError("--token / TODO_AGENT_TOKEN has no sub (user id).")
        return Credentials(args.token, user_id, str(claims.get("name") or user_id))
    # The service's own rule, but a secret made here would sign tokens no server accepts.
    settings = Settings().with_development_secret(create=False)
    if settings.jwt_secret is None:
        raise ConfigError(
            "no token: pass --token or set TODO_AGENT_TOKEN (todo-agent token USER_ID), or run "
            "where the service's JWT_SECRET or its data dir (TODO_AGENT_DATA_DIR) is."
        )
    name = args.user or os.environ.get("USER") or "me"
    minted = mint_dev_token(settings=settings, name=name)
    return Credentials(minted.token, minted.user_id, minted.name)


def local_timezone() -> str | None:
    """The IANA name of this machine's timezone, when it can be told."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    localtime = Path("/etc/localtime")
    if localtime.is_symlink():
        candidates.append(str(localtime.resolve()).partition("/zoneinfo/")[2])
    for name in candidates:
        try:
            if name:
                ZoneInfo(name)
                return name
        except (ZoneInfoNotFoundError, ValueError):
            continue
    return None


def _problem(response: httpx.Response) -> ChatError:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    wait = response.headers.get("Retry-After")
    later = f" Try again in {wait} s." if wait else ""
    message = {
        401: "Your token is not valid or has expired; get a new one.",
        403: "This token belongs to another user.",
        429: "You are sending messages too quickly." + later,
        503: "The service is temporarily unavailable." + later,
    }.get(response.status_code)
    if response.status_code == 409:  # the service says which: a busy chat, nothing to undo...
        message = detail if isinstance(detail, str) else "This chat is busy; try again soon."
    if response.status_code == 403 and isinstance(detail, str):
        message = detail  # a viewer's write says which list and role
    if message is None:
        text = detail if isinstance(detail, str) else json.dumps(detail)
        message = f"The service answered {response.status_code}: {text}"
    return ChatError(message, response.status_code)


def _events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any], str | None]]:
    """Server-sent events (event name, JSON data, id) from the lines of a response."""
    event, data, event_id = "message", list[str](), None
    for line in lines:
        if line == "":
            if data:
                yield event, json.loads("\n".join(data)), event_id
            event, data, event_id = "message", list[str](), None
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


class Service:
    """The public API, as this user."""

    def __init__(self, url: str, who: Credentials) -> None:
        self.user_id = who.user_id
        self.root = f"/api/{who.user_id}"
        self.http = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {who.token}"},
            timeout=httpx.Timeout(10.0, read=120.0),
        )

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, self.root + path, **kwargs)
        except httpx.TransportError as error:
            raise ChatError(f"Cannot reach the service at {self.http.base_url}.") from error
        if response.is_error:
            raise _problem(response)
        return None if response.status_code == 204 else response.json()

    def chat(
        self,
        message: str | None,
        session_id: str | None,
        on_event: Event,
        approvals: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """One turn, streamed: `message`, and/or `approvals` answering held calls."""
        body: dict[str, Any] = {"session_id": session_id, "timezone": local_timezone()}
        if message is not None:
            body["message"] = message
        if approvals:
            body["approvals"] = approvals
        try:
            with self.http.stream("POST", f"{self.root}/chat/stream", json=body) as response:
                if response.is_error:
                    response.read()
                    raise _problem(response)
                for event, data, _ in _events(response.iter_lines()):
                    if event == "done":
                        return data
                    if event == "error":
                        raise ChatError(str(data.get("detail")))
                    on_event(event, data)
        except httpx.ConnectError as error:
            raise ChatError(f"Cannot reach the service at {self.http.base_url}.") from error
        except httpx.TransportError as error:
            raise ChatError(f"Lost the connection to {self.http.base_url}.") from error
        raise ChatError("The answer ended early; the message is stored, see /sessions.")

    def events(
        self, last_event_id: str | None, on_open: Callable[[], None]
    ) -> Iterator[tuple[str, dict[str, Any], str | None]]:
        """The user's events (type, CloudEvent, id) until the stream ends; after
        `last_event_id` when given, so none is lost across a reconnect."""
        headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
        timeout = httpx.Timeout(10.0, read=EVENTS_READ_TIMEOUT_S)
        with self.http.stream(
            "GET", f"{self.root}/events", headers=headers, timeout=timeout
        ) as response:
            if response.is_error:
                response.read()
                raise _problem(response)
            on_open()
            yield from _events(response.iter_lines())

    def undo(self, session_id: str) -> dict[str, Any]:
        """Take back the session's latest turn that changed tasks (409: why not)."""
        result: dict[str, Any] = self._send("POST", f"/sessions/{session_id}/undo")
        return result

    def trash(self) -> dict[str, Any]:
        result: dict[str, Any] = self._send("GET", "/trash", params={"limit": 100})
        return result

    def restore(self, ref: str) -> dict[str, Any]:
        """A task out of the trash, by number or id."""
        result: dict[str, Any] = self._send("POST", f"/tasks/{ref}/restore")
        return result

    def tasks(self, list_id: str | None = None) -> dict[str, Any]:
        """The top-level tasks: all of them, or one list's."""
        params = {"limit": 100, "top_level": "true"} | ({"list": list_id} if list_id else {})
        result: dict[str, Any] = self._send("GET", "/tasks", params=params)
        return result

    def lists(self) -> list[dict[str, Any]]:
        """The user's lists (the Inbox first) and those shared with them, with their role."""
        result: list[dict[str, Any]] = self._send("GET", "/lists")["data"]
        return result

    def find_list(self, name: str) -> dict[str, Any]:
        """One of the user's lists by its name (any case) or id; ChatError naming the
        lists there are when none is."""
        lists = self.lists()
        wanted = name.strip().removeprefix("#").casefold()
        found = next((each for each in lists if wanted in (each["name"].casefold(), each["id"])),
                     None)  # fmt: skip
        if found is None:
            names = ", ".join(each["name"] for each in lists)
            raise ChatError(f"No list called “{name.strip()}”. Your lists: {names}.")
        return found

    def documents(self) -> list[dict[str, Any]]:
        """The documents the user reads, newest first."""
        result: list[dict[str, Any]] = self._send("GET", "/documents")["data"]
        return result

    def add_document(self, path: Path, list_id: str | None) -> dict[str, Any]:
        """Upload a file as a document (to the Inbox unless a list is given)."""
        try:
            content = path.read_bytes()
        except OSError as error:
            raise ChatError(f"Cannot read {path}: {error.strerror or error}.") from error
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        fields = {"list_id": list_id} if list_id else {}
        result: dict[str, Any] = self._send(
            "POST", "/documents", files={"file": (path.name, content, kind)}, data=fields
        )
        return result

    def members(self, list_id: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._send("GET", f"/lists/{list_id}/members")["data"]
        return result

    def task(self, task_id: str) -> dict[str, Any]:
        """One task, with its steps in order."""
        result: dict[str, Any] = self._send("GET", f"/tasks/{task_id}")
        return result

    def settings(self) -> dict[str, Any]:
        result: dict[str, Any] = self._send("GET", "/settings")
        return result

    def memories(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._send("GET", "/memories")["data"]
        return result

    def sessions(self) -> dict[str, Any]:
        result: dict[str, Any] = self._send("GET", "/sessions", params={"limit": 20})
        return result

    def messages(self, session_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._send("GET", f"/sessions/{session_id}/messages")
        return result

    def export(self, path: Path) -> int:
        """Everything the service holds about the user, written to `path` as it streams
        (an account of any size); the bytes written."""
        written = 0
        try:
            with self.http.stream("GET", f"{self.root}/export") as response:
                if response.is_error:
                    response.read()
                    raise _problem(response)
                with path.open("wb") as file:
                    for chunk in response.iter_bytes():
                        written += file.write(chunk)
        except httpx.TransportError as error:
            raise ChatError(f"Lost the connection to {self.http.base_url}.") from error
        except OSError as error:
            raise ChatError(f"Cannot write {path}: {error.strerror or error}.") from error
        return written


def activity(call: dict[str, Any], result: dict[str, Any] | None) -> str:
    """A tool call in a few words: "Added task 4: Buy milk"."""
    outcome = (result or {}).get("result") or {}
    todo = outcome.get("todo") or {}
    done = {
        "created": "Added",
        "updated": "Updated",
        "completed": "Completed",
        "reopened": "Reopened",
        "restored": "Restored",
    }
    status = outcome.get("status")
    held = call.get("summary") or call.get("name")  # a held call, as it was asked about
    if status == "created" and "list" in outcome:
        return f"Made the list “{outcome['list']['name']}”"
    if "lists" in outcome:
        return f"Listed your {len(outcome['lists'])} lists"
    if status in done:
        return f"{done[status]} task {todo.get('number')}: {todo.get('title')}"
    if status == "deleted":
        return f"Deleted task {outcome.get('number')}: {outcome.get('title')}"
    if status == "purged" and "count" in outcome:
        return f"Emptied the trash ({outcome['count']})"
    if status == "purged":
        return f"Deleted task {outcome.get('number')}: {outcome.get('title')} for good"
    if status == "undone":
        return str(outcome.get("summary"))
    if status == "denied":
        return f"Not done (you said no): {held}"
    if status == "expired":
        return f"Not done (not answered in time): {held}"
    if status == "error":
        return f"{call.get('name')} failed: {outcome.get('error')}"
    if "todos" in outcome:
        return f"Listed {len(outcome['todos'])} of {outcome.get('total')} tasks"
    return f"Used {call.get('name')}"


def _local(value: str | None) -> str:
    """A time from the service in this machine's timezone: "2025-03-04 09:30"."""
    return datetime.fromisoformat(value).astimezone().strftime("%Y-%m-%d %H:%M") if value else ""


class Chat:
    """One person's conversation: what is sent, and what is shown where."""

    def __init__(self, service: Service, session_id: str | None, out: Console, info: Console):
        self.service = service
        self.session_id = session_id
        self.out = out  # the answers
        self.info = info  # everything around them
        self.aside = info  # what another thread prints meanwhile (above the prompt, at one)
        # Held while a command runs: a reminder waits for the answer's end, never cuts it.
        self.lock = threading.Lock()
        # Calls the last answer held for the person's yes: {"id", "summary", ...}.
        self.pending: list[dict[str, Any]] = []
        self.asked: dict[str, str] = {}  # approval id -> its summary, for the answer's turn

    def notify(self, text: Text) -> None:
        """Print something that happened meanwhile (from another thread)."""
        with self.lock:
            self.aside.print(text)

    def send(self, message: str) -> None:
        self._turn(message, None)

    def answer(self, answers: list[tuple[dict[str, Any], bool]]) -> None:
        """Send the person's yes (True) or no to each held call; print the continuation."""
        approvals = [{"id": held["id"], "approved": yes} for held, yes in answers]
        self.pending = []
        self._turn(None, approvals)

    def _turn(self, message: str | None, approvals: list[dict[str, Any]] | None) -> None:
        calls: dict[str, dict[str, Any]] = {}
        answering = False

        def say(text: str) -> None:
            nonlocal answering
            if not answering and self.out is self.info:  # a one-shot answer is bare
                self.out.print(Text("agent> ", style="bold"), end="")
            answering = True
            self.out.print(text, end="", markup=False)
            self.out.file.flush()

        def show(event: str, data: dict[str, Any]) -> None:
            if event == "session":
                self.session_id = data["session_id"]
            elif event == "delta":
                say(data["text"])
            elif event == "tool_call":
                calls[data["id"]] = {**data, "summary": self.asked.get(data.get("approval_id", ""))}
            elif event == "tool_result":
                call = calls.get(data["tool_call_id"], {"name": data.get("name")})
                self.info.print(Text(f"  ⚙ {activity(call, data)}", style="dim"))

        self.pending = []
        answer = self.service.chat(message, self.session_id, show, approvals)
        if not answering and answer["response"]:
            # Not streamed: the stub's continuation of an answered call comes in `done` only.
            say(answer["response"])
        self.out.print(markup=False)
        if answer["using_stub"]:
            self.info.print(Text("  (answered by the rule-based stub, not a model)", style="dim"))
        self.hold(answer.get("pending_approvals") or [])

    def hold(self, pending: list[dict[str, Any]]) -> None:
        """Calls waiting for the person's yes; the caller asks, or says how to answer."""
        self.pending = pending
        self.asked.update((held["id"], held["summary"]) for held in pending)

    def undo(self) -> None:
        if self.session_id is None:
            self.info.print("Nothing to undo: this chat has not changed anything yet.")
            return
        try:
            undone = self.service.undo(self.session_id)
        except ChatError as refused:
            if refused.status != 409:
                raise
            self.info.print(Text(str(refused)))  # why not: nothing left, or a task changed since
            return
        self.info.print(Text(undone["summary"]))

    def show_trash(self) -> None:
        page = self.service.trash()
        if not page["data"]:
            self.info.print("The trash is empty.")
            return
        more = " (the latest 100)" if page["next_cursor"] else ""
        table = Table(
            "#", "task", "steps", "deleted", title=f"the trash{more}: /restore N brings one back"
        )
        for task in page["data"]:
            steps = str(task["steps_total"] or "")
            deleted = _local(task["deleted_at"])
            table.add_row(str(task["number"]), Text(task["title"]), steps, deleted)
        self.info.print(table)

    def export(self, name: str) -> None:
        path = Path(name).expanduser()
        written = self.service.export(path)
        self.info.print(Text(f"Exported everything of yours to {path} ({written:,} bytes)."))

    def restore(self, ref: str) -> None:
        task = self.service.restore(ref.removeprefix("#"))
        self.info.print(Text(f"Restored task {task['number']}: {task['title']}"))

    def show_lists(self) -> None:
        lists = self.service.lists()
        table = Table("list", "role", "shared", "pending", title="your lists: /list NAME shows one")
        for todo_list in lists:
            shared = "✓" if todo_list["shared"] else ""
            pending = str(todo_list["pending_count"])
            table.add_row(Text(todo_list["name"]), todo_list["role"], shared, pending)
        self.info.print(table)

    def show_list(self, name: str) -> None:
        """One list's tasks, by its name (any case) or id."""
        try:
            found = self.service.find_list(name)
        except ChatError as unknown:
            self.info.print(Text(str(unknown)))
            return
        self.show_tasks(found)

    def show_docs(self) -> None:
        """The documents of the user's lists, newest first."""
        documents = self.service.documents()
        if not documents:
            self.info.print("No documents yet: todo-agent docs add FILE adds one.")
            return
        names = {each["id"]: each["name"] for each in self.service.lists()}
        table = Table("document", "list", "passages", "added", title="your documents")
        for document in documents:
            table.add_row(Text(document["title"]), Text(names.get(document["list_id"], "")),
                          str(document["passages"]), _local(document["created_at"]))  # fmt: skip
        self.info.print(table)

    def show_tasks(self, todo_list: dict[str, Any] | None = None) -> None:
        """The top-level tasks with their steps under them: all, or one list's."""
        page = self.service.tasks(todo_list["id"] if todo_list else None)
        if not page["data"]:
            self.info.print(f"No tasks in {todo_list['name']}." if todo_list else "No tasks yet.")
            return
        rows = list(self._task_rows(page["data"]))
        tasks = [task for task, _, _ in rows]
        # A list column when they span lists; an assignee column when anyone is assigned.
        spread = len({task["list_id"] for task in tasks}) > 1
        lists = {each["id"]: each["name"] for each in self.service.lists()} if spread else {}
        people = self._assignees(tasks)
        columns = ["#", "task", "list", "assigned to", "steps", "due", "repeats", "reminder"]
        columns = [c for c in columns if (c != "list" or lists) and (c != "assigned to" or people)]
        if todo_list:
            title = f"{todo_list['name']} ({page['count']}; you are its {todo_list['role']})"
        else:
            title = f"your tasks ({page['count']}; times are local)"
        table = Table(*columns, "priority", "done", title=title)
        for task, shown, steps in rows:
            reminder = "" if task["completed"] else _local(task["remind_at"])
            if reminder and task["reminded_at"]:
                reminder += " ✓"  # it has fired
            cells: dict[str, str | Text] = {
                "#": str(task["number"]),
                "task": shown,
                "list": Text(lists.get(task["list_id"], "")),
                "assigned to": Text(people.get(task["assignee_id"] or "", "")),
                "steps": steps,
                "due": _local(task["due_at"]),
                "repeats": Text(task["recurrence_text"] or ""),
                "reminder": reminder,
            }
            done = "✓" if task["completed"] else ""
            table.add_row(*(cells[column] for column in columns), task["priority"], done)
        self.info.print(table)

    def _task_rows(self, tasks: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], Text, str]]:
        """Each task (its title, its steps' progress), then its steps, indented, in order."""
        for task in tasks:
            if not task["steps_total"]:
                yield task, Text(task["title"]), ""
                continue
            yield task, Text(task["title"]), f"{task['steps_done']}/{task['steps_total']}"
            for step in self.service.task(task["id"])["steps"]:
                yield step, Text.assemble(("  └ ", "dim"), step["title"]), ""

    def _assignees(self, tasks: list[dict[str, Any]]) -> dict[str, str]:
        """The names of the people tasks are assigned to ("you" for this user), by user id."""
        assigned = {task["list_id"] for task in tasks if task["assignee_id"]}
        names = {
            member["user_id"]: member["display_name"] or member["user_id"]
            for list_id in assigned
            for member in self.service.members(list_id)
        }
        return names | ({self.service.user_id: "you"} if names else {})

    def show_settings(self) -> None:
        settings = self.service.settings()
        table = Table("setting", "value", title="your settings (change them on the web page)")
        table.add_row("display name", Text(settings["display_name"] or "(your sign-in name)"))
        table.add_row("timezone", settings["timezone"])
        table.add_row("model", f"{settings['model']} (of {', '.join(settings['models'])})")
        table.add_row("instructions", Text(settings["instructions"] or "(none)"))
        self.info.print(table)

    def show_memories(self) -> None:
        memories = self.service.memories()
        if not memories:
            self.info.print('Nothing remembered yet. Say "remember that ..." to keep a fact.')
            return
        table = Table(title="what the assistant remembers of you, newest first")
        table.add_column("memory")
        table.add_column("by")
        table.add_column("since")
        for memory in memories:
            table.add_row(Text(memory["text"]), memory["created_by"], memory["created_at"][:16])
        self.info.print(table)

    def show_sessions(self) -> None:
        page = self.service.sessions()
        if not page["data"]:
            self.info.print("No sessions yet.")
            return
        table = Table(title="sessions, most recent first")
        table.add_column("id", no_wrap=True, min_width=36)  # whole: /open takes it
        table.add_column("title")
        table.add_column("last active")
        for session in page["data"]:
            current = " (current)" if session["id"] == self.session_id else ""
            table.add_row(
                session["id"], Text(session["title"] + current), session["updated_at"][:16]
            )
        self.info.print(table)

    def open(self, session_id: str) -> None:
        page = self.service.messages(session_id)
        self.session_id = session_id
        for message in page["data"]:
            who = "you" if message["role"] == "user" else "agent"
            self.info.print(Text.assemble((f"{who}> ", "bold"), message["content"] or ""))
        # Calls still waiting for a yes are asked about again, as if just held.
        held = [r["result"] for m in page["data"][-1:] for r in m["tool_results"]]
        self.hold(
            [
                {"id": r["approval_id"], "summary": r["summary"]}
                for r in held
                if r.get("status") == "pending_approval"
            ]
        )

    def handle(self, line: str) -> bool:
        """Act on one line; False when the person is done."""
        command, _, rest = line.strip().partition(" ")
        match command:
            case "":
                pass
            case "/quit" | "/exit":
                return False
            case "/tasks":
                self.show_tasks()
            case "/lists":
                self.show_lists()
            case "/list" if rest.strip():
                self.show_list(rest)
            case "/trash":
                self.show_trash()
            case "/restore" if rest.strip():
                self.restore(rest.strip())
            case "/undo":
                self.undo()
            case "/sessions":
                self.show_sessions()
            case "/docs":
                self.show_docs()
            case "/settings":
                self.show_settings()
            case "/memory" | "/memories":
                self.show_memories()
            case "/export" if rest.strip():
                self.export(rest.strip())
            case "/new":
                self.session_id = None
                self.info.print("New chat.")
            case "/open" if rest.strip():
                self.open(rest.strip())
            case _ if command.startswith("/"):
                self.info.print(HELP)
            case _:
                self.send(line.strip())
        return True


class Reminders(threading.Thread):
    """Follows the user's events while the chat is open and tells of reminders as they
    fire. After a drop it reconnects with growing pauses, resuming after the last event
    seen, so a reminder that fired meanwhile still shows."""

    def __init__(self, service: Service, chat: Chat) -> None:
        super().__init__(name="reminders", daemon=True)
        self.service = service
        self.chat = chat
        self.stopping = threading.Event()
        self.last_event_id: str | None = None
        self.connected_once = False

    def run(self) -> None:
        delay = RECONNECT_FIRST_S

        def opened() -> None:
            nonlocal delay
            delay = RECONNECT_FIRST_S
            if not self.connected_once:
                self.connected_once = True
                self.chat.notify(Text("(reminders show here as they fire)", style="dim"))

        while not self.stopping.is_set():
            try:
                for event, data, event_id in self.service.events(self.last_event_id, opened):
                    self.last_event_id = event_id or self.last_event_id
                    if event == "reminder.due":
                        self.chat.notify(self.line(data["data"]))
            except ChatError as error:  # refused (an expired token): the chat says so itself
                self.chat.notify(Text(f"reminders stopped: {error}", style="red"))
                return
            except (httpx.HTTPError, ValueError, KeyError):
                pass  # dropped, or a frame it cannot read: connect again
            self.stopping.wait(delay)
            delay = min(delay * 2, RECONNECT_MAX_S)

    @staticmethod
    def line(data: dict[str, Any]) -> Text:
        task = data["task"]
        late = " (while the service was down)" if data.get("late") else ""
        return Text.assemble(
            ("⏰ Reminder: ", "bold yellow"),
            task["title"],
            (f" (task {task['number']}){late}", "dim"),
        )

    def stop(self) -> None:
        self.stopping.set()


class Terminal:
    """A person at a terminal: lines typed with editing and history, and yes/no questions."""

    def __init__(self) -> None:
        from prompt_toolkit import PromptSession

        self.prompt: PromptSession[str] = PromptSession()
        self.questions: PromptSession[str] = PromptSession()  # a "y" is not a line to recall

    def lines(self) -> Iterator[str]:
        while True:
            try:
                yield self.prompt.prompt("you> ")
            except KeyboardInterrupt:
                continue
            except EOFError:
                return

    def confirm(self, question: str) -> bool:
        """`question? [y/N] `: only a yes is a yes."""
        try:
            answer = self.questions.prompt(f"{question}? [y/N] ")
        except (KeyboardInterrupt, EOFError):
            return False
        return answer.strip().lower() in ("y", "yes")


def _waiting(chat: Chat, how: str) -> None:
    """With no terminal to ask: what waits for a yes, and how to give it."""
    for held in chat.pending:
        chat.info.print(Text(f"  ⏸ waiting for your yes: {held['summary']}", style="yellow"))
    chat.info.print(Text(f"  {how}", style="dim"))


def run(args: argparse.Namespace) -> None:
    who = credentials(args)
    service = Service(args.url, who)
    # soft_wrap: lines are not broken at the console's width (a pipe's is a guess, 80).
    one_shot = args.message is not None
    # file=sys.stdout: bound now, before a terminal's prompt patches sys.stdout, so what this
    # thread prints is written at once, in order, and a question never shows above it.
    out = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    info = Console(stderr=True, highlight=False, soft_wrap=True) if one_shot else out
    chat = Chat(service, args.session, out, info)
    if one_shot:
        try:
            chat.send(args.message)
        except ChatError as error:
            info.print(Text(f"error: {error}", style="red"))
            sys.exit(1)
        if chat.pending:  # left waiting: a later run answers it
            _waiting(chat, f"to answer: todo-agent chat --session {chat.session_id} -m yes (or no)")
        return
    terminal = Terminal() if sys.stdin.isatty() and sys.stdout.isatty() else None
    info.print(Text(f"todo-agent at {args.url} as {who.name} ({who.user_id}).  {HELP}"))
    if terminal:  # printed through the patched sys.stdout, above the prompt being typed
        chat.aside = Console(highlight=False, soft_wrap=True)
    reminders = Reminders(service, chat)
    lines = terminal.lines() if terminal else (line.rstrip("\n") for line in sys.stdin)
    # At a terminal, what another thread prints goes above the prompt, not into it.
    with _above_the_prompt() if terminal else contextlib.nullcontext():
        reminders.start()
        for line in lines:
            with chat.lock:
                if not terminal and line.strip():
                    info.print(Text(f"you> {line}", style="bold"))
                try:
                    if not chat.handle(line):
                        break
                except ChatError as error:
                    info.print(Text(f"error: {error}", style="red"))
            if chat.pending and not terminal:
                _waiting(chat, "answer yes or no on the next line")
            # Asked outside the lock: a reminder may show above the question meanwhile.
            while chat.pending and terminal:  # the continuation may ask again
                answers = [(held, terminal.confirm(held["summary"])) for held in chat.pending]
                with chat.lock:
                    try:
                        chat.answer(answers)
                    except ChatError as error:
                        info.print(Text(f"error: {error}", style="red"))
    reminders.stop()


def add_document(args: argparse.Namespace) -> None:
    """`todo-agent docs add FILE [--list NAME]`: one file, to a running service."""
    service = Service(args.url, credentials(args))
    try:
        list_id = service.find_list(args.list)["id"] if args.list else None
        added = service.add_document(Path(args.file).expanduser(), list_id)
    except ChatError as error:
        print(f"todo-agent: {error}", file=sys.stderr)
        sys.exit(1)
    where = args.list.strip() if args.list else "your Inbox"
    count = added["passages"]
    print(f"Added “{added['title']}” to {where} ({count} passage{'' if count == 1 else 's'}).")


def _above_the_prompt() -> contextlib.AbstractContextManager[None]:
    from prompt_toolkit.patch_stdout import patch_stdout

    return patch_stdout(raw=True)  # raw: rich's colours pass through
