"""How much of each request a long session can reuse: `python -m bench.digest [MODEL]`.

A provider's prompt cache reuses the longest prefix a request shares with one before it.
This builds, as the service builds them (its prompt, its window and fold, its rendering of
stored messages and of each call in its turn), the model requests of one person's session
of 60 messages (30 turns, one in three adding or completing a task, each turn a minute
after the one before) with AGENT_HISTORY_MESSAGES at 20 and 10 memories (carried as the
service carries them, services/memory/prompt.py). It reports, per
request, its prompt tokens (tiktoken, as bench.prompt counts them) and the share of its
serialized messages (compact JSON, bytes) that is an unchanged prefix of the request before
it, then sums that up: the requests between folds, the requests that fold, and the mean
tokens of a request before the first fold and after it. Writes bench/results/digest.{md,json}.
"""

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from openai.types.chat import ChatCompletionMessageParam

from backend.services import digest
from backend.services.agent import history_messages, prompt_messages
from backend.services.tools import TOOL_DEFINITIONS
from backend.services.turns import HistoryRow
from backend.settings import Settings
from bench.harness import write_results
from bench.prompt import encoding_for, tokens

HISTORY = 20
TURNS = 30
MEMORIES = (
    "My dentist is Dr. Lee.",
    "My gate code is 4711.",
    "I work Monday to Thursday.",
    "Call me Sam.",
    "'The shop' means the corner grocer on Elm Street.",
    "My sister's name is Ana.",
    "I prefer mornings for errands.",
    "I am allergic to peanuts.",
    "My partner is Jo; we share the groceries list.",
    "I take the 8:10 train on weekdays.",
)


@dataclass(frozen=True)
class Request:
    turn: int
    round: int  # 0: the turn's first request; 1: after its tool call
    prompt_tokens: int
    bytes: int
    unchanged_prefix_share: float  # of its bytes, those the request before it began with
    grows_at_end: bool  # it begins with every message of the request before it, as sent
    folded: bool  # this turn folded older messages into the digest


@dataclass(frozen=True)
class Summary:
    model: str
    messages: int
    history_messages: int
    memories: int
    requests: int
    folds: list[int]  # the turns that folded
    between_folds_all_grow_at_end: bool
    between_folds_min_share: float  # the least unchanged share of a request that folds nothing
    between_folds_mean_share: float
    fold_mean_share: float  # the requests that fold: what of them the cache still holds
    mean_tokens_before_first_fold: float
    mean_tokens_after_first_fold: float
    max_tokens: int


def session(start: datetime | None = None) -> list[tuple[int, int, bool, dict[str, Any]]]:
    """Every model request of the session: (turn, round, folded, body)."""
    clock = start or datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
    tz = ZoneInfo("Europe/Berlin")
    memories = [
        {"id": f"00000000-0000-4000-8000-{n:012}", "text": t} for n, t in enumerate(MEMORIES)
    ]
    head = prompt_messages("Sam", tz, "Keep it short.", memories=memories)
    stored: list[HistoryRow] = []
    seqs: list[int] = []
    sent: list[datetime | None] = []
    summary: str | None = None
    folded = 0
    number = 0
    bodies: list[tuple[int, int, bool, dict[str, Any]]] = []
    for turn in range(TURNS):
        at = clock + timedelta(minutes=turn, seconds=17)
        text = f"Add a task to call the plumber about the sink, number {turn}"
        if turn % 3 != 0:
            text = f"What else is on for today? ({turn})"
        unfolded = [i for i, seq in enumerate(seqs) if seq > folded]
        window = digest.plan(
            [*(stored[i] for i in unfolded), ("user", text, None, None)],
            seqs=[*(seqs[i] for i in unfolded), None],
            sent=[*(sent[i] for i in unfolded), at],
            digest=summary,
            folded=folded,
            limit=HISTORY,
        )
        messages = [*head, *history_messages(window, tz)]
        bodies.append((turn, 0, window.fold is not None, _body(messages)))
        stored.append(("user", text, None, None))
        seqs.append(len(seqs) + 1)
        sent.append(at)
        if turn % 3 == 0:
            number += 1
            call: dict[str, Any] = {
                "id": f"call_{turn}",
                "name": "add_todo",
                "arguments": {"title": text[14:]},
            }
            result = {
                "status": "created",
                "todo": {"number": number, "title": text[14:], "completed": False},
            }
            messages += digest.tool_call_messages(call["id"], "add_todo", call["arguments"], result)
            bodies.append((turn, 1, False, _body(messages)))
            reply: HistoryRow = (
                "assistant",
                f"Added task {number}.",
                [call],
                [{"tool_call_id": call["id"], "name": "add_todo", "result": result}],
            )
        else:
            reply = ("assistant", f"You have {number} tasks; nothing else today.", None, None)
        stored.append(reply)
        seqs.append(len(seqs) + 1)
        sent.append(None)
        if window.fold is not None:  # written with the turn's reply
            summary, folded = window.fold.digest, window.fold.through
    return bodies


def _body(messages: Sequence[ChatCompletionMessageParam]) -> dict[str, Any]:
    return {"tools": TOOL_DEFINITIONS, "messages": [dict(m) for m in messages]}


def _serialized(body: dict[str, Any]) -> bytes:
    return json.dumps(body["messages"], ensure_ascii=False, separators=(",", ":")).encode()


def _common(a: bytes, b: bytes) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


def measure(model: str | None = None) -> tuple[Summary, list[Request]]:
    model = model or Settings.model_construct().agent_model_name
    encoding = encoding_for(model)
    requests: list[Request] = []
    before = b""
    for turn, round_, folded, body in session():
        serialized = _serialized(body)
        # All of the one before but its closing bracket: its messages, then more.
        grows = bool(before) and _common(before, serialized) == len(before) - 1
        requests.append(
            Request(
                turn=turn,
                round=round_,
                prompt_tokens=len(tokens(body, encoding)),
                bytes=len(serialized),
                unchanged_prefix_share=_common(before, serialized) / len(serialized),
                grows_at_end=grows,
                folded=folded,
            )
        )
        before = serialized
    folds = [r.turn for r in requests if r.folded]
    later = requests[1:]  # the first has no request before it
    between = [r.unchanged_prefix_share for r in later if not r.folded]
    at_fold = [r.unchanged_prefix_share for r in requests if r.folded]
    first = folds[0] if folds else TURNS
    early = [r.prompt_tokens for r in requests if r.turn < first]
    late = [r.prompt_tokens for r in requests if r.turn >= first]
    summary = Summary(
        model=model,
        messages=2 * TURNS,
        history_messages=HISTORY,
        memories=len(MEMORIES),
        requests=len(requests),
        folds=folds,
        between_folds_all_grow_at_end=all(r.grows_at_end for r in later if not r.folded),
        between_folds_min_share=min(between),
        between_folds_mean_share=sum(between) / len(between),
        fold_mean_share=sum(at_fold) / len(at_fold) if at_fold else 0.0,
        mean_tokens_before_first_fold=sum(early) / len(early),
        mean_tokens_after_first_fold=sum(late) / len(late) if late else 0.0,
        max_tokens=max(r.prompt_tokens for r in requests),
    )
    return summary, requests


def report(summary: Summary, requests: Sequence[Request]) -> str:
    lines = [
        f"# A {summary.messages}-message session with {summary.memories} memories"
        f" (AGENT_HISTORY_MESSAGES={summary.history_messages}, {summary.model})",
        "",
        "`python -m bench.digest`: each model request's prompt tokens and the share of its"
        " bytes that is an unchanged prefix of the request before it (+: it is the request"
        " before, grown at the end).",
        "",
        "```",
        "turn round tokens   bytes  unchanged-prefix",
    ]
    for r in requests:
        mark = "  <- folds" if r.folded else ""
        lines.append(
            f"{r.turn:4} {r.round:5} {r.prompt_tokens:6} {r.bytes:7}"
            f"  {r.unchanged_prefix_share:6.1%} {'+' if r.grows_at_end else ' '}{mark}"
        )
    lines += [
        "```",
        "",
        f"- Folds at turns {summary.folds}.",
        f"- Between folds: every request grows the one before at the end:"
        f" {summary.between_folds_all_grow_at_end}; unchanged prefix mean"
        f" {summary.between_folds_mean_share:.1%}, least {summary.between_folds_min_share:.1%}.",
        f"- A request that folds keeps {summary.fold_mean_share:.1%} of its bytes as the"
        " prefix of the one before (the static rules and the memories).",
        f"- Prompt tokens: mean {summary.mean_tokens_before_first_fold:.0f} before the first"
        f" fold, {summary.mean_tokens_after_first_fold:.0f} after it; at most"
        f" {summary.max_tokens}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    summary, requests = measure(args[0] if args else None)
    write_results(
        "digest",
        report(summary, requests),
        {"summary": asdict(summary), "requests": [asdict(r) for r in requests]},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
