"""The stub responder: answers without a model, through the model's own tools.

It answers when no OpenAI key is configured or the model is down. A pipeline, each step a
module of its own:

- `understanding`: the message -> typed commands (intent and slots), from tables of rows,
  with `questions` (list requests and questions about the list), `reading` (requests about
  documents), `memories` (what to remember, recall or forget) and `references` (how a
  message names a task);
- `entities`: the built-in entities in the slots: dates (dateparser) and times of day,
  repeats (the service's own reader), reminders, numbers, priorities, #tags;
- `context`: what the session's recent turns say (tasks shown or touched, the question
  asked, the last change);
- `resolver`: which of the user's tasks a reference means (rapidfuzz, context);
- `executor`: carrying the commands out through the tool caller it is given (passages
  found with `search_documents`, as a model finds them; the documents' titles and text,
  to find the one a message names, from the `shelf` it is given, where no tool reads them;
  and answering from the memories the turn carries);
- `replies`: the phrasing.

Safety, by construction: only the user's message is parsed (titles coming back from tools
are shown, never read); one message changes at most one existing task besides those it says
are done ("bought milk and paid rent", each named on its own), and never deletes in bulk;
messages longer than any command are declined before parsing.
"""

from collections.abc import Mapping, Sequence
from typing import Any, assert_never

from backend.services.stub import context as session_context
from backend.services.stub import entities, replies
from backend.services.stub.calls import Calls, Stop
from backend.services.stub.commands import (
    AddTask,
    AskDocuments,
    Assign,
    Command,
    CreateList,
    DeleteMatching,
    DeleteTask,
    EmptyTrash,
    Forget,
    Help,
    ListTasks,
    Plan,
    Recall,
    Remember,
    RestoreTask,
    Say,
    SetCompleted,
    ShowSteps,
    ShowTrash,
    TasksFromDocument,
    Undo,
    UpdateTask,
)
from backend.services.stub.context import HistoryRow
from backend.services.stub.executor import Executor
from backend.services.stub.replies import DIDNT_UNDERSTAND
from backend.services.stub.shelf import Shelf
from backend.services.stub.understanding import MAX_COMMAND_CHARS, parse
from backend.services.tools import ToolCaller

__all__ = [
    "DIDNT_UNDERSTAND",
    "MAX_COMMAND_CHARS",
    "HistoryRow",
    "Shelf",
    "StubResponder",
    "parse",
]


class StubResponder:
    """Answers chat messages without a model: understand, resolve, call the tools, reply."""

    def __init__(self) -> None:
        entities.warm_up()  # once per process: the first date read is slow

    async def respond(
        self,
        message: str,
        *,
        call_tool: ToolCaller,
        name: str | None = None,
        history: Sequence[HistoryRow] = (),
        documents: Shelf | None = None,
        memories: Sequence[Mapping[str, Any]] = (),
    ) -> str:
        """Understand `message` in the light of the session's earlier turns (oldest first),
        carry it out with call_tool(tool_name, arguments), return the reply text. What it
        reads of the person's documents beyond the tools it reads from `documents`; what it
        remembers of them is `memories` (newest first), as the turn carries them."""
        context = session_context.read(history)
        commands = parse(message, context)
        if not commands:
            return DIDNT_UNDERSTAND
        executor = Executor(Calls(call_tool), context, documents, memories)
        said: list[str] = []
        try:
            for group in _groups(commands):
                said.append(await _run(group, executor, name))
        except Stop as stop:
            said.append(stop.reply)
        return "\n".join(said)


def _groups(commands: list[Command]) -> list[list[Command]]:
    """The commands in order, the new tasks said together added together."""
    groups: list[list[Command]] = []
    for command in commands:
        if groups and isinstance(command, AddTask) and isinstance(groups[-1][-1], AddTask):
            groups[-1].append(command)
        else:
            groups.append([command])
    return groups


async def _run(commands: list[Command], executor: Executor, name: str | None) -> str:
    first = commands[0]
    if isinstance(first, AddTask):
        return await executor.add([c for c in commands if isinstance(c, AddTask)])
    match first:
        case Say():
            return first.text
        case Help():
            display = replies.clean(name or "", limit=40)
            return f"Hi {display}! {replies.HELP}" if display else f"Hi! {replies.HELP}"
        case ListTasks():
            return await executor.show(first)
        case SetCompleted():
            return await executor.set_completed(first)
        case DeleteTask():
            return await executor.delete(first)
        case DeleteMatching():
            return await executor.delete_matching(first)
        case UpdateTask():
            return await executor.update(first)
        case Plan():
            return await executor.plan(first)
        case ShowSteps():
            return await executor.show_steps(first)
        case Undo():
            return await executor.undo()
        case RestoreTask():
            return await executor.restore(first)
        case CreateList():
            return await executor.create_list(first)
        case Assign():
            return await executor.assign(first)
        case ShowTrash():
            return await executor.show_trash()
        case EmptyTrash():
            return await executor.empty_trash()
        case AskDocuments():
            return await executor.ask_documents(first)
        case TasksFromDocument():
            return await executor.tasks_from_document(first)
        case Remember():
            return await executor.remember(first)
        case Recall():
            return executor.recall(first)
        case Forget():
            return await executor.forget(first)
        case _:
            assert_never(first)
