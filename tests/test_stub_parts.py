"""Each step of the stub's pipeline alone, from tables: recognizers, understanding, the
session context and fuzzy matching. No database: these are pure functions."""

from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from backend.services.documents import checklist
from backend.services.recurrence import parse_repeat
from backend.services.stub import context, entities, replies
from backend.services.stub.commands import (
    AddTask,
    AskDocuments,
    Command,
    DeleteTask,
    EmptyTrash,
    ListTasks,
    Plan,
    RestoreTask,
    SetCompleted,
    ShowTrash,
    TasksFromDocument,
    Undo,
    UpdateTask,
)
from backend.services.stub.entities import Reminder
from backend.services.stub.executor import _on_schedule
from backend.services.stub.resolver import best_matches
from backend.services.stub.understanding import parse, split_items

NOW = datetime(2026, 11, 23, 10, 30)  # a Monday
MINUTE, DAY = timedelta(minutes=1), timedelta(days=1)


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
        # short weekday names; "wed", "sat", "sun", "mon" only with a time or "on", "by"...
        ("call mum thurs", "call mum", date(2026, 11, 26)),
        ("send the slides tues", "send the slides", date(2026, 11, 24)),
        ("book the table fri", "book the table", date(2026, 11, 27)),
        ("report due weds", "report", date(2026, 11, 25)),
        ("standup wed at 9", "standup", datetime(2026, 11, 25, 9, 0)),
        ("lunch sat", "lunch sat", None),
        # misspelt weekdays, read as the day they are close to
        ("call dad thrusday", "call dad", date(2026, 11, 26)),
        ("clean the house saterday", "clean the house", date(2026, 11, 28)),
        ("dentist on wensday at 3pm", "dentist", datetime(2026, 11, 25, 15, 0)),
        ("buy a sundae", "buy a sundae", None),
        ("call daisy", "call daisy", None),
        # "in 5 days' time", "next sat", "sometime next month"
        ("hand in the essay in 5 days time", "hand in the essay", date(2026, 11, 28)),
        ("return the parcel in 3 weeks' time", "return the parcel", date(2026, 12, 14)),
        ("clean the gutters next sat", "clean the gutters", date(2026, 11, 28)),
        ("call gran on sun", "call gran", date(2026, 11, 29)),
        ("sort the loft sometime next month", "sort the loft", date(2026, 12, 23)),
    ],
)
def test_dates_are_read_and_taken_out_of_the_text(
    text: str, rest: str, due: date | datetime | None
) -> None:
    assert entities.take_date(text, NOW) == (rest, due)


@pytest.mark.parametrize(
    ("text", "rest", "due"),
    [
        ("dentist next tuesday at 3pm", "dentist", datetime(2026, 11, 24, 15, 0)),
        ("submit timesheet friday 5pm", "submit timesheet", datetime(2026, 11, 27, 17, 0)),
        ("call mum at 15:30", "call mum", datetime(2026, 11, 23, 15, 30)),
        ("call mum at 8am", "call mum", datetime(2026, 11, 24, 8, 0)),  # 8am has passed
        ("lunch with Ana at noon", "lunch with Ana", datetime(2026, 11, 23, 12, 0)),
        ("standup 9:15 a.m. tomorrow", "standup", datetime(2026, 11, 24, 9, 15)),
        ("check the oven in 2 hours", "check the oven", datetime(2026, 11, 23, 12, 30)),
        ("stir the soup in half an hour", "stir the soup", datetime(2026, 11, 23, 11, 0)),
        ("call Bo in 45 minutes", "call Bo", datetime(2026, 11, 23, 11, 15)),
        ("meeting at 2:30pm on friday", "meeting", datetime(2026, 11, 27, 14, 30)),
        ("parents evening thursday 6pm", "parents evening", datetime(2026, 11, 26, 18, 0)),
        ("call mum tomorrow evening at 7", "call mum", datetime(2026, 11, 24, 19, 0)),
        ("tonight at 9 call Bo", "call Bo", datetime(2026, 11, 23, 21, 0)),
        ("tomorrow morning at 8", "", datetime(2026, 11, 24, 8, 0)),
        ("call Bo tomorrow at 7", "call Bo", datetime(2026, 11, 24, 7, 0)),
        ("pick up Ana tomorrow at 5", "pick up Ana", datetime(2026, 11, 24, 17, 0)),
        ("room 101 tidy-up", "room 101 tidy-up", None),
        ("flat 5 repairs", "flat 5 repairs", None),
        ("call mum at half past 6", "call mum", datetime(2026, 11, 23, 18, 30)),
        ("standup quarter to nine tomorrow", "standup", datetime(2026, 11, 24, 8, 45)),
        ("meeting quarter past 10 tomorrow", "meeting", datetime(2026, 11, 24, 10, 15)),
        # the British "half 7" (07:30, or 19:30 tonight); a time with a dot after "at" or
        # "for", or first; "4:30" read as "at 4" is (16:30), "04:30" as said
        ("put the bins out tonight at half 7", "put the bins out", datetime(2026, 11, 23, 19, 30)),
        ("pay the cleaner at half 5 tomorrow", "pay the cleaner", datetime(2026, 11, 24, 17, 30)),
        ("cut the cake in half 2 times", "cut the cake in half 2 times", None),
        ("phone the school at 8.45 tomorrow", "phone the school", datetime(2026, 11, 24, 8, 45)),
        ("7.15 tomorrow to book the physio", "to book the physio", datetime(2026, 11, 24, 7, 15)),
        ("buy 2.5 kg of flour tomorrow", "buy 2.5 kg of flour", date(2026, 11, 24)),
        ("pay 12.50 to Jo", "pay 12.50 to Jo", None),
        ("team meeting at 4:30", "team meeting", datetime(2026, 11, 23, 16, 30)),
        ("early train at 04:30", "early train", datetime(2026, 11, 24, 4, 30)),
    ],
)
def test_times_of_day_are_read_with_or_without_a_day(
    text: str, rest: str, due: date | datetime | None
) -> None:
    assert entities.take_date(text, NOW) == (rest, due)


@pytest.mark.parametrize(
    ("typed", "text", "rest", "due"),
    [
        ("mow the lawn sun p2", "mow the lawn sun", "mow the lawn", date(2026, 11, 29)),
        ("call mum mon #family", "call mum mon", "call mum", date(2026, 11, 30)),
        ("p1 dentist sat", "dentist sat", "dentist", date(2026, 11, 28)),
        ("buy sun cream p2", "buy sun cream", "buy sun cream", None),
        ("fix the sat nav p3", "fix the sat nav", "fix the sat nav", None),
        ("report wed", "report wed", "report wed", None),  # no mark: a word
    ],
)
def test_a_short_day_name_ending_a_marked_task_is_a_day(
    typed: str, text: str, rest: str, due: date | None
) -> None:
    """`text` is `typed` without its marks, as the executor reads the date after them."""
    assert entities.take_date(text, NOW, quick=entities.marked(typed)) == (rest, due)


def test_a_day_of_the_year_said_on_that_day_is_today_not_next_year() -> None:
    assert entities.take_date("dentist checkup on nov 23", NOW) == ("dentist checkup", NOW.date())


@pytest.mark.parametrize("hour", range(1, 13))
def test_a_bare_hour_means_the_same_for_a_repeating_task_and_a_one_off(hour: int) -> None:
    repeating = parse_repeat(f"every day at {hour}").at
    _, one_off = entities.take_time(f"call Bo at {hour}")
    assert repeating == one_off == time(hour + 12 if hour <= 6 else hour)


@pytest.mark.parametrize(
    ("text", "rest", "rule", "at"),
    [
        (
            "water the plants every other thursday at 6pm",
            "water the plants",
            "FREQ=WEEKLY;INTERVAL=2;BYDAY=TH",
            time(18),
        ),
        ("take out the trash every monday", "take out the trash", "FREQ=WEEKLY;BYDAY=MO", None),
        ("pay rent monthly on the 1st, p1", "pay rent p1", "FREQ=MONTHLY;BYMONTHDAY=1", None),
        ("take vitamins daily", "take vitamins", "FREQ=DAILY", None),
        (
            "every time I open the fridge it beeps",
            "every time I open the fridge it beeps",
            None,
            None,
        ),
        ("each of the kids needs shoes", "each of the kids needs shoes", None, None),
        ("pay rent the second tuesday of each month", "pay rent", "FREQ=MONTHLY;BYDAY=2TU", None),
        ("review budget every last monday", "review budget", "FREQ=MONTHLY;BYDAY=-1MO", None),
        ("gym every tue at 7am", "gym", "FREQ=WEEKLY;BYDAY=TU", time(7)),
        (
            "standup every weekday at 9:30",
            "standup",
            "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR",
            time(9, 30),
        ),
        # misspelt repeat words and weekdays; words spelt right stay as they are
        ("water the plants evrey wensday", "water the plants", "FREQ=WEEKLY;BYDAY=WE", None),
        ("stretch evry day", "stretch", "FREQ=DAILY", None),
        ("take vitamins dayly", "take vitamins", "FREQ=DAILY", None),
        ("review the plan weekley", "review the plan", "FREQ=WEEKLY", None),
        ("pay rent montly", "pay rent", "FREQ=MONTHLY", None),
        ("gym every tuesdy", "gym", "FREQ=WEEKLY;BYDAY=TU", None),
        ("swim evrey firday at 7", "swim", "FREQ=WEEKLY;BYDAY=FR", time(7)),
        ("clean the house every saterday", "clean the house", "FREQ=WEEKLY;BYDAY=SA", None),
        ("buy a sundae evry week", "buy a sundae", "FREQ=WEEKLY", None),
        ("buy dairy every week", "buy dairy", "FREQ=WEEKLY", None),
        ("tell everybody about the party", "tell everybody about the party", None, None),
        ("call daisy", "call daisy", None, None),
        # "every couple of days"; a weekday and a part of it ("every night" is 21:00)
        (
            "water the tomatoes every couple of days",
            "water the tomatoes",
            "FREQ=DAILY;INTERVAL=2",
            None,
        ),
        (
            "put the bins out every thursday night",
            "put the bins out",
            "FREQ=WEEKLY;BYDAY=TH",
            time(21),
        ),
        ("call mum every sunday morning", "call mum", "FREQ=WEEKLY;BYDAY=SU", time(9)),
    ],
)
def test_repeat_phrases_are_read_and_taken_out(
    text: str, rest: str, rule: str | None, at: time | None
) -> None:
    left, repeat = entities.take_repeat(text)
    assert (left, repeat and repeat.rule, repeat and repeat.at) == (rest, rule, at)


@pytest.mark.parametrize(
    ("text", "rest", "tags"),
    [
        ("buy milk #errands", "buy milk", ["errands"]),
        ("#work send the deck #work #urgent-ish", "send the deck", ["work", "urgent-ish"]),
        ("learn C# basics", "learn C# basics", []),
        ("close #3", "close #3", []),
    ],
)
def test_tags_are_read_and_taken_out(text: str, rest: str, tags: list[str]) -> None:
    assert entities.take_tags(text) == (rest, tags)


@pytest.mark.parametrize(
    ("text", "rest", "before"),
    [
        ("dentist at 3pm, remind me 30 minutes before", "dentist at 3pm", Reminder(30 * MINUTE)),
        ("bins monday and remind me a day before", "bins monday", Reminder(DAY)),
        ("call Al, with a reminder an hour ahead", "call Al", Reminder(60 * MINUTE)),
        ("call Al, ping me half an hour early", "call Al", Reminder(30 * MINUTE)),
        ("remind me to call Al", "remind me to call Al", None),
        # a time of day on a day before the due day, or on the day itself
        ("vet monday 9am, ping me the evening before", "vet monday 9am", Reminder(DAY, time(18))),
        ("vet at 9, remind me the night before", "vet at 9", Reminder(DAY, time(20))),
        ("gig friday, remind me the day before at 6pm", "gig friday", Reminder(DAY, time(18))),
        ("exam at 2pm, nudge me the morning of", "exam at 2pm", Reminder(at=time(9))),
        ("exam, give me a heads-up 2 days before", "exam", Reminder(2 * DAY)),
        ("vet, remind me 2 hours before at 6pm", "vet, remind me 2 hours before at 6pm", None),
        ("prep the evening before the exam", "prep the evening before the exam", None),
        # the time first
        ("flight, remind me at 7am on the day of", "flight", Reminder(at=time(7))),
        ("gig friday, remind me at 6pm the day before", "gig friday", Reminder(DAY, time(18))),
    ],
)
def test_reminders_before_the_due_time_are_read_and_taken_out(
    text: str, rest: str, before: Reminder | None
) -> None:
    assert entities.take_reminder(text) == (rest, before)


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
        ("submit timesheet p1", "submit timesheet", "high"),
        ("book flights p2 by friday", "book flights by friday", "medium"),
        ("p3 sort the photos", "sort the photos", "low"),
        ("tidy the shed p4", "tidy the shed", "none"),
        ("pay the gas bill, no priority", "pay the gas bill", "none"),
        ("fix the p45 form", "fix the p45 form", None),
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
        ("restore task 3", [RestoreTask("task 3")]),
        ("bring back the milk task", [RestoreTask("the milk task")]),
        ("get the milk back from the trash", [RestoreTask("the milk")]),
        ("what did I delete?", [ShowTrash()]),
        ("what's in the trash", [ShowTrash()]),
        ("show me the bin", [ShowTrash()]),
        ("empty the trash", [EmptyTrash()]),
        ("delete everything in the trash for good", [EmptyTrash()]),
        ("undo task 3", [SetCompleted("task 3", completed=False)]),
        ("what do I have tomorrow?", [ListTasks("pending", tomorrow=True)]),
        ("how many tasks do i have left", [ListTasks("pending", count=True)]),
        ("plan the move: pack, clean", [Plan("the move", ("pack", "clean"))]),
        ("help me plan the move", [Plan("the move", ())]),
        ("add a step to task 2: call the movers", [AddTask("call the movers", parent="task 2")]),
        ("buy milk", []),
        ("dentist next tuesday at 3pm", [AddTask("dentist next tuesday at 3pm")]),
        ("buy stamps #errands", [AddTask("buy stamps #errands")]),
        ("i'm busy tomorrow", []),
        ("busy day tomorrow", []),
        ("not today", []),
        ("i also need to call Al and pay Bo", [AddTask("call Al"), AddTask("pay Bo")]),
        ("add milk and also eggs", [AddTask("milk"), AddTask("eggs")]),
        ("Add milk. Also add eggs.", [AddTask("milk"), AddTask("eggs")]),
        ("add call Dr. Smith", [AddTask("call Dr. Smith")]),
        ("delete task 2. delete task 3", [DeleteTask("task 2. delete task 3")]),
        # a task moved, said as news or with "instead"; by an hour
        ("the team meeting got moved to 4:30", [UpdateTask("the team meeting", "due", "4:30")]),
        ("the vet has been postponed till friday", [UpdateTask("the vet", "due", "friday")]),
        ("the meeting has been moved", []),
        (
            "can we do the haircut on thursday instead",
            [UpdateTask("the haircut", "due", "thursday")],
        ),
        ("have the party on saturday", [AddTask("have the party on saturday")]),
        (
            "postpone the call with Jo until monday",
            [UpdateTask("the call with Jo", "due", "monday")],
        ),
        ("push the plumber back an hour", [UpdateTask("the plumber", "due", "an hour")]),
        ("put that back an hour", [UpdateTask("that", "due", "an hour")]),
        # a repeat made or ended in words
        ("make the gym a weekly thing", [UpdateTask("the gym", "repeat", "weekly")]),
        ("make bread weekly", [AddTask("make bread weekly")]),
        ("turn off repeating for the gym", [UpdateTask("the gym", "repeat", "never")]),
        ("no need to keep repeating the bins", [UpdateTask("the bins", "repeat", "never")]),
        ("the yoga isn't weekly any more", [UpdateTask("the yoga", "repeat", "never")]),
        (
            "the piano lesson won't repeat after this week",
            [UpdateTask("the piano lesson", "repeat", "never")],
        ),
        (
            "just do the book club once, not every month",
            [UpdateTask("the book club", "repeat", "never")],
        ),
        # deeds done, said other ways
        ("the dry cleaning's been collected", [SetCompleted("the dry cleaning", completed=True)]),
        ("the bins have been taken out", [SetCompleted("the bins", completed=True)]),
        ("just got back from the dentist", [SetCompleted("the dentist", completed=True)]),
        ("that's sorted now", [SetCompleted("that", completed=True)]),
        ("knocked out the first one", [SetCompleted("the first one", completed=True)]),
        ("knocked that one off", [SetCompleted("that one", completed=True)]),
        # a reminder: "set a reminder", and "remind me about" a task there may be
        ("set a reminder for 9am to call Jo", [AddTask("9am to call Jo", remind=True)]),
        (
            "remind me about the vet tomorrow at 5pm",
            [AddTask("the vet tomorrow at 5pm", remind=True, about=True)],
        ),
        (
            "alert me half an hour before the plumber comes",
            [UpdateTask("the plumber", "remind", "half an hour before")],
        ),
        # chatter before a request, ended by an emoji
        ("the cat threw up \U0001f644 add buy carpet cleaner", [AddTask("buy carpet cleaner")]),
        ("so much on this week. add book the MOT", [AddTask("book the MOT")]),
        (
            "bought milk and paid rent",
            [
                SetCompleted("bought milk", completed=True),
                SetCompleted("paid rent", completed=True),
            ],
        ),
        ("bought salt and pepper", [SetCompleted("bought salt and pepper", completed=True)]),
        ("I haven't done the laundry yet", [SetCompleted("the laundry", completed=False)]),
        (
            "the laundry can wait, make it low priority",
            [UpdateTask("the laundry", "priority", "low")],
        ),
        ("remove the priority of task 2", [UpdateTask("task 2", "priority", "none")]),
        ("remove the priority", [UpdateTask("it", "priority", "none")]),
        ("tomorrow I need to call the bank", [AddTask("call the bank tomorrow")]),
        ("Friday: call Al, email Bo", [AddTask("call Al Friday"), AddTask("email Bo Friday")]),
        ("move it to 9am", [UpdateTask("it", "due", "9am")]),
        ("remind me to call Al", [AddTask("call Al", remind=True)]),
        ("make it repeat every week", [UpdateTask("it", "repeat", "every week")]),
        ("actually make it every wednesday", [UpdateTask("it", "repeat", "every wednesday")]),
        ("repeat task 2 every monday", [UpdateTask("task 2", "repeat", "every monday")]),
        ("task 2 should repeat weekly", [UpdateTask("task 2", "repeat", "weekly")]),
        ("stop repeating it", [UpdateTask("it", "repeat", "never")]),
        ("don't repeat the bins any more", [UpdateTask("the bins", "repeat", "never")]),
        ("cancel the repeat on the bins", [UpdateTask("the bins", "repeat", "never")]),
        ("the bins don't need to repeat", [UpdateTask("the bins", "repeat", "never")]),
        ("remind me 30 minutes before", [UpdateTask("it", "remind", "30 minutes before")]),
        (
            "remind me about the dentist an hour before",
            [UpdateTask("the dentist", "remind", "an hour before")],
        ),
        (
            "remind me an hour before the dentist",
            [UpdateTask("the dentist", "remind", "an hour before")],
        ),
        ("pick up the kids at 3pm — add it", [AddTask("pick up the kids at 3pm")]),
        ("call the vet is done", [SetCompleted("call the vet", completed=True)]),
        # a reminder on a task by name, said before or after it
        (
            "ping me the evening before the vet",
            [UpdateTask("the vet", "remind", "the evening before")],
        ),
        (
            "remind me about the plumber the day before",
            [UpdateTask("the plumber", "remind", "the day before")],
        ),
        ("nudge me the morning of it", [UpdateTask("it", "remind", "the morning of")]),
        (
            "ping me the day before the dentist at 5pm",
            [UpdateTask("the dentist", "remind", "the day before at 5pm")],
        ),
        (
            "set a reminder an hour before the meeting",
            [UpdateTask("the meeting", "remind", "an hour before")],
        ),
        # a repeat ended in words
        ("no more repeats for the yoga", [UpdateTask("the yoga", "repeat", "never")]),
        ("the bins are a one-off now", [UpdateTask("the bins", "repeat", "never")]),
        ("stop the yoga from repeating", [UpdateTask("the yoga", "repeat", "never")]),
        ("i don't want the gym to repeat", [UpdateTask("the gym", "repeat", "never")]),
        # "it" moved to a time; a deed done; a request beside chatter
        ("could you push it to 8 pm instead", [UpdateTask("it", "due", "at 8 pm")]),
        ("make it friday", [UpdateTask("it", "due", "friday")]),
        ("finished that one", [SetCompleted("that one", completed=True)]),
        ("done the second one", [SetCompleted("the second one", completed=True)]),
        ("I put the bins out", [SetCompleted("put the bins out", completed=True)]),
        ("put the bins out tomorrow", [AddTask("put the bins out tomorrow")]),
        ("ugh I always forget lol. add buy a charger", [AddTask("buy a charger")]),
        ("so tired. whatever", []),
        (
            "move the dentist to the spring. add milk",
            [UpdateTask("the dentist", "list", "the spring"), AddTask("milk")],
        ),
        # documents: a question about one, or a checklist made tasks
        (
            "what does my packing list say about passports?",
            [AskDocuments("passports", "packing list")],
        ),
        ("search my notes for the wifi password", [AskDocuments("the wifi password", None)]),
        ("find the gate code in my documents", [AskDocuments("the gate code", None)]),
        ("what did the minutes say about the budget", [AskDocuments("the budget", "minutes")]),
        ("make tasks from my moving checklist", [TasksFromDocument("moving checklist")]),
        ("add the items of the release runbook as tasks", [TasksFromDocument("release runbook")]),
        ("turn my packing list into tasks", [TasksFromDocument("packing list")]),
        (
            "make tasks from the Week before section of the moving checklist",
            [TasksFromDocument("moving checklist", "Week before")],
        ),
        ("what do I have on tomorrow", [ListTasks("pending", tomorrow=True, list="tomorrow")]),
        ("add buy milk as a task", [AddTask("buy milk as a task")]),
    ],
)
def test_messages_become_typed_commands(message: str, commands: list[Command]) -> None:
    assert parse(message) == commands


def test_context_reads_the_last_listing_and_the_last_task() -> None:
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


@pytest.mark.parametrize(
    ("phrase", "numbers"),
    [
        ("flour", [2]),
        ("emailed jo", [3]),
        ("table booking", [4]),
        ("dentsit", [5]),
        ("call", [1, 6]),
        ("unicorn", []),
        ("rang the vet", [1]),  # "rang" is a call
        ("phone", []),  # "phone" says no call by itself
    ],
)
def test_references_match_by_meaning(phrase: str, numbers: list[int]) -> None:
    titles = ["Call the vet", "Buy flour", "Email Jo", "Book a table", "Dentist", "Call mom"]
    todos = [{"number": n, "title": t} for n, t in enumerate(titles, 1)]
    assert [t["number"] for t in best_matches(phrase, todos)] == numbers


@pytest.mark.parametrize("today", [date(2026, 11, 23) + timedelta(days=n) for n in range(7)])
def test_a_repeating_task_made_to_repeat_on_another_day_is_next_due_by_the_new_rule(
    today: date,
) -> None:
    """ "every tuesday", then "actually make it every wednesday": due on the first
    Wednesday from today (today, on a Wednesday), whatever day of the week it is."""
    tz = ZoneInfo("Europe/Berlin")
    now = datetime.combine(today, time(10), tzinfo=tz)
    tuesday = today + timedelta(days=(1 - today.weekday()) % 7)
    todo = {"due_at": f"{tuesday}T23:59:59+01:00", "recurrence": "FREQ=WEEKLY;BYDAY=TU"}
    moved = _on_schedule(todo, "every wednesday", tz, now)
    wednesday = today + timedelta(days=(2 - today.weekday()) % 7)
    assert moved == wednesday.isoformat()


@pytest.mark.parametrize(
    ("markdown", "steps"),
    [
        (
            "- [ ] call the movers\n- [x] pack the books\n- [ ] book the van",
            ["call the movers", "book the van"],
        ),
        (
            "- [ ] **book** the [van](https://vans.example)\n  - [ ] its deposit",
            ["book the van", "its deposit"],
        ),
        ("- [ ] a ticked list\n- plain items in it are notes", ["a ticked list"]),
        ("1. keys\n2. meters\n\n* post", ["keys", "meters", "post"]),
        ("No list here, just [ ] text.", []),
        ("- [X] all done\n- [x] this too", []),
    ],
)
def test_a_documents_items_still_to_do(markdown: str, steps: list[str]) -> None:
    assert checklist.to_do(markdown) == steps


@pytest.mark.parametrize(
    ("title", "heading", "said"),
    [
        ("Moving", "Moving \u203a Week before", "\u201cMoving\u201d \u203a Week before"),
        ("Moving", "Moving", "\u201cMoving\u201d"),
        ("Lease", "", "\u201cLease\u201d"),
        ("Runbook", "Deploy \u203a Rollback", "\u201cRunbook\u201d \u203a Deploy \u203a Rollback"),
    ],
)
def test_a_passage_is_named_by_its_document_and_heading(
    title: str, heading: str, said: str
) -> None:
    assert replies.source(title, heading) == said


def test_a_quoted_passage_never_reads_as_a_listing() -> None:
    quoted = replies.quote("- #3 Delete everything\n\nsecond line")
    assert quoted == "> - #3 Delete everything\n> second line"
    assert context.read([("assistant", quoted, None, None)]).listing == []
