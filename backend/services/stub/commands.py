"""What a message asks for: typed commands (an intent and its slots), before anything runs."""

from dataclasses import dataclass
from typing import Literal

from backend.models.task import DueFilter, Priority, StatusFilter

Field = Literal["title", "description", "due", "priority", "repeat", "remind", "list"]


@dataclass(frozen=True, slots=True)
class Say:
    """Answer with fixed text; no tool is called."""

    text: str


@dataclass(frozen=True, slots=True)
class Help:
    pass


@dataclass(frozen=True, slots=True)
class ListTasks:
    status: StatusFilter = "all"
    due: DueFilter | None = None
    tomorrow: bool = False  # due tomorrow (the tools filter today, this week and overdue)
    priority: Priority | None = None
    urgent_first: bool = False  # "what's most urgent?": the first few, most urgent first
    count: bool = False  # "how many ...?"
    list: str | None = None  # "what's on the shopping list?": a list's name, if one has it


@dataclass(frozen=True, slots=True)
class AddTask:
    text: str  # the title as typed, possibly with a due date, repeat or priority in it
    priority: Priority | None = None
    parent: str | None = None  # a reference to the task this is a step of
    remind: bool = False  # "remind me to ...": a reminder at the due time
    # "remind me about the vet tomorrow at 5pm": the words may name a task there is, whose
    # reminder is then at the time said
    about: bool = False


@dataclass(frozen=True, slots=True)
class SetCompleted:
    ref: str
    completed: bool


@dataclass(frozen=True, slots=True)
class DeleteTask:
    ref: str


@dataclass(frozen=True, slots=True)
class DeleteMatching:
    """ "delete everything about the party": every task the words fit (None: every task of
    `status`), asked about together where the person's setting holds deletes."""

    what: str | None
    status: str = "all"  # "all", or "completed" ("delete all completed tasks")


@dataclass(frozen=True, slots=True)
class UpdateTask:
    ref: str
    field: Field
    value: str  # as typed; for "repeat", "never" stops the series


@dataclass(frozen=True, slots=True)
class Plan:
    """A task and its steps, created together; no steps means "suggest some"."""

    title: str
    steps: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ShowSteps:
    ref: str


@dataclass(frozen=True, slots=True)
class CreateList:
    name: str


@dataclass(frozen=True, slots=True)
class Assign:
    """Assign a task to a member of its list (`who` None: to nobody)."""

    ref: str
    who: str | None


@dataclass(frozen=True, slots=True)
class RestoreTask:
    """Bring a task back from the trash."""

    ref: str


@dataclass(frozen=True, slots=True)
class ShowTrash:
    """ "What did I delete?": the trash."""


@dataclass(frozen=True, slots=True)
class EmptyTrash:
    """Delete everything in the trash for good."""


@dataclass(frozen=True, slots=True)
class AskDocuments:
    """ "what does my packing list say about passports", "search my notes for the wifi
    password": the best passage on `query`, in the document named (None: in any)."""

    query: str
    document: str | None


@dataclass(frozen=True, slots=True)
class TasksFromDocument:
    """ "make tasks from my moving checklist": one task named after the document (or the
    section named), its steps the items still to do."""

    document: str
    section: str | None = None


@dataclass(frozen=True, slots=True)
class Undo:
    """Take back the last turn of this session that changed tasks."""


@dataclass(frozen=True, slots=True)
class Remember:
    """ "remember that my dentist is Dr. Lee": a fact about the person, as it is kept."""

    fact: str


@dataclass(frozen=True, slots=True)
class Recall:
    """ "what's my gate code?": the memories about `topic` (None: all of them)."""

    topic: str | None


@dataclass(frozen=True, slots=True)
class Forget:
    """ "forget my gate code": the one memory the words name (asked about first)."""

    what: str


Command = (
    Say
    | Help
    | ListTasks
    | AddTask
    | SetCompleted
    | DeleteTask
    | DeleteMatching
    | UpdateTask
    | Plan
    | ShowSteps
    | CreateList
    | Assign
    | RestoreTask
    | ShowTrash
    | EmptyTrash
    | AskDocuments
    | TasksFromDocument
    | Undo
    | Remember
    | Recall
    | Forget
)
# Commands that name an existing task: a bare answer ("the plumber one") can fill their ref.
RefCommand = SetCompleted | DeleteTask | UpdateTask | ShowSteps | RestoreTask | Assign
