"""A chat turn's SQL does not grow with the conversation (the benchmark times it; this
counts it, from the engine's statement events)."""

import httpx

from backend import metrics
from tests.chat_helpers import chat
from tests.fake_openai import FakeOpenAI


def _statements() -> float:
    [family] = metrics.DB_STATEMENTS.collect()
    return sum(sample.value for sample in family.samples if sample.name.endswith("_total"))


async def _statements_per_turn(client: httpx.AsyncClient, session_id: str) -> float:
    before = _statements()
    await chat(client, "one more", session_id=session_id)
    return _statements() - before


async def test_a_no_tool_turn_costs_the_same_few_statements_at_any_history_length(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    short = (await chat(agent_client, "short"))["session_id"]
    long = (await chat(agent_client, "long"))["session_id"]
    for i in range(60):
        await chat(agent_client, f"message {i}", session_id=long)
    counts = {
        await _statements_per_turn(agent_client, short),
        await _statements_per_turn(agent_client, long),
    }
    assert counts == {2}  # the start of the turn, then the reply
