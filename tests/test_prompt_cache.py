"""The model request is laid out for providers' prompt caches, and the bench can say how
much of it they can reuse (counted with tiktoken, offline)."""

import json

from backend.services.agent import SYSTEM_PROMPT
from backend.services.tools import TOOL_DEFINITIONS
from bench import prompt


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
    # (issue 32: 2,000 tokens without documents, 2,150 with).
    assert prompt.measure("gpt-4o-mini").prompt_tokens <= 2000
