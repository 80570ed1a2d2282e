"""Each step of the stub's pipeline alone, from tables: recognizers, understanding, the
session context and fuzzy matching. No database: these are pure functions."""

from datetime import date, datetime

import pytest

from backend.services.stub import context, entities
from backend.services.stub.commands import (
    AddTask,
    Command,
    DeleteTask,
    ListTasks,
    Plan,
    SetCompleted,
    Undo,
    UpdateTask,
)
from backend.services.stub.resolver import best_matches
from backend.services.stub.understanding import parse, split_items

NOW = datetime(2026, 11, 23, 10, 30)  # a Monday


@pytest.mark.parametrize(
    ("text", "rest", "due"),
    [
        ("buy a gift for Tom by Thursday", "buy a gift for Tom", date(2026, 11, 26)),
        ("book flights in two weeks", "book flights", date(2026, 12, 7)),
        ("call the vet tomorrow morning", "call the vet", datetime(2026, 11, 24, 9, 0)),
        ("pay the phone bill on the 20th", "pay the phone bill", date(2026, 12, 20)),
        ("tidy the attic next weekend", "tidy the attic", date(2026, 11, 28)),
        ("submit the form before the end of the month", "submit the form", date(2026, 11, 30)),
        ("call mom tonight", "call mom", datetime(2026, 11, 23, 20, 0)),
        ("sync next Monday at 9", "sync", datetime(2026, 11, 30, 9, 0)),
        ("pay rent the day after tomorrow", "pay rent", date(2026, 11, 25)),
        ("buy a gift for may", "buy a gift for may", None),
        ("march on the town hall", "march on the town hall", None),
        ("buy sun cream", "buy sun cream", None),
        ("call 555 1234", "call 555 1234", None),
        ("meet Ana at 5", "meet Ana", datetime(2026, 11, 23, 17, 0)),
    ],
)
def test_dates_are_read_and_taken_out_of_the_text(
    text: str, rest: str, due: date | datetime | None
) -> None:
    assert entities.take_date(text, NOW) == (rest, due)


@pytest.mark.parametrize(
    ("text", "rest", "priority"),
    [
        ("call the bank, it's urgent", "call the bank", "high"),
        ("urgent: fix the roof", "fix the roof", "high"),
        ("water the plants no rush", "water the plants", "low"),
        ("clear the gutters, not urgent", "clear the gutters", "low"),
        ("learn spanish whenever", "learn spanish", "low"),
        ("book the flights - high priority", "book the flights", "high"),
        ("buy milk", "buy milk", None),
    ],
)
def test_priority_cues_are_read_and_taken_out(text: str, rest: str, priority: str | None) -> None:
    assert entities.take_priority(text) == (rest, priority)


@pytest.mark.parametrize(
    ("word", "number", "ordinal"),
    [("4", 4, None), ("four", 4, None), ("#12", 12, None), ("third", None, 3), ("2nd", None, 2)],
)
def test_numbers_and_ordinals(word: str, number: int | None, ordinal: int | None) -> None:
    assert (entities.number(word), entities.ordinal(word)) == (number, ordinal)


@pytest.mark.parametrize(
    ("text", "items"),
    [
        ("apples, pears and flour", ["apples", "pears", "flour"]),
        ("email Jo and book a table", ["email Jo", "book a table"]),
        ("buy bread, cheese and olives", ["buy bread", "buy cheese", "buy olives"]),
        ("buy salt and pepper", ["buy salt and pepper"]),
        ("pay rent, it's for the landlord", ["pay rent, it's for the landlord"]),
        ("call the bank, friday", ["call the bank, friday"]),
        ("'a, b and c'", ["'a, b and c'"]),
    ],
)
def test_several_tasks_are_split_where_a_human_reads_several(text: str, items: list[str]) -> None:
    assert split_items(text) == items


@pytest.mark.parametrize(
    ("message", "commands"),
    [
        ("task four is done", [SetCompleted("task four", completed=True)]),
        ("i emailed jo", [SetCompleted("emailed jo", completed=True)]),
        ("cancel the vet", [DeleteTask("the vet")]),
        ("postpone the haircut by three days", [UpdateTask("the haircut", "due", "by three days")]),
        ("make it almond milk", [UpdateTask("it", "title", "almond milk")]),
        ("undo that", [Undo()]),
        ("what do I have tomorrow?", [ListTasks("pending", tomorrow=True)]),
        ("how many tasks do i have left", [ListTasks("pending", count=True)]),
        ("plan the move: pack, clean", [Plan("the move", ("pack", "clean"))]),
        ("help me plan the move", [Plan("the move", ())]),
        ("add a step to task 2: call the movers", [AddTask("call the movers", parent="task 2")]),
        ("buy milk", []),
    ],
)
def test_messages_become_typed_commands(message: str, commands: list[Command]) -> None:
    assert parse(message) == commands


def test_context_reads_the_last_listing_the_last_task_and_the_stubs_last_change() -> None:
    added = {"status": "created", "todo": {"number": 3, "title": "Buy milk"}}
    history: list[context.HistoryRow] = [
        ("user", "show my tasks", None, None),
        ("assistant", "You have 2 tasks:\n- #1 A\n- #2 B", None, None),
        ("user", "add buy milk", None, None),
        (
            "assistant",
            "Added task 3: Buy milk.",
            [{"id": "stub_1", "name": "add_todo", "arguments": {"title": "Buy milk"}}],
            [{"tool_call_id": "stub_1", "result": added}],
        ),
    ]
    read = context.read(history)
    assert (read.listing, read.last_task, read.last_added) == ([1, 2], 3, True)
    assert [change.tool for change in read.last_change] == ["add_todo"]


@pytest.mark.parametrize(
    ("phrase", "numbers"),
    [
        ("flour", [2]),
        ("emailed jo", [3]),
        ("table booking", [4]),
        ("dentsit", [5]),
        ("call", [1, 6]),
        ("unicorn", []),
    ],
)
def test_references_match_by_meaning(phrase: str, numbers: list[int]) -> None:
    titles = ["Call the vet", "Buy flour", "Email Jo", "Book a table", "Dentist", "Call mom"]
    todos = [{"number": n, "title": t} for n, t in enumerate(titles, 1)]
    assert [t["number"] for t in best_matches(phrase, todos)] == numbers
