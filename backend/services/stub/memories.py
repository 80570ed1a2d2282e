"""Requests about what the assistant remembers of the person: "remember that my dentist is
Dr. Lee", "note that I work Monday to Thursday", "my sister's name is Ana" (a fact, said as
one), "what do you remember about me?", "what's my gate code?", "who is my dentist?",
"forget my gate code".

A table of rows, each a pattern and the command it builds; "remember to pay the bills" and
"I need to remember to call mom" match none of them and stay tasks (understanding's
`_REMEMBER`). `asks_to_remember` is the same reading put to another use: whether the
person's own message asked for something to be remembered (services/memory/guard.py).
"""

import re
from collections.abc import Callable

from backend.services.stub.commands import Command, Forget, Recall, Remember


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE | re.DOTALL)


# Who a fact is about, at its start: "my gate code is ...", "I work ...", "we live ...".
_SUBJECT = r"(?:my|our|i|i'm|im|i am|i've|i have|we|we're|we are|me)"
_KEEP = (
    r"(?:(?:please |also |and )?(?:remember|memori[sz]e|keep in mind|don't forget|dont forget"
    r"|do not forget|note|make a note|take note|save|store)(?: this)?)"
)
# Words that make "my X is ..." a task, a question about the list or a remark ("my cat is
# sitting on the keyboard", "my day is busy"), not a fact to keep.
_NOT_A_FACT = _rx(
    r".*\b(?:due|overdue|done|finished|complete|completed|pending|tomorrow|today|tonight"
    r"|next|task|tasks|todo|list|appointment|meeting)\b.*"
    r"|(?:[\w'-]+ )+?(?:is|are) (?:\w+ing|busy|free|tired|sick|late|full|empty|broken|dead"
    r"|over|gone|back|here|there|ok|okay|fine|great|awful|terrible|so|too|very|really|not"
    r"|a mess|a bit|kind of|driving|killing)\b.*"
)
# "what's my day like", "what's on my list": the list, not a memory.
_ABOUT_THE_LIST = _rx(
    r"(?:.*\b)?(?:list|tasks?|todos?|to-dos?|day|week|weekend|schedule|agenda|plan|plans"
    r"|next|priorit\w*|due|overdue|pending|inbox|trash|progress)\b.*"
)

_REMEMBER = (
    # "remember that the shop means the corner grocer", "note that I work Monday to Thursday"
    _rx(rf"{_KEEP}(?: that|:) (?P<fact>.+)"),
    # "remember my gate code is 4711", "keep in mind I'm vegetarian"
    _rx(rf"{_KEEP} (?P<fact>{_SUBJECT} .+)"),
)
# "my sister's name is Ana", "my dentist is Dr. Lee": a fact said as one.
_STATED = _rx(r"(?P<fact>(?:my|our) [\w'-]+(?: [\w'-]+){0,3} (?:is|are)(?: called| named)? .+)")
_RECALL_ALL = _rx(
    r"(?:what|what else) (?:do|did) you (?:remember|know|recall|have saved|keep)"
    r" (?:about|of|on) (?:me|us)|what have you (?:remembered|saved|noted) about (?:me|us)"
    r"|what(?:'s| is) in (?:your|the) memory|(?:show|list)(?: me)? (?:my|your) memories"
)
_RECALL = (
    # "what's my gate code?", "what are my kids' names"
    _rx(r"(?:what|which)(?:'s| is| are| was| were) (?:my|our) (?P<topic>.+)"),
    # "who is my dentist?", "who's my landlord"
    _rx(r"who(?:'s| is| are| was) (?:my|our) (?P<topic>.+)"),
    # "do you remember my gate code", "what did I tell you about the shop"
    _rx(
        r"(?:do|did) you (?:remember|know|recall) (?:what |who )?(?:my|our) (?P<topic>.+?)"
        r"(?: is| are)?"
    ),
    _rx(r"what did (?:i|we) (?:tell|say to) you about (?P<topic>.+)"),
)
_FORGET = (
    # "forget that my dentist is Dr. Lee", "forget my gate code"
    _rx(
        r"(?:forget|unremember|delete the memory|remove the memory)(?: that)?"
        rf" (?P<what>{_SUBJECT} .+)"
    ),
    _rx(r"forget what (?:i|we) (?:said|told you) about (?P<what>.+)"),
)


def _fact(text: str) -> str:
    """A fact as it is kept: its first letter capitalized, nothing trailing."""
    fact = text.strip(" .!?,;:'\"")
    return fact[:1].upper() + fact[1:]


# "remember that I need to call mom", "remember: to call mom": a task, not a fact.
_A_TASK = _rx(r"(?:to|(?:i|we) (?:need|have|must|should|ought|got|gotta)(?: to)?) .*")


def _remember(match: re.Match[str]) -> Command | None:
    fact = _fact(match["fact"])
    return None if not fact or _A_TASK.fullmatch(fact) else Remember(fact)


def _stated(match: re.Match[str]) -> Command | None:
    fact = _fact(match["fact"])
    return None if _NOT_A_FACT.fullmatch(fact) else Remember(fact)


def _recall(match: re.Match[str]) -> Command | None:
    topic = match["topic"].strip(" ?.!'\"")
    if not topic or _ABOUT_THE_LIST.fullmatch(topic):
        return None
    return Recall(topic)


def _forget(match: re.Match[str]) -> Command | None:
    what = match["what"].strip(" ?.!'\"")
    return Forget(what) if what else None


_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], Command | None]]] = [
    (_RECALL_ALL, lambda _: Recall(None)),
    *((pattern, _remember) for pattern in _REMEMBER),
    *((pattern, _forget) for pattern in _FORGET),
    *((pattern, _recall) for pattern in _RECALL),
    (_STATED, _stated),
]


def memory_request(text: str) -> Command | None:
    """The request about memories `text` makes (whitespace collapsed, fillers stripped)."""
    for pattern, build in _RULES:
        if (match := pattern.fullmatch(text)) and (command := build(match)) is not None:
            return command
    return None


_SENTENCES = re.compile(
    r"(?<=[.!?;\n])\s+|\s+(?:and|also|then),?\s+(?=(?:please )?(?:remember|note|keep|my|our)\b)",
    re.I,
)
_FILLERS = _rx(
    r"^(?:(?:please|pls|hey|hi|ok|okay|so|and|also|btw|oh|could you|can you|would you"
    r"|i want you to|i'd like you to)[,:!]? )+"
)


def asks_to_remember(message: str) -> bool:
    """Whether the person's own message asks for a fact to be remembered, in any of its
    sentences: by the rows above, never by what a model says it heard."""
    text = " ".join(message.replace("\u2019", "'").split())
    for sentence in _SENTENCES.split(text):
        sentence = _FILLERS.sub("", sentence.strip(" .!?,;:"))
        if isinstance(memory_request(sentence), Remember):
            return True
    return False
