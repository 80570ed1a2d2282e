"""Requests about the person's documents: "what does my packing list say about passports",
"search my notes for the wifi password", "find the gate code in my documents", "make tasks
from my moving checklist", "add the items of the release runbook as tasks", "make tasks
from the Week before section of the moving checklist".

A table of rows, each a pattern and the command it builds; the document and section are
left as typed, for the executor to find among the person's documents by name.
"""

import re
from collections.abc import Callable

from backend.services.stub.commands import AskDocuments, Command, TasksFromDocument


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE | re.DOTALL)


_TASKS = r"(?:tasks?|todos?|to-dos?|a task|steps|a checklist)"
_ITEMS = r"(?:items|steps|things|points|bullets|entries|lines|to-?dos|tasks|checklist|list)"
_LIST = r"(?:(?:my |the )?(?:tasks|todos|to-dos|(?:todo |to-do |task )?list)|a task)"
_ASK = (
    # "what does my packing list say about passports", "what do my notes say on parking"
    _rx(
        r"what (?:does|do|did|will) (?P<doc>.+?) (?:say|said|mention|write)"
        r" (?:about|on|regarding|re|for|of) (?P<query>.+)"
    ),
    # "search my notes for the wifi password", "look through the runbook for rollback"
    _rx(
        r"(?:search|search through|search in|look through|look in|grep)"
        r" (?P<doc>.+?) for (?P<query>.+)"
    ),
    # "find the gate code in my documents", "search for parking in my notes"
    _rx(
        r"(?:find|look up|look for|search for|search|where is|where's) (?P<query>.+?)"
        r" (?:in|on|from) (?P<doc>(?:my|the|our) .+)"
    ),
)
_FROM_DOCUMENT = (
    # "make tasks from my moving checklist", "create todos out of the packing list"
    _rx(
        rf"(?:make|create|add|generate|build|get|set up)(?: me)? {_TASKS}"
        r" (?:from|out of|off|based on|using) (?P<src>.+)"
    ),
    # "add the items of the release runbook as tasks", "copy the steps in my runbook to my list"
    _rx(
        rf"(?:add|import|copy|put|take|bring)(?: all)?(?: of)?(?: the)? {_ITEMS}"
        rf" (?:of|from|in|on) (?P<src>.+?) (?:as|to|into|onto|on) {_LIST}"
    ),
    # "turn my packing list into tasks", "add my moving checklist as tasks"
    _rx(rf"(?:turn|make|convert|change) (?P<src>.+?) into {_TASKS}"),
    _rx(r"(?:add|import) (?P<src>(?:my|the|our) .+?) as (?:tasks|todos|to-dos|a checklist)"),
)
# "the Week before section of the moving checklist", "the moving checklist's Week before part"
_SECTION = (
    _rx(
        r"(?:the )?(?:section|part|heading) [\"']?(?P<section>.+?)[\"']?"
        r" (?:of|from|in|on) (?P<doc>.+)"
    ),
    _rx(
        r"(?:the )?[\"']?(?P<section>.+?)[\"']? (?:section|part|bit) (?:of|from|in|on) (?P<doc>.+)"
    ),
    _rx(r"(?P<doc>.+?)'s? [\"']?(?P<section>.+?)[\"']? (?:section|part|bit)"),
)
_DETERMINERS = re.compile(r"^(?:(?:my|the|our|a|an|this|that)\s+)+", re.IGNORECASE)
# A document's name that names none: "search my notes", "find it in my documents".
ANY_DOCUMENT = frozenset(
    {
        "notes", "note", "documents", "document", "docs", "doc", "files", "file", "stuff",
        "writing", "pages", "papers", "knowledge", "knowledge base", "saved notes",
    }
)  # fmt: skip
# Where a thing is looked for that is the task list or a person, not a document: "find milk
# in my tasks", "what did I say about the party".
_NOT_DOCUMENTS = frozenset(
    {"tasks", "todos", "to-dos", "list", "todo list", "to-do list", "inbox", "i", "we", "you"}
)


def name(text: str) -> str:
    """A document's or section's name as typed, without "my", "the" or quotes."""
    return _DETERMINERS.sub("", text.strip(" '\"")).strip(" '\"")


def document_request(text: str) -> Command | None:
    for pattern, build in _RULES:
        if (match := pattern.fullmatch(text)) and (command := build(match)) is not None:
            return command
    return None


def _ask(match: re.Match[str]) -> Command | None:
    document = name(match["doc"])
    if document.lower() in _NOT_DOCUMENTS or not match["query"].strip(" ?"):
        return None
    query = match["query"].strip(" ?'\"")
    return AskDocuments(query, None if document.lower() in ANY_DOCUMENT else document)


def _from_document(match: re.Match[str]) -> Command | None:
    source = match["src"].strip(" '\"")
    for pattern in _SECTION:
        if found := pattern.fullmatch(source):
            return TasksFromDocument(name(found["doc"]), name(found["section"]))
    document = name(source)
    return None if document.lower() in _NOT_DOCUMENTS else TasksFromDocument(document)


_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], Command | None]]] = [
    *((pattern, _from_document) for pattern in _FROM_DOCUMENT),
    *((pattern, _ask) for pattern in _ASK),
]
