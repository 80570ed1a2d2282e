"""Carrying commands out, only through the tool caller the stub was given."""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from backend.models.document import DocumentPublic
from backend.models.task import MAX_STEPS, Priority
from backend.services import recurrence
from backend.services.documents import checklist
from backend.services.documents.sections import sections
from backend.services.memory import store as memories
from backend.services.recurrence import RecurrenceError, Repeat
from backend.services.stub import entities, replies, resolver
from backend.services.stub.calls import Calls, Stop, todo
from backend.services.stub.commands import (
    AddTask,
    AskDocuments,
    Assign,
    CreateList,
    DeleteMatching,
    DeleteTask,
    Forget,
    ListTasks,
    Plan,
    Recall,
    Remember,
    RestoreTask,
    SetCompleted,
    ShowSteps,
    TasksFromDocument,
    UpdateTask,
)
from backend.services.stub.context import Context
from backend.services.stub.reading import ANY_DOCUMENT
from backend.services.stub.resolver import Resolver
from backend.services.stub.shelf import Shelf
from backend.services.tools import ToolResult

_LIST_SUFFIX = re.compile(
    r"\s+(?:to|on|onto|in|into|for)\s+(?:my|the)\s+(?:list|tasks|todos|to-dos|todo list"
    r"|to-do list|task list|shopping list)$",
    re.IGNORECASE,
)
_LEADING_TO = re.compile(r"^to\s+", re.IGNORECASE)
_LIST_WORD = re.compile(r"\s*\blist\b\s*", re.IGNORECASE)
# "milk to groceries", "milk on the shopping list", "call Jo in work": a list at the end.
_TO_LIST = re.compile(
    r"(?P<rest>.+?)\s+(?:to|on|onto|in|into)\s+(?:the\s+|my\s+|our\s+)?"
    r"(?P<name>[\w'&-]+(?:\s+[\w'&-]+){0,3}?)(?:\s+list)?",
    re.IGNORECASE,
)
# Words that say no task: "remind me sometime", "add something for tomorrow".
_VAGUE = frozenset(
    ["sometime", "sometimes", "some", "time", "later", "soon", "eventually", "something",
     "anything", "stuff", "thing", "things", "smth", "sth", "it", "that", "this", "about",
     "of", "a", "again"]
)  # fmt: skip
_RANK = {"high": 0, "medium": 1, "low": 2, "none": 3}
_DEFINITE = re.compile(r"(?:the|my)\s", re.IGNORECASE)  # "the vet": a task there may be
_URGENT_SHOWN = 3


def _due_value(due: entities.Due) -> str:
    return due.isoformat(timespec="minutes") if isinstance(due, datetime) else due.isoformat()


@dataclass(frozen=True, slots=True)
class Said:
    """A task as the user typed it: its title, and what else the words said."""

    title: str
    due: entities.Due | None = None
    priority: Priority | None = None
    tags: tuple[str, ...] = ()
    remind_at: datetime | None = None
    repeat: Repeat | None = None


def _fields(said: Said) -> dict[str, Any]:
    """The tool arguments for what was said besides the title."""
    fields: dict[str, Any] = {}
    if said.due is not None:
        fields["due_at"] = _due_value(said.due)
    if said.priority is not None:
        fields["priority"] = said.priority
    if said.tags:
        fields["tags"] = list(said.tags)
    if said.remind_at is not None:
        fields["remind_at"] = said.remind_at.isoformat(timespec="minutes")
    if said.repeat is not None:
        fields["repeat"] = said.repeat.rule
    return fields


def _repeat_due(
    repeat: Repeat, due: entities.Due | None, now: datetime, tz: ZoneInfo
) -> entities.Due | None:
    """A repeating task's first due time: the day said ("from monday") at the phrase's
    time, else the rule's first occurrence (as the service would set it; the stub sets it
    itself, to place the reminder)."""
    if due is not None:
        return (
            datetime.combine(due, repeat.at) if repeat.at and not isinstance(due, datetime) else due
        )
    first = recurrence.first_due(repeat.rule, tz=tz, at=repeat.at, now=now)
    if first is None:
        return None
    local = first.astimezone(tz).replace(tzinfo=None, second=0)
    return local if repeat.at else local.date()


# A task due on a day rather than at a time is due at the day's end, too late to act on:
# its reminder is that morning, before the offset.
REMIND_HOUR = entities.PARTS_OF_DAY["morning"]


def _anchor(due: entities.Due) -> datetime:
    """The time a reminder is counted back from: the due time, or that morning."""
    return due if isinstance(due, datetime) else datetime.combine(due, REMIND_HOUR)


def _remind_at(due: entities.Due, when: entities.Reminder, now: datetime) -> datetime | None:
    """The reminder `when` says for a due time, unless that has passed."""
    if when.at is not None:  # "the evening before": a time of day, days before the due day
        day = due.date() if isinstance(due, datetime) else due
        at = datetime.combine(day - timedelta(days=when.before.days), when.at)
    else:
        at = _anchor(due) - when.before
    return at if at > now.replace(tzinfo=None) else None


def _reminder_offset(todo_: Mapping[str, Any]) -> timedelta | None:
    """How long before its due time a task's reminder is, if it has both."""
    due, remind = _due_of(todo_), todo_.get("remind_at")
    if due is None or not isinstance(remind, str):
        return None
    return _anchor(due) - datetime.fromisoformat(remind).replace(tzinfo=None)


class Executor:
    def __init__(
        self,
        calls: Calls,
        context: Context,
        shelf: Shelf | None = None,
        memories: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self._calls = calls
        self._context = context
        self._shelf = shelf  # the person's documents, where the stub may read them
        self._memories = list(memories)  # what the turn carries of them, newest first
        self._resolver = Resolver(calls, context)
        self._now: datetime | None = None
        self._tz = ZoneInfo("UTC")  # the user's zone, read with `now`
        self._lists: list[ToolResult] | None = None

    async def lists(self) -> list[ToolResult]:
        """The user's lists (their own and those shared with them), asked once."""
        if self._lists is None:
            found = (await self._calls("list_lists", {}, "look up your lists")).get("lists")
            self._lists = (
                [x for x in found if isinstance(x, dict)] if isinstance(found, list) else []
            )
        return self._lists

    async def list_named(self, name: str) -> ToolResult | None:
        """The user's list a phrase names ("groceries", "the Work list", "#shopping"): by its
        name in any case, with or without "list" after it."""
        wanted = _LIST_WORD.sub("", name.strip().lstrip("#")).strip().casefold()
        if not wanted:
            return None
        for found in await self.lists():
            own = str(found.get("name", "")).casefold()
            if wanted in (own, _LIST_WORD.sub("", own).strip()):
                return found
        return None

    async def _into_list(self, text: str) -> tuple[str, ToolResult | None]:
        """ "milk to groceries", "milk on the shopping list": the text without the list it
        names, when the user has such a list."""
        if (match := _TO_LIST.fullmatch(text)) and (found := await self.list_named(match["name"])):
            return match["rest"], found
        return text, None

    async def now(self) -> datetime:
        """The user's local time: the tools know their timezone, the stub asks them."""
        if self._now is None:
            context = await self._calls("get_user_context", {}, "look up today's date")
            try:
                self._now = datetime.fromisoformat(str(context.get("local_time")))
                self._tz = ZoneInfo(str(context.get("timezone")))
            except (ValueError, ZoneInfoNotFoundError):
                raise Stop("I couldn't look up today's date; try again without one.") from None
        return self._now

    async def said(self, text: str, *, remind: bool = False) -> Said:
        """A clean title, and the due date, priority, tags and reminder said with it. A
        quoted title is kept exactly as typed. `remind`: the message began "remind me"."""
        text = text.strip(" ,;:-")
        if len(text) > 1 and text[0] in "'\"" and (end := text.rfind(text[0])) > 0:
            inner, after = text[1:end].strip(), text[end + 1 :].strip(" ,;:-")
            outside = await self._extras(after, remind)
            if inner and not outside.title:
                return replace(outside, title=inner)
        said = await self._extras(text, remind)
        text = _LEADING_TO.sub("", said.title).strip(" ,;:-")
        if len(text) > 1 and text[0] in "'\"" and text[-1] == text[0]:
            text = text[1:-1].strip()
        first = text.split(" ", 1)[0]
        if first.islower():
            text = text[:1].upper() + text[1:]
        return replace(said, title=text)

    async def _extras(self, text: str, remind: bool) -> Said:
        quick = entities.marked(text)
        text, tags = entities.take_tags(_LIST_SUFFIX.sub("", text))
        text, when = entities.take_reminder(text, bare=remind)
        text, level = entities.take_priority(text)
        text = _LIST_SUFFIX.sub("", text)
        text, repeat = entities.take_repeat(text)
        due = None
        if entities.might_be_date(text):
            text, due = entities.take_date(text, await self.now(), quick=quick)
        if repeat is not None:
            due = _repeat_due(repeat, due, await self.now(), self._tz)
        if when is None and remind:
            when = entities.Reminder()  # "remind me to ...": at the due time
        remind_at = None
        if due is not None and when is not None:
            remind_at = _remind_at(due, when, await self.now())
        return Said(text, due, level, tuple(tags), remind_at, repeat)

    # -- adding ---------------------------------------------------------------------------

    async def add(self, commands: list[AddTask]) -> str:
        added: list[ToolResult] = []
        for command in commands:
            text, into = (
                await self._into_list(command.text)
                if command.parent is None
                else (command.text, None)
            )
            said = await self.said(text, remind=command.remind)
            if command.about and (reminded := await self._remind_about(said)) is not None:
                return reminded
            if into is None:  # "#groceries": a list when one has that name, else a tag
                for tag in said.tags:
                    if (into := await self.list_named(tag)) is not None:
                        said = replace(said, tags=tuple(t for t in said.tags if t != tag))
                        break
            if _VAGUE.issuperset(said.title.lower().split()):  # none, or only filler
                return replies.ASK_REMIND_WHAT if command.remind else replies.ASK_WHAT
            arguments: dict[str, Any] = {"title": said.title, **_fields(said)}
            if into is not None:
                arguments["list"] = str(into.get("id"))
            if command.priority and not said.priority:
                arguments["priority"] = command.priority
            if command.parent is not None:
                parent = await self._resolver.find(command.parent, resolver.PARENT)
                arguments["parent"] = parent.todo_id
                result = todo(await self._calls("add_todo", arguments, "add that step"))
                number = result.get("number")
                return f"Added step {number} to task {parent.todo_id}: {replies.title(result)}."
            added.append(todo(await self._calls("add_todo", arguments, "add that task")))
        return replies.added(added)

    async def _remind_about(self, said: Said) -> str | None:
        """ "remind me about the vet tomorrow at 5pm": the reminder of the one pending task
        "the vet" names, at the time said (that morning, for a day); None when the words
        name no task there is (then they are a new one) or say no time."""
        if said.due is None or said.repeat is not None or not _DEFINITE.match(said.title):
            return None
        found = resolver.best_matches(said.title, await self._calls.todos(status="pending"))
        if len(found) != 1:
            return None
        remind_at = _remind_at(said.due, entities.Reminder(), await self.now())
        if remind_at is None:
            return "That reminder would already have passed, so I left the task as it is."
        arguments = {
            "todo_id": str(found[0].get("number")),
            "remind_at": remind_at.isoformat(timespec="minutes"),
        }
        changed = todo(await self._calls("update_todo", arguments, "set that reminder"))
        number, extras = changed.get("number"), replies.extras(changed)
        return f"Updated task {number}: {replies.title(changed)}{extras}."

    async def plan(self, command: Plan) -> str:
        said = await self.said(command.title)
        title = said.title
        if not command.steps:
            return replies.PLAN_NEEDS_MODEL.format(title=title[:1].lower() + title[1:])
        steps = [(await self.said(step)).title for step in command.steps]
        arguments: dict[str, Any] = {
            "title": title,
            "steps": [s for s in steps if s],
            **_fields(said),
        }
        result = todo(await self._calls("add_todo", arguments, "add that plan"))
        return _planned(result)

    # -- documents ------------------------------------------------------------------------

    def shelf(self) -> Shelf:
        if self._shelf is None:
            raise Stop("I can't read your documents here.")
        return self._shelf

    async def document(self, name: str) -> DocumentPublic:
        """The person's document `name` names ("my notes": their only one), or Stop."""
        documents = await self.shelf().documents()
        if not documents:
            raise Stop(replies.NO_DOCUMENTS)
        titles = [document.title for document in documents]
        if name.lower() in ANY_DOCUMENT:
            found = list(range(len(documents))) if len(documents) == 1 else []
        else:
            found = resolver.best_named(name, titles)
        if len(found) == 1:
            return documents[found[0]]
        shown = ", ".join(replies.named(title) for title in titles[: replies.MAX_CHOICES])
        example = f'"Make tasks from my {replies.clean(titles[0], limit=60)}"'
        if not found:
            what = "which document" if name.lower() in ANY_DOCUMENT else None
            head = (
                f"Which document? You have {len(titles)}"
                if what
                else f"I couldn't find a document called {replies.named(name)}. You have"
            )
            raise Stop(f"{head}: {shown}. For example: {example}.")
        matching = ", ".join(replies.named(titles[at]) for at in found[: replies.MAX_CHOICES])
        raise Stop(f"{len(found)} documents match {replies.named(name)}: {matching}. Which one?")

    async def ask_documents(self, command: AskDocuments) -> str:
        """The best passage on the query (in the document named), quoted with its source.
        Found by a `search_documents` call (in the named document's list), run and recorded
        as a model's is: the turn's passages are its sources, whoever answered."""
        if command.document:
            document: DocumentPublic | None = await self.document(command.document)
        elif not await self.shelf().documents():
            return replies.NO_DOCUMENTS
        else:
            document = None
        arguments = {"query": command.query}
        if document is not None:
            arguments["list"] = str(document.list_id)
        found = await self._calls("search_documents", arguments, "search your documents")
        passages = [p for p in found.get("passages") or () if isinstance(p, dict)]
        if document is not None:
            passages = [p for p in passages if p.get("document_id") == str(document.id)]
        if not passages:
            where = replies.named(document.title) if document else "your documents"
            return (
                f"I found nothing on {replies.named(command.query)} in {where}. Try other "
                'words, for example: "Search my notes for wifi".'
            )
        best = passages[0]
        source = replies.source(str(best.get("title") or ""), str(best.get("heading") or ""))
        return f"From {source}:\n{replies.quote(str(best.get('text') or ''))}"

    async def remember(self, command: Remember) -> str:
        result = await self._calls("remember", {"text": command.fact}, "remember that")
        kept = str((result.get("memory") or {}).get("text") or command.fact)
        return f'Got it, I\'ll remember: "{replies.clean(kept, limit=500)}". {replies.UNDO_HINT}'

    def recall(self, command: Recall) -> str:
        """What the memories say (about the topic), said to come from them."""
        texts = [str(m.get("text") or "") for m in self._memories]
        if command.topic is None:
            if not texts:
                return replies.NOTHING_REMEMBERED
            lines = [f"- {replies.clean(text, limit=500)}" for text in texts]
            return "\n".join(["From what you told me to remember:", *lines])
        found = [texts[i] for i in memories.matching(texts, command.topic)]
        if not found:
            topic = replies.clean(command.topic, limit=60)
            return f"I have nothing about your {topic} in memory. {replies.REMEMBER_HINT}"
        quoted = "; ".join(f'"{replies.clean(text, limit=500)}"' for text in found)
        return f"From memory (you told me): {quoted}."

    async def forget(self, command: Forget) -> str:
        """The one memory the words name, forgotten once the person says yes."""
        found = [self._memories[i] for i in memories.matching(
            [str(m.get("text") or "") for m in self._memories], command.what)]  # fmt: skip
        if not found:
            what = replies.clean(command.what, limit=60)
            return f'I have no memory of "{what}". Ask "what do you remember about me?"'
        if len(found) > 1:
            lines = [f"- {replies.clean(str(m.get('text')), limit=200)}" for m in found]
            return "\n".join(["Which one should I forget?", *lines])
        result = await self._calls("forget", {"memory": str(found[0]["id"])}, "forget that")
        gone = replies.clean(str((result.get("memory") or {}).get("text")), limit=500)
        return f'Forgot: "{gone}".'

    async def tasks_from_document(self, command: TasksFromDocument) -> str:
        """One task named after the document (or the section named), its steps the items
        still to do; in the document's list when the person may add to it."""
        document = await self.document(command.document)
        text = await self.shelf().text(document.id)
        title, body = document.title, text
        if command.section is not None:
            title, body = _section(text, command.section, document.title)
        steps = [replies.clean(step) for step in checklist.to_do(body)]
        if not steps:
            return (
                f"{replies.named(title)} has nothing left to do: no unticked checklist items, "
                "and no bullet or numbered items."
            )
        arguments: dict[str, Any] = {"title": replies.clean(title), "steps": steps[:MAX_STEPS]}
        editable = {str(x.get("id")) for x in await self.lists() if x.get("role") != "viewer"}
        if str(document.list_id) in editable:
            arguments["list"] = str(document.list_id)
        result = todo(await self._calls("add_todo", arguments, "add those steps"))
        left = len(steps) - MAX_STEPS
        more = f"\n({left} more left out: a task holds {MAX_STEPS} steps.)" if left > 0 else ""
        return _planned(result) + more

    async def show_steps(self, command: ShowSteps) -> str:
        target = await self._resolver.find(command.ref, resolver.STEPS)
        steps = await self._calls.todos(parent=target.todo_id)
        if not steps:
            return (
                f"Task {target.todo_id} has no steps yet. Add one with "
                f'"Add a step to task {target.todo_id}: ...".'
            )
        done = sum(1 for s in steps if s.get("completed"))
        lines = [replies.line(s, show_done=True) for s in steps]
        head = f"Task {target.todo_id} has {replies.count(len(steps), 'step')} ({done} done):"
        return "\n".join([head, *lines])

    # -- changing -------------------------------------------------------------------------

    async def set_completed(self, command: SetCompleted) -> str:
        verb = resolver.COMPLETE if command.completed else resolver.REOPEN
        target = await self._resolver.find(command.ref, verb)
        result = await self._calls(
            "complete_todo",
            {"todo_id": target.todo_id, "completed": command.completed},
            "update that task",
        )
        changed = todo(result)
        if not command.completed:
            return f"Reopened task {changed.get('number')}: {replies.title(changed)}."
        note = f" {replies.clean(str(result['note']))}" if result.get("note") else ""
        if isinstance(after := result.get("next_todo"), dict):
            note += f" Next one on {replies.day(after)} (task {after.get('number')})."
        return f"Marked task {changed.get('number')} as complete: {replies.title(changed)}.{note}"

    async def delete(self, command: DeleteTask) -> str:
        target = await self._resolver.find(command.ref, resolver.DELETE, look_up=True)
        result = await self._calls("delete_todo", {"todo_id": target.todo_id}, "delete that task")
        return f"Deleted task {result.get('number')}: {replies.title(result)}."

    async def delete_matching(self, command: DeleteMatching) -> str:
        """Every task the words fit (or every one done), steps with their task."""
        todos = await self._calls.todos("look up those tasks", status=command.status)
        found = todos if command.what is None else resolver.best_matches(command.what, todos)
        if not found:
            if command.what is not None:
                shown = replies.shorten(command.what)
                return f'I couldn\'t find a task matching "{shown}". {replies.SHOW_HINT}'
            return (
                "You have no completed tasks."
                if command.status == "completed"
                else ("You have no tasks to delete.")
            )
        ids = {str(t.get("id")) for t in found}
        tasks = [t for t in found if t.get("parent_id") not in ids]  # a step goes with its task
        deleted = await self._calls.each(
            "delete_todo", [{"todo_id": str(t.get("number"))} for t in tasks], "delete those tasks"
        )
        if len(deleted) == 1:
            return f"Deleted task {deleted[0].get('number')}: {replies.title(deleted[0])}."
        lines = [f"- #{result.get('number')} {replies.title(result)}" for result in deleted]
        return "\n".join([f"Deleted {len(deleted)} tasks:", *lines])

    async def update(self, command: UpdateTask) -> str:
        changes: dict[str, Any] = {}
        target = None
        note = ""
        if command.field == "priority":
            level = entities.priority_in(command.value) or (
                command.value.lower() if command.value.lower() in _RANK else None
            )
            if level is None:
                return (
                    "Priority can be high, medium, low or none, as in"
                    ' "Set task 2 to high priority" or "Remove the priority of task 2".'
                )
            changes["priority"] = level
        elif command.field == "due":
            now = await self.now()
            by, at = entities.shift(command.value), entities.time_only(command.value)
            due = None
            if by is None and at is None:  # a day (read only then: dateparser is the dear one)
                rest, due = entities.take_date(command.value, now)
                if due is None or rest.strip(" ,;:-"):
                    return 'When is it due? For example: "Move task 2 to Friday".'
            target = await self._resolver.find(command.ref, resolver.UPDATE, look_up=True)
            if by is not None:
                shifted = _shifted(target.todo, by, now.date())
                if shifted is None:
                    return (
                        f"Task {target.todo_id} has no due time to move by {command.value}. Give "
                        f'it one first, for example: "Move task {target.todo_id} to 3pm".'
                    )
                changes["due_at"] = shifted
            elif at is not None:
                changes["due_at"] = _at(target.todo, at, now)  # "move it to 9am": that day
            else:
                assert due is not None
                changes["due_at"] = _due_value(_keeping_time(due, target.todo))
            # A reminder keeps its place before the due time, as a repeat's next one does;
            # where that has passed, it is at the due time (the tools cannot clear one).
            if (offset := _reminder_offset(target.todo or {})) is not None:
                new_due = _read_due(changes["due_at"])
                kept = _remind_at(new_due, entities.Reminder(offset), now)
                remind = kept or _remind_at(new_due, entities.Reminder(), now)
                if remind is not None:
                    changes["remind_at"] = remind.isoformat(timespec="minutes")
                if kept is None and remind is not None:
                    note = " Its reminder is at the due time now: earlier would have passed."
        elif command.field == "remind":
            target = await self._resolver.find(command.ref, resolver.UPDATE, look_up=True)
            when = entities.read_reminder(command.value) or entities.Reminder()
            due = _due_of(target.todo or {})
            if due is None:
                return (
                    f"Task {target.todo_id} has no due time to remind you before. Give it one "
                    f'first, for example: "Move task {target.todo_id} to Friday at 3pm".'
                )
            remind_at = _remind_at(due, when, await self.now())
            if remind_at is None:
                return "That reminder would already have passed, so I left the task as it is."
            changes["remind_at"] = remind_at.isoformat(timespec="minutes")
        elif command.field == "repeat":
            changes["repeat"] = command.value
            target = await self._resolver.find(command.ref, resolver.UPDATE, look_up=True)
            now = await self.now()  # the user's zone, and today
            if (moved := _on_schedule(target.todo, command.value, self._tz, now)) is not None:
                changes["due_at"] = moved
        elif command.field == "list":
            into = await self.list_named(command.value)
            if into is None:
                names = ", ".join(str(x.get("name")) for x in await self.lists())
                return (
                    f'I can move a task to a date like "tomorrow" or "Friday", or to one of your '
                    f"lists ({names}), but not {replies.shorten(command.value)}."
                )
            changes["list"] = str(into.get("id"))
        elif command.field == "description":
            changes["description"] = command.value.strip("'\" ")
        else:
            said = await self.said(command.value)
            if not said.title:
                return 'What should the new title be? For example: "Rename task 1 to Call mom".'
            changes.update(title=said.title, **_fields(said))
        target = target or await self._resolver.find(command.ref, resolver.UPDATE, look_up=True)
        result = await self._calls(
            "update_todo", {"todo_id": target.todo_id, **changes}, "change that task"
        )
        changed = todo(result)
        extras = replies.extras(changed)
        stopped = " It no longer repeats." if changes.get("repeat") == "never" else ""
        return (
            f"Updated task {changed.get('number')}: {replies.title(changed)}{extras}.{stopped}"
            f"{note}"
        )

    async def undo(self) -> str:
        """Take back the last turn of this conversation that changed tasks (the service's
        record of it, whoever made it: the model or the stub)."""
        result = await self._calls("undo_last_turn", {}, "undo that")
        return replies.clean(str(result.get("summary") or "Undone."), limit=1000)

    # -- lists --------------------------------------------------------------------------

    async def create_list(self, command: CreateList) -> str:
        name = replies.clean(command.name, limit=100)
        made = await self._calls("create_list", {"name": name}, "make that list")
        return f"Made the list {replies.clean(str((made.get('list') or {}).get('name')))}."

    async def assign(self, command: Assign) -> str:
        target = await self._resolver.find(command.ref, resolver.UPDATE)
        result = await self._calls(
            "update_todo",
            {"todo_id": target.todo_id, "assignee": command.who or "nobody"},
            "assign that task",
        )
        changed = todo(result)
        if command.who is None:
            return f"Task {changed.get('number')} ({replies.title(changed)}) is no one's now."
        return f"Assigned task {changed.get('number')} ({replies.title(changed)}) to {command.who}."

    # -- the trash ------------------------------------------------------------------------

    async def restore(self, command: RestoreTask) -> str:
        target = await self._resolver.find(command.ref, resolver.RESTORE)
        result = await self._calls("restore_todo", {"todo_id": target.todo_id}, "restore it")
        restored = todo(result)
        return f"Restored task {restored.get('number')}: {replies.title(restored)}."

    async def show_trash(self) -> str:
        trashed = await self._calls.todos(status="deleted")
        if not trashed:
            return "The trash is empty."
        lines = [replies.line(t, show_done=True) for t in trashed]
        head = f"In the trash ({replies.count(len(trashed))}, most recently deleted first):"
        return "\n".join([head, *lines, 'Say "restore task N" to bring one back.'])

    async def empty_trash(self) -> str:
        result = await self._calls("purge_trash", {"todo_id": None}, "empty the trash")
        return (
            f"Emptied the trash: {replies.count(int(result.get('count') or 0))} deleted for good."
        )

    # -- listing --------------------------------------------------------------------------

    async def show(self, command: ListTasks) -> str:
        arguments: dict[str, Any] = {"status": command.status}
        if command.list and (named := await self.list_named(command.list)) is not None:
            arguments["list"] = str(named.get("id"))
            if not (command.due or command.tomorrow or command.priority or command.count):
                found = await self._calls.todos(**arguments)
                name = replies.clean(str(named.get("name")))
                if not found:
                    return f"{name} is empty."
                lines = [replies.line(t, show_done=command.status == "all") for t in found]
                return "\n".join([f"On {name}:", *lines])
        if command.due:
            arguments["due"] = command.due
        found = await self._calls.todos(**arguments)
        question = command.tomorrow or command.priority or command.urgent_first or command.count
        if not question and not command.due:
            return _listing(command, found)
        today = (await self.now()).date()
        if command.due in ("today", "week") and command.status != "completed":
            # What is due today or this week is what is still late, too: overdue first.
            late = await self._calls.todos(status="pending", due="overdue")
            found = [*late, *(t for t in found if not _late(t, today))]
        if command.tomorrow:
            found = [t for t in found if _due_date(t) == today + timedelta(days=1)]
        if command.priority:
            found = [t for t in found if t.get("priority") == command.priority]
        found.sort(key=lambda t: _urgency(t, today))
        if command.count:
            return _how_many(command, found, today)
        if command.urgent_first:
            if not found:
                return _nothing(command)
            top = found[:_URGENT_SHOWN]
            lines = [replies.line(t, show_done=False, overdue=_late(t, today)) for t in top]
            return "\n".join(["Most urgent first:", *lines])
        return _listing(command, found, today=today)


def _planned(result: ToolResult) -> str:
    """ "Added task 4: The move, with 3 steps:" and the steps, one a line."""
    lines = [f"- #{s.get('number')} {replies.title(s)}" for s in result.get("steps") or ()]
    head = f"Added task {result.get('number')}: {replies.title(result)}{replies.extras(result)}"
    return "\n".join([f"{head}, with {replies.count(len(lines), 'step')}:", *lines])


def _section(text: str, wanted: str, title: str) -> tuple[str, str]:
    """The heading `wanted` names in a document, and the text under it (its subsections'
    too); Stop, naming the headings there are, when it names none."""
    parts = sections(text)
    paths = list(
        dict.fromkeys(part.path[:n] for part in parts for n in range(1, len(part.path) + 1))
    )
    found = resolver.best_named(wanted, [path[-1] for path in paths])
    if len(found) != 1:
        headings = ", ".join(replies.named(path[-1]) for path in paths[: replies.MAX_CHOICES])
        raise Stop(
            f"I couldn't find one section called {replies.named(wanted)} in "
            f"{replies.named(title)}. Its headings: {headings or 'none'}."
        )
    path = paths[found[0]]
    body = "\n\n".join(part.body for part in parts if part.path[: len(path)] == path)
    return path[-1], body


def _due_date(todo_: Mapping[str, Any]) -> date | None:
    due = todo_.get("due_at")
    return date.fromisoformat(due[:10]) if isinstance(due, str) and len(due) >= 10 else None


def _on_schedule(todo_: ToolResult | None, phrase: str, tz: ZoneInfo, now: datetime) -> str | None:
    """ "make it every wednesday": a task due on a day the new rule skips moves to the
    rule's next day (at the phrase's time, if it names one); None when it may stay. A task
    that already repeats starts over by the new rule, from today: "every tuesday", then
    "actually make it every wednesday" on a Wednesday is due today, not in a week. A task
    with no due day gets the rule's first, from the same today as a new task."""
    try:
        repeat = recurrence.parse_repeat(phrase)
    except RecurrenceError:
        return None  # the tool says which phrases it reads
    due = (todo_ or {}).get("due_at")
    if not isinstance(due, str):
        start = _repeat_due(repeat, None, now, tz)
        return None if start is None else _due_value(start)
    due_at = datetime.fromisoformat(due).astimezone(tz)
    if repeat.at is not None:
        due_at = datetime.combine(due_at.date(), repeat.at, tzinfo=tz)
    anchor = due_at
    if (todo_ or {}).get("recurrence"):
        anchor = min(due_at, datetime.combine(now.date(), due_at.timetz()))
    first = recurrence.occurrences(repeat.rule, anchor=anchor, tz=tz, count=1)
    if not first or first[0] == due_at:
        return None
    moved = first[0].astimezone(tz)
    if moved.time() >= time(23, 59):  # a day, not a time
        return moved.date().isoformat()
    return moved.replace(tzinfo=None).isoformat(timespec="minutes")


def _read_due(value: str) -> entities.Due:
    """A due value as the stub sends it: a day ("2026-12-03") or a local time."""
    return date.fromisoformat(value) if len(value) == 10 else datetime.fromisoformat(value)


def _due_of(todo_: Mapping[str, Any]) -> entities.Due | None:
    """A task's due day, or its due time when it has one (a day is due at 23:59)."""
    due = todo_.get("due_at")
    if not isinstance(due, str):
        return None
    found = datetime.fromisoformat(due).replace(tzinfo=None)
    return found.date() if found.time() == time(23, 59) else found


def _late(todo_: Mapping[str, Any], today: date) -> bool:
    due = _due_date(todo_)
    return due is not None and due < today and not todo_.get("completed")


def _urgency(todo_: Mapping[str, Any], today: date) -> tuple[bool, date, int, int]:
    """Overdue first, then by due date (none last), then by priority."""
    due = _due_date(todo_) or date.max
    rank = _RANK.get(str(todo_.get("priority")), _RANK["none"])
    return (not _late(todo_, today), due, rank, int(todo_.get("number") or 0))


def _shifted(todo_: ToolResult | None, by: timedelta, today: date) -> str | None:
    """A task's due day (or time: it keeps its time of day) `by` later, from today if it
    is overdue or has none; by hours or minutes, its due time later (None: it has none)."""
    due = _due_of(todo_ or {}) or today
    if by < timedelta(days=1):  # "push the plumber back an hour"
        return _due_value(due + by) if isinstance(due, datetime) else None
    if isinstance(due, datetime):
        day = max(due.date(), today)
        return _due_value(datetime.combine(day + by, due.time()))
    return (max(due, today) + by).isoformat()


def _keeping_time(due: entities.Due, todo_: ToolResult | None) -> entities.Due:
    """A task moved to another day keeps its time of day: "can we do the haircut on
    thursday instead" is at 2pm still."""
    was = _due_of(todo_ or {})
    if isinstance(due, datetime) or not isinstance(was, datetime):
        return due
    return datetime.combine(due, was.time())


def _at(todo_: ToolResult | None, at: time, now: datetime) -> str:
    """A task's due day at another time; a task with no due day gets the next such time."""
    today = now.date()
    day = _due_date(todo_ or {}) or (today if at > now.time() else today + timedelta(days=1))
    return datetime.combine(day, at).isoformat(timespec="minutes")


def _describe(command: ListTasks, n: int) -> str:
    """ "2 pending tasks due today", "1 overdue task", "3 high priority tasks"."""
    adjective = {"pending": "pending ", "completed": ""}.get(command.status, "")
    if command.due == "overdue":
        adjective = "overdue "
    if command.priority:
        adjective = f"{command.priority} priority "
    return f"{n} {adjective}{'task' if n == 1 else 'tasks'}{_due_words(command)}"


def _due_words(command: ListTasks) -> str:
    """ " due today", " due this week", " due tomorrow", or nothing."""
    if command.tomorrow:
        return " due tomorrow"
    return {"today": " due today", "week": " due this week"}.get(command.due or "", "")


def _listing(command: ListTasks, found: list[ToolResult], today: date | None = None) -> str:
    if not found:
        return _nothing(command)
    late = sum(1 for t in found if today and _late(t, today))
    if command.due in ("today", "week") and late and today:
        lines = [replies.line(t, show_done=False, overdue=_late(t, today)) for t in found]
        head = f"You have {_describe(command, len(found) - late)}, and {late} overdue:"
        return "\n".join([head, *lines])
    shown = found
    lines = [
        replies.line(
            t,
            show_done=command.status == "all",
            overdue=bool(today and command.due != "overdue" and _late(t, today)),
        )
        for t in shown
    ]
    what = _describe(command, len(found))
    head = f"You have completed {what}:" if command.status == "completed" else f"You have {what}:"
    return "\n".join([head, *lines])


def _how_many(command: ListTasks, found: list[ToolResult], today: date) -> str:
    late = sum(1 for t in found if _late(t, today))
    note = f", {late} of them overdue" if late and command.due != "overdue" else ""
    return f"You have {_describe(command, len(found))}{note}."


def _nothing(command: ListTasks) -> str:
    if command.status == "completed":
        return 'You haven\'t completed any tasks yet. Mark one done with "Mark task 1 as done".'
    if command.due == "overdue":
        return "You have no overdue tasks."
    kind = "pending tasks" if command.status == "pending" else "tasks"
    if command.priority:
        kind = f"{command.priority} priority tasks"
    return f"You have no {kind}{_due_words(command)}. Add one with {replies.ADD_EXAMPLE}."
