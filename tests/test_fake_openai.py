"""The scripted OpenAI fake, exercised through the real `openai` SDK.

These tests pin down what each scripted step looks like from the SDK's side, which is
exactly what the agent code will see in its own tests.
"""

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam

from tests.fake_openai import (
    FakeOpenAI,
    call,
    delay,
    error,
    garbage,
    hang,
    reply,
    reset,
    reset_mid_stream,
    stream_error,
    tool_calls,
    vectors,
)

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You manage todos."},
    {"role": "user", "content": "Add milk and list my todos"},
]
STREAM_MODES = [pytest.param(False, id="plain"), pytest.param(True, id="stream")]


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def fake(fake_server: FakeOpenAI) -> FakeOpenAI:
    """One server for the module, fresh for each test (as a session fixture would be)."""
    fake_server.clear()
    return fake_server


@pytest.fixture(scope="module")
async def sdk(fake_server: FakeOpenAI) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=fake_server.base_url, api_key="test-key", max_retries=0) as sdk:
        yield sdk


async def collect(sdk: AsyncOpenAI, **extra: Any) -> list[ChatCompletionChunk]:
    stream = await sdk.chat.completions.create(
        model="gpt-test", messages=MESSAGES, stream=True, **extra
    )
    return [chunk async for chunk in stream]


async def drain(
    stream: AsyncIterator[ChatCompletionChunk], into: list[ChatCompletionChunk]
) -> None:
    async for chunk in stream:
        into.append(chunk)


def streamed_text(chunks: list[ChatCompletionChunk]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def streamed_calls(chunks: list[ChatCompletionChunk]) -> dict[int, dict[str, str]]:
    """Tool calls reassembled by index, the way a streaming client has to."""
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            if delta.id:
                entry["id"] = delta.id
            if delta.function and delta.function.name:
                entry["name"] = delta.function.name
            if delta.function and delta.function.arguments:
                entry["arguments"] += delta.function.arguments
    return calls


def finish_reasons(chunks: list[ChatCompletionChunk]) -> list[str]:
    return [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]


# ------------------------------------------------------------------ plain answers


async def test_plain_reply_with_usage(fake: FakeOpenAI, sdk: AsyncOpenAI) -> None:
    fake.script(reply("Added milk.", usage={"prompt_tokens": 12, "completion_tokens": 3}))

    answer = await sdk.chat.completions.create(model="gpt-test", messages=MESSAGES)

    choice = answer.choices[0]
    assert choice.message.content == "Added milk."
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert answer.model == "gpt-test"
    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (12, 3)
    assert answer.usage.total_tokens == 15


async def test_streamed_reply_arrives_in_several_chunks(fake: FakeOpenAI, sdk: AsyncOpenAI) -> None:
    text = "Added milk to your list, and here are your three todos."
    fake.script(reply(text))

    chunks = await collect(sdk)

    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_chunks) > 3
    assert streamed_text(chunks) == text
    assert chunks[0].choices[0].delta.role == "assistant"
    assert finish_reasons(chunks) == ["stop"]
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert all(c.usage is None for c in chunks)


async def test_usage_chunk_comes_last_when_requested(fake: FakeOpenAI, sdk: AsyncOpenAI) -> None:
    fake.script(reply("Done.", usage={"prompt_tokens": 7, "completion_tokens": 2}))

    chunks = await collect(sdk, stream_options={"include_usage": True})

    *body, last = chunks
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (7, 2)
    assert last.usage.total_tokens == 9
    assert all(c.usage is None for c in body)
    assert streamed_text(chunks) == "Done."


async def test_the_default_answers_when_the_script_is_used_up(
    fake: FakeOpenAI, sdk: AsyncOpenAI
) -> None:
    fake.script("first")  # a string is short for reply(text)

    answers = [
        (await sdk.chat.completions.create(model="m", messages=MESSAGES)).choices[0].message
        for _ in range(3)
    ]
    fake.default = reply("changed default")
    changed = await sdk.chat.completions.create(model="m", messages=MESSAGES)

    assert [a.content for a in answers] == ["first", "OK", "OK"]
    assert changed.choices[0].message.content == "changed default"
    assert fake.pending_steps == 0


# ------------------------------------------------------------------ tool calls


@pytest.mark.parametrize("stream", STREAM_MODES)
async def test_parallel_tool_calls(fake: FakeOpenAI, sdk: AsyncOpenAI, stream: bool) -> None:
    add = {"title": "Buy milk — 2 litres", "due": "2025-01-31", "notes": 'say "please"'}
    fake.script(
        tool_calls(
            call("add_todo", add),
            call("list_todos", {"status": "open"}),
            call("complete_todo", {"id": 7}, id="call_custom"),
        )
    )

    if stream:
        chunks = await collect(sdk)
        calls = [streamed_calls(chunks)[i] for i in range(3)]
        assert finish_reasons(chunks) == ["tool_calls"]
        # Long arguments arrive in several fragments, after the chunk naming the call.
        fragments = [
            d
            for c in chunks
            if c.choices
            for d in c.choices[0].delta.tool_calls or []
            if d.index == 0
        ]
        assert fragments[0].id == "call_1"
        assert fragments[0].function is not None
        assert fragments[0].function.name == "add_todo"
        assert len(fragments) > 3
        assert all(f.id is None for f in fragments[1:])
    else:
        answer = await sdk.chat.completions.create(model="m", messages=MESSAGES)
        assert answer.choices[0].finish_reason == "tool_calls"
        assert answer.choices[0].message.content is None
        calls = [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
            for c in answer.choices[0].message.tool_calls or []
            if c.type == "function"
        ]

    assert [(c["id"], c["name"]) for c in calls] == [
        ("call_1", "add_todo"),
        ("call_2", "list_todos"),
        ("call_custom", "complete_todo"),
    ]
    assert calls[0]["arguments"] == json.dumps(add, separators=(",", ":"), ensure_ascii=False)
    assert json.loads(calls[0]["arguments"]) == add
    assert json.loads(calls[1]["arguments"]) == {"status": "open"}


async def test_call_ids_keep_counting_across_answers(fake: FakeOpenAI, sdk: AsyncOpenAI) -> None:
    fake.script(tool_calls(call("list_todos")), tool_calls(call("list_todos")))

    first = await sdk.chat.completions.create(model="m", messages=MESSAGES)
    second = await sdk.chat.completions.create(model="m", messages=MESSAGES)

    ids = [(a.choices[0].message.tool_calls or [])[0].id for a in (first, second)]
    assert ids == ["call_1", "call_2"]


@pytest.mark.parametrize("stream", STREAM_MODES)
async def test_malformed_arguments_arrive_as_the_raw_string(
    fake: FakeOpenAI, sdk: AsyncOpenAI, stream: bool
) -> None:
    broken = '{"title": "milk", "due": '
    fake.script(tool_calls(call("add_todo", broken), text="Let me add that."))

    if stream:
        chunks = await collect(sdk)
        assert streamed_calls(chunks)[0]["arguments"] == broken
        assert streamed_text(chunks) == "Let me add that."
    else:
        answer = await sdk.chat.completions.create(model="m", messages=MESSAGES)
        message = answer.choices[0].message
        assert message.content == "Let me add that."
        tool_call = (message.tool_calls or [])[0]
        assert tool_call.type == "function"
        assert tool_call.function.arguments == broken


async def test_a_callable_step_answers_from_the_request(fake: FakeOpenAI, sdk: AsyncOpenAI) -> None:
    def agent_turn(body: dict[str, Any]) -> Any:
        if body["messages"][-1]["role"] == "tool":
            return reply(f"The tool said {body['messages'][-1]['content']}.")
        return tool_calls(call("list_todos"))

    fake.default = agent_turn

    first = await sdk.chat.completions.create(model="m", messages=MESSAGES)
    tool_call = (first.choices[0].message.tool_calls or [])[0]
    second = await sdk.chat.completions.create(
        model="m",
        messages=[
            *MESSAGES,
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": tool_call.id,
                        "type": "function",
                        "function": {"name": "list_todos", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": tool_call.id, "content": "no todos"},
        ],
    )

    assert second.choices[0].message.content == "The tool said no todos."
    assert fake.last_messages()[-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "no todos",
    }


async def test_a_failing_callable_step_answers_500_and_is_kept(
    fake: FakeOpenAI, sdk: AsyncOpenAI
) -> None:
    def broken(body: dict[str, Any]) -> Any:
        raise KeyError("oops")

    fake.script(broken)

    with pytest.raises(openai.InternalServerError):
        await sdk.chat.completions.create(model="m", messages=MESSAGES)
    assert [type(e) for e in fake.errors] == [KeyError]


# ------------------------------------------------------------------ failures


@pytest.mark.parametrize("stream", STREAM_MODES)
async def test_429_with_retry_after(fake: FakeOpenAI, sdk: AsyncOpenAI, stream: bool) -> None:
    fake.script(error(429, message="Slow down", headers={"Retry-After": "1"}))

    with pytest.raises(openai.RateLimitError) as caught:
        await sdk.chat.completions.create(model="m", messages=MESSAGES, stream=stream)

    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.code == "rate_limit_exceeded"
    assert "Slow down" in caught.value.message
    assert fake.requests_count == 1  # max_retries=0: asked once


@pytest.mark.parametrize("status", [500, 503])
async def test_server_errors(fake: FakeOpenAI, sdk: AsyncOpenAI, status: int) -> None:
    fake.script(error(status))

    with pytest.raises(openai.InternalServerError) as caught:
        await sdk.chat.completions.create(model="m", messages=MESSAGES)

    assert caught.value.status_code == status


@pytest.mark.parametrize("stream", STREAM_MODES)
async def test_answer_slower_than_the_client_timeout(fake: FakeOpenAI, stream: bool) -> None:
    fake.script(delay(1.0, then=reply("too late")), "on time")
    async with AsyncOpenAI(
        base_url=fake.base_url, api_key="k", max_retries=0, timeout=0.2
    ) as impatient:
        with pytest.raises(openai.APITimeoutError):
            await impatient.chat.completions.create(model="m", messages=MESSAGES, stream=stream)

        # The fake is not stuck on the abandoned request.
        answer = await impatient.chat.completions.create(model="m", messages=MESSAGES)
    assert answer.choices[0].message.content == "on time"


async def test_hang_never_answers(fake: FakeOpenAI) -> None:
    fake.script(hang())
    async with AsyncOpenAI(
        base_url=fake.base_url, api_key="k", max_retries=0, timeout=0.1
    ) as impatient:
        with pytest.raises(openai.APITimeoutError):
            await impatient.chat.completions.create(model="m", messages=MESSAGES)


@pytest.mark.parametrize("stream", STREAM_MODES)
async def test_reset_is_a_connection_error(
    fake: FakeOpenAI, sdk: AsyncOpenAI, stream: bool
) -> None:
    fake.script(reset())

    with pytest.raises(openai.APIConnectionError) as caught:
        await sdk.chat.completions.create(model="m", messages=MESSAGES, stream=stream)

    assert not isinstance(caught.value, openai.APITimeoutError)
    # The next request gets a fresh connection and a normal answer.
    answer = await sdk.chat.completions.create(model="m", messages=MESSAGES)
    assert answer.choices[0].message.content == "OK"


async def test_garbage_is_a_json_decode_error_not_an_openai_error(
    fake: FakeOpenAI, sdk: AsyncOpenAI
) -> None:
    """Worth knowing: the SDK lets json.JSONDecodeError (a ValueError) escape here."""
    fake.script(garbage())

    with pytest.raises(json.JSONDecodeError):
        await sdk.chat.completions.create(model="m", messages=MESSAGES)


async def test_garbage_without_json_content_type_comes_back_as_a_string(
    fake: FakeOpenAI, sdk: AsyncOpenAI
) -> None:
    """Also worth knowing: with a non-JSON content type the SDK returns the raw text."""
    fake.script(garbage(b"<html>Bad gateway</html>", content_type="text/html"))

    answer: object = await sdk.chat.completions.create(model="m", messages=MESSAGES)

    assert answer == "<html>Bad gateway</html>"


async def test_garbage_to_a_stream_is_an_empty_stream(fake: FakeOpenAI, sdk: AsyncOpenAI) -> None:
    """A non-SSE body yields no chunks at all: no error, no finish_reason."""
    fake.script(garbage())

    assert await collect(sdk) == []


async def test_garbage_sse_data_fails_while_iterating(fake: FakeOpenAI, sdk: AsyncOpenAI) -> None:
    fake.script(garbage(b"data: {not json\n\n", content_type="text/event-stream"))

    with pytest.raises(json.JSONDecodeError):
        await collect(sdk)


async def test_reset_mid_stream_fails_while_iterating(fake: FakeOpenAI, sdk: AsyncOpenAI) -> None:
    fake.script(reset_mid_stream(after_chunks=3, then=reply("one two three four five six")))
    received: list[ChatCompletionChunk] = []

    stream = await sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIConnectionError):
        await drain(stream, received)

    assert len(received) == 3  # the role chunk and two content chunks
    assert streamed_text(received) == "one two "


async def test_reset_mid_answer_without_streaming(fake: FakeOpenAI, sdk: AsyncOpenAI) -> None:
    fake.script(reset_mid_stream())

    with pytest.raises(openai.APIConnectionError):
        await sdk.chat.completions.create(model="m", messages=MESSAGES)


async def test_error_event_mid_stream(fake: FakeOpenAI, sdk: AsyncOpenAI) -> None:
    fake.script(stream_error(after_chunks=2, message="overloaded"))
    received: list[ChatCompletionChunk] = []

    stream = await sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIError, match="overloaded") as caught:
        await drain(stream, received)

    assert not isinstance(caught.value, openai.APIConnectionError | openai.APIStatusError)
    assert len(received) == 2


# ------------------------------------------------------------------ recording


async def test_requests_are_recorded(fake: FakeOpenAI, sdk: AsyncOpenAI) -> None:
    tools: Any = [
        {
            "type": "function",
            "function": {"name": "add_todo", "parameters": {"type": "object"}},
        }
    ]
    await sdk.chat.completions.create(model="gpt-test", messages=MESSAGES, tools=tools)
    await collect(sdk, stream_options={"include_usage": True})

    first, second = fake.requests
    assert fake.requests_count == 2
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == "Bearer test-key"
    assert first.body["model"] == "gpt-test"
    assert first.messages == MESSAGES
    assert first.tool_names == ["add_todo"]
    assert not first.stream
    assert second.stream
    assert second.body["stream_options"] == {"include_usage": True}
    assert fake.last_messages() == MESSAGES
    assert fake.last_request is second
    assert second.first_byte_at is not None
    fake.wait_finished(second)  # noted a moment after the client has read [DONE]
    assert second.finished_at is not None

    fake.script("left over")
    fake.clear()
    assert fake.requests == []
    assert fake.pending_steps == 0
    with pytest.raises(LookupError):
        fake.last_messages()


async def test_latency_and_chunk_interval() -> None:
    with FakeOpenAI(latency_s=0.2, chunk_interval_s=0.02) as fake:
        fake.script(reply("a b c d e"))
        async with AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as sdk:
            chunks = await collect(sdk)

    record = fake.requests[0]
    assert record.first_byte_at is not None
    assert record.finished_at is not None
    assert record.first_byte_at - record.received_at >= 0.2
    # role + 5 words + finish + [DONE]: 7 pauses between 8 events.
    assert record.finished_at - record.first_byte_at >= 7 * 0.02
    assert streamed_text(chunks) == "a b c d e"


async def test_many_concurrent_slow_requests() -> None:
    with FakeOpenAI(latency_s=0.2) as fake:
        fake.default = lambda body: reply(f"echo {body['messages'][-1]['content']}")
        async with AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as sdk:

            async def ask(i: int) -> str | None:
                answer = await sdk.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": str(i)}]
                )
                return answer.choices[0].message.content

            answers = await asyncio.gather(*(ask(i) for i in range(100)))

    assert answers == [f"echo {i}" for i in range(100)]
    assert fake.requests_count == 100
    # Served concurrently, not one after another: many were open at the same moment.
    spans = [(r.received_at, r.finished_at or r.received_at) for r in fake.requests]
    most_open = max(sum(1 for start, end in spans if start <= moment < end) for moment, _ in spans)
    assert most_open >= 10


def test_blocking_callers_do_not_stall_it(fake: FakeOpenAI) -> None:
    """The fake runs its own loop in a thread: a synchronous client works from test code."""
    fake.script("from a blocking client")
    sdk = openai.OpenAI(base_url=fake.base_url, api_key="k", max_retries=0, timeout=2)

    answer = sdk.chat.completions.create(model="m", messages=MESSAGES)

    assert answer.choices[0].message.content == "from a blocking client"
    assert fake.wait_for_requests(1, timeout=1)[0].messages == MESSAGES
    sdk.close()


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_embeddings_answer_one_vector_per_input(fake: FakeOpenAI, sdk: AsyncOpenAI) -> None:
    texts = ["Park the car in the garage", "Where does the vehicle go?", "Buy oat milk"]
    answer = await sdk.embeddings.create(model="embed-test", input=texts)
    car, vehicle, milk = (item.embedding for item in answer.data)
    assert [len(v) for v in (car, vehicle, milk)] == [64, 64, 64]
    assert _cosine(car, vehicle) > 0.4 > _cosine(car, milk)
    assert answer.model == "embed-test"
    # The SDK asks for base64 unless told otherwise; plain floats are the same vectors.
    assert fake.embedding_requests[0].body["encoding_format"] == "base64"
    plain = await sdk.embeddings.create(model="embed-test", input=texts, encoding_format="float")
    assert plain.data[0].embedding == pytest.approx(car, abs=1e-6)
    assert fake.embedded_inputs() == texts * 2
    assert fake.requests == []  # chat completions are recorded apart


async def test_embeddings_dimensions_and_scripted_failures(
    fake: FakeOpenAI, sdk: AsyncOpenAI
) -> None:
    fake.embedding_dimensions = 16
    fake.script_embeddings(error(500), hang(), vectors(dimensions=8))
    with pytest.raises(openai.InternalServerError):
        await sdk.embeddings.create(model="m", input="car")
    with pytest.raises(openai.APITimeoutError):
        await sdk.embeddings.create(model="m", input="car", timeout=0.3)
    assert len((await sdk.embeddings.create(model="m", input="car")).data[0].embedding) == 8
    assert len((await sdk.embeddings.create(model="m", input="car")).data[0].embedding) == 16
    asked = await sdk.embeddings.create(model="m", input="car", dimensions=4)
    assert len(asked.data[0].embedding) == 4
    fake.embeddings_default = error(503)
    with pytest.raises(openai.InternalServerError):
        await sdk.embeddings.create(model="m", input="car")
