"""Whatever the model does, the turn answers, the user message is stored, and the stub
takes over when the model cannot answer."""

import httpx
import pytest

from backend.settings import Settings
from tests.chat_helpers import chat, stored_messages, task_titles
from tests.conftest import auth, serving
from tests.fake_openai import (
    FakeOpenAI,
    Step,
    call,
    delay,
    error,
    garbage,
    hang,
    reply,
    reset,
    reset_mid_stream,
    tool_calls,
)
from tests.servers import free_port

# One message the stub understands, so a fallback is visible as a real effect.
MESSAGE = "Add a task to buy groceries"


async def _answer_stored(client: httpx.AsyncClient, answer: dict[str, object]) -> None:
    stored = await stored_messages(client, str(answer["session_id"]))
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[0]["content"] == MESSAGE
    assert stored[1]["content"] == answer["response"]
    assert stored[1]["using_stub"] == answer["using_stub"]


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param([error(429, headers={"Retry-After": "0"})] * 5, id="429-storm"),
        pytest.param([error(500)] * 5, id="500s"),
        pytest.param([error(503)] * 5, id="503s"),
        pytest.param([hang()] * 5, id="hang-past-timeout"),
        pytest.param([reset()] * 5, id="connection-reset"),
        pytest.param([garbage()] * 5, id="garbage-json"),
        pytest.param([garbage(content_type="text/html")] * 5, id="garbage-html"),
        pytest.param([error(401, message="bad key")], id="401-not-retried"),
    ],
)
async def test_a_failing_model_falls_back_to_the_stub(
    model_settings: Settings, model: FakeOpenAI, engine: object, steps: list[Step]
) -> None:
    model.script(*steps)
    settings = model_settings.model_copy(
        update={"openai_timeout_s": 0.5, "openai_max_retries": 2, "openai_retry_budget_s": 2.0}
    )
    async with serving(settings) as client:
        answer = await chat(client, MESSAGE)
        assert answer["using_stub"] is True
        assert "Buy groceries" in str(answer["response"])
        assert await task_titles(client) == ["Buy groceries"]
        await _answer_stored(client, answer)


async def test_transient_errors_are_retried_and_the_model_answers(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.script(
        error(429, headers={"Retry-After": "0.1"}),
        error(500),
        reply("Second try worked."),
    )
    answer = await chat(agent_client, MESSAGE)
    assert answer["response"] == "Second try worked."
    assert answer["using_stub"] is False
    assert model.requests_count == 3


async def test_retry_after_longer_than_the_budget_goes_straight_to_the_stub(
    model_settings: Settings, model: FakeOpenAI, engine: object
) -> None:
    model.script(error(429, headers={"Retry-After": "30"}), reply("too late"))
    async with serving(model_settings) as client:
        answer = await chat(client, MESSAGE)
    assert answer["using_stub"] is True
    assert model.requests_count == 1


async def test_slow_model_within_the_timeout_is_waited_for(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.script(delay(0.3, then=reply("slow but fine")))
    answer = await chat(agent_client, MESSAGE)
    assert answer["response"] == "slow but fine"


async def test_connection_refused_falls_back_to_the_stub(
    model_settings: Settings, engine: object
) -> None:
    settings = model_settings.model_copy(
        update={"openai_base_url": f"http://127.0.0.1:{free_port()}/v1"}
    )
    async with serving(settings) as client:
        answer = await chat(client, MESSAGE)
        assert answer["using_stub"] is True
        await _answer_stored(client, answer)


async def test_no_api_key_means_every_turn_is_the_stub(
    client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    answer = await chat(client, MESSAGE)
    assert answer["using_stub"] is True
    assert answer["response"].startswith("Added task 1: Buy groceries")
    assert model.requests_count == 0


async def test_an_endless_tool_loop_ends_with_a_reply(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.default = tool_calls(call("add_todo", {"title": "again"}))
    answer = await chat(agent_client, MESSAGE)
    assert len(answer["tool_calls"]) == 5  # AGENT_MAX_TOOL_ROUNDS
    assert "Created task 5: again" in answer["response"]
    await _answer_stored(agent_client, answer)


async def test_a_stream_reset_mid_answer_falls_back(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.script(*[reset_mid_stream(after_chunks=2)] * 5)
    response = await agent_client.post(
        "/api/alice/chat/stream", json={"message": MESSAGE}, headers=auth("alice")
    )
    assert response.status_code == 200
    assert "event: done" in response.text
    assert await task_titles(agent_client) == ["Buy groceries"]
