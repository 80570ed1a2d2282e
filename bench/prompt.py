"""How much of a turn's prompt a provider can cache: `python -m bench.prompt`.

OpenAI (and compatible servers that cache) reuse the longest prefix a request shares with
earlier ones, tool definitions first, then the messages, from 1,024 tokens on. This builds
the model requests of no-tool turns the way the service does (its tool definitions, its
`prompt_messages`, its history conversion) for two users with different names, timezones
and instructions, two turns each a minute apart, counts their tokens with tiktoken in the
configured model's encoding, and reports the tokens per turn and the share of them in the
prefix all four requests have in common.

Counting follows OpenAI's published recipe for chat messages (3 framing tokens per message
plus its role and content, 3 to prime the answer); tool definitions are counted as their
compact JSON, which over-counts them a little (the provider renders them more tersely).

tiktoken downloads its encodings from a blob store on first use, which a machine without
internet cannot do. The `bpe-openai` package ships the same files (their SHA-256 is the one
tiktoken checks); they are put into tiktoken's cache directory, so tiktoken loads and
verifies them itself, offline.
"""

import gzip
import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import tiktoken

from backend.services.agent import prompt_messages, to_model_messages
from backend.services.tools import TOOL_DEFINITIONS
from backend.services.turns import HistoryRow
from backend.settings import Settings
from bench.report import PromptFigures

_BLOB = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
_SHIPPED = ("o200k_base", "cl100k_base")  # what bpe-openai carries
MESSAGE_FRAMING = 3
REPLY_PRIMING = 3
# OpenAI caches prompts from 1,024 tokens on, in steps of 128.
CACHE_MINIMUM, CACHE_STEP = 1024, 128

# (name, timezone, instructions): two users who differ in everything the context holds.
USERS = (
    ("Alice", "Europe/Berlin", "Answer in German. I work Monday to Thursday."),
    ("Bob", "America/New_York", None),
)
TURNS = (
    ["What's on my list for today?"],
    ["What's on my list for today?", "You have 3 tasks pending.", "And tomorrow?"],
)


def encoding_for(model: str) -> tiktoken.Encoding:
    """The model's tiktoken encoding (o200k_base when tiktoken does not know the model),
    loaded without a network."""
    try:
        name = tiktoken.encoding_name_for_model(model)
    except KeyError:
        name = "o200k_base"
    if name in _SHIPPED:
        _seed_cache(name)
    return tiktoken.get_encoding(name)


def _seed_cache(name: str) -> None:
    cache = Path(
        os.environ.setdefault(
            "TIKTOKEN_CACHE_DIR", str(Path(tempfile.gettempdir()) / "todo-agent-tiktoken")
        )
    )
    # tiktoken's cache key for the file it would download; it checks the content's hash.
    target = cache / hashlib.sha1(_BLOB.format(name=name).encode()).hexdigest()
    if target.exists():
        return
    shipped = importlib.metadata.distribution("bpe-openai").locate_file(
        f"bpe_openai/data/{name}.tiktoken.gz"
    )
    cache.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    partial.write_bytes(gzip.decompress(Path(str(shipped)).read_bytes()))
    partial.rename(target)


def requests(now: datetime | None = None) -> list[dict[str, Any]]:
    """The model requests of no-tool turns, built as the agent builds them."""
    start = now or datetime.now(UTC)
    bodies = []
    for name, timezone, instructions in USERS:
        for minute, texts in enumerate(TURNS):
            history: list[HistoryRow] = [
                ("user" if i % 2 == 0 else "assistant", text, None, None)
                for i, text in enumerate(texts)
            ]
            # Each message sent a minute after the one before, the last one now.
            sent = [
                start + timedelta(minutes=minute - len(texts) + 1 + i) for i in range(len(texts))
            ]
            tz = ZoneInfo(timezone)
            messages = [
                *prompt_messages(name, tz, instructions),
                *to_model_messages(history, sent=sent, tz=tz),
            ]
            bodies.append({"tools": TOOL_DEFINITIONS, "messages": messages})
    return bodies


def tokens(body: dict[str, Any], encoding: tiktoken.Encoding) -> list[int]:
    """The request as a token sequence, in the order the provider reads (and caches) it."""
    framing = [encoding.eot_token] * MESSAGE_FRAMING  # a stand-in: identical everywhere
    sequence = encoding.encode(json.dumps(body["tools"], separators=(",", ":")))
    for message in body["messages"]:
        sequence += framing + encoding.encode(f"{message['role']}\n{message['content']}")
    return sequence + [encoding.eot_token] * REPLY_PRIMING


def _common_prefix(sequences: Sequence[list[int]]) -> int:
    length = 0
    for column in zip(*sequences, strict=False):
        if len(set(column)) > 1:
            break
        length += 1
    return length


def measure(model: str | None = None) -> PromptFigures:
    model = model or Settings.model_construct().agent_model_name
    encoding = encoding_for(model)
    sequences = [tokens(body, encoding) for body in requests()]
    mean = sum(map(len, sequences)) / len(sequences)
    shared = _common_prefix(sequences)
    return PromptFigures(
        model=model,
        encoding=encoding.name,
        prompt_tokens=mean,
        shared_prefix_tokens=shared,
        shared_share=shared / mean,
        cacheable_tokens=shared // CACHE_STEP * CACHE_STEP if shared >= CACHE_MINIMUM else 0,
        tools_tokens=len(encoding.encode(json.dumps(TOOL_DEFINITIONS, separators=(",", ":")))),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    figures = measure(args[0] if args else None)
    print(json.dumps(asdict(figures), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
