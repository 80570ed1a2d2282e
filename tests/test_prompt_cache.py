"""The model request is laid out for providers' prompt caches, and the bench can say how
much of it they can reuse (counted with tiktoken, offline)."""

import json

from backend.services.agent import SYSTEM_PROMPT
from backend.services.tools import TOOL_DEFINITIONS
from bench import digest, prompt


def test_tiktoken_counts_in_the_models_encoding_without_a_network() -> None:
    encoding = prompt.encoding_for("gpt-4o-mini")
    assert encoding.name == "o200k_base"
    assert encoding.encode("hello world") == [24912, 2375]
    assert prompt.encoding_for("gpt-4").name == "cl100k_base"


def test_the_static_rules_and_tools_are_a_cacheable_prefix_of_every_request() -> None:
    bodies = prompt.requests()
    assert len(bodies) == 4  # two users, two turns each
    assert {json.dumps([b["tools"], b["messages"][0]]) for b in bodies} == {
        json.dumps([TOOL_DEFINITIONS, {"role": "system", "content": SYSTEM_PROMPT}])
    }
    # The user's context differs by user only: the minute goes with each message.
    assert len({b["messages"][1]["content"] for b in bodies}) == 2
    assert len({b["messages"][-1]["content"] for b in bodies}) == 4

    figures = prompt.measure("gpt-4o-mini")
    encoding = prompt.encoding_for("gpt-4o-mini")
    static = len(
        prompt.tokens({"tools": TOOL_DEFINITIONS, "messages": bodies[0]["messages"][:1]}, encoding)
    )
    assert figures.shared_prefix_tokens >= static - prompt.REPLY_PRIMING
    assert figures.shared_share > 0.9
    assert figures.cacheable_tokens >= 1024
    assert figures.tools_tokens < figures.shared_prefix_tokens


def test_a_no_tool_turn_stays_within_its_token_budget() -> None:
    # search_documents is offered to everyone, so one budget holds with or without documents
    # (issue 32: 2,000 tokens without documents, 2,150 with); remember and forget are too,
    # within the contract's 2,150 (issue 37, "The agent remembers").
    assert prompt.measure("gpt-4o-mini").prompt_tokens <= 2150


def test_a_long_sessions_requests_grow_at_their_end_between_folds() -> None:
    """bench.digest: 60 messages, 10 memories, a window of 20: every request that folds
    nothing begins with all of the request before it, byte for byte; a fold, every fifth
    turn, keeps the static rules, the context and the memories, and the window bounds what
    a request carries."""
    summary, requests = digest.measure("gpt-4o-mini")
    assert (summary.messages, summary.memories, summary.history_messages) == (60, 10, 20)
    assert summary.folds == [10, 15, 20, 25]  # never on two turns running
    assert summary.between_folds_all_grow_at_end
    assert summary.between_folds_min_share > 0.85
    bodies = [body for *_, body in digest.session()]
    static = len(json.dumps(bodies[0]["messages"][:3], separators=(",", ":")))
    folding = [r for r in requests if r.folded]
    assert all(r.unchanged_prefix_share * r.bytes >= static - 1 for r in folding)
    assert summary.max_tokens < summary.mean_tokens_before_first_fold + 1000
