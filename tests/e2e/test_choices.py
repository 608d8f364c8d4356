"""``n > 1`` end to end (issue 14): best-of-N inside one request, through the official openai SDK and raw HTTP.

Each choice is a generation of its own (its own upstream request, committed on its own), so the session's trie holds
one assistant child of the prompt per distinct choice; the answer puts the choices together as SGLang's OpenAI server
does (``serving_chat.py``): ``choices[i]`` with ``index`` i, one ``id``, usage with the prompt counted once, a stream
multiplexing the choices' chunks with one usage chunk and one ``[DONE]``. Also here: the sampling parameters each
choice sends upstream (``logit_bias``, per-choice seeds), stop strings, and the OpenAI parameters refused with
``unsupported_parameter``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
import trio

from proxy.parsing import tool_call_id
from tests.e2e.harness import CALCULATOR_TOOLS, Proxy, assistant_echo, session_headers

SYSTEM = {"role": "system", "content": "You are a careful assistant."}
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def sse_payloads(raw: bytes) -> list[Any]:
    frames = [frame[len(b"data: "):] for frame in raw.split(b"\n\n") if frame.strip()]
    return ["[DONE]" if frame == b"[DONE]" else json.loads(frame) for frame in frames]


async def settled(proxy: Proxy, session: str) -> dict[str, Any] | None:
    """The session's debug view once nothing is in flight (None: the session was never created)."""
    with trio.fail_after(10):
        while True:
            view = await proxy.debug(session)
            if view is None or view["in_flight"] == 0:
                return view
            await trio.sleep(0.01)


async def engine_idle(proxy: Proxy) -> None:
    with trio.fail_after(10):
        await proxy.engine.wait_until(lambda: not proxy.engine.active_requests())


async def test_n3_non_streaming_answers_three_indexed_choices_each_a_sibling_step_of_the_prompt(start_proxy) -> None:
    session = "n3"
    outputs = ["Answer A.", "Answer B.", "Answer C."]
    proxy = await start_proxy(
        # Every choice spends 0.3 s before its first token: the three upstream requests overlap.
        script=[{"session": session, "output": output, "latency": 0.3} for output in outputs]
        + [{"session": session, "output": "Going on from B."}],
    )
    prompt = [SYSTEM, {"role": "user", "content": "Give me an answer."}]
    async with proxy.async_client() as client:
        completion = await client.chat.completions.create(
            model="m", messages=prompt, n=3, extra_headers={"X-Session-Id": session},
            extra_body={"return_token_ids": True, **NO_THINKING},
        )
        assert [choice.index for choice in completion.choices] == [0, 1, 2]
        assert sorted(choice.message.content for choice in completion.choices) == outputs
        assert {choice.finish_reason for choice in completion.choices} == {"stop"}
        # The token extension: the one prompt at the top level, each choice's own tokens inside it.
        extra = completion.model_extra
        prompt_ids = extra["prompt_token_ids"]
        assert "token_ids" not in extra
        choice_ids = [choice.model_extra["token_ids"] for choice in completion.choices]
        assert all("prompt_token_ids" not in choice.model_extra for choice in completion.choices)
        assert all(len(choice.model_extra["weight_versions"]) == len(ids)
                   for choice, ids in zip(completion.choices, choice_ids, strict=True))
        # Usage as SGLang's UsageProcessor counts it: the prompt once, every choice's completion.
        assert completion.usage.prompt_tokens == len(prompt_ids)
        assert completion.usage.completion_tokens == sum(map(len, choice_ids))
        assert completion.usage.total_tokens == len(prompt_ids) + sum(map(len, choice_ids))
        # Three upstream requests, one per choice, with the same input.
        records = proxy.requests_of(session)
        assert len(records) == 3 and {record.input_ids for record in records} == {tuple(prompt_ids)}
        chosen = next(choice for choice in completion.choices if choice.message.content == "Answer B.")
        follow = await client.chat.completions.create(
            model="m", messages=[*prompt, assistant_echo(chosen.message), {"role": "user", "content": "Go on."}],
            extra_headers={"X-Session-Id": session}, extra_body={"return_token_ids": True, **NO_THINKING},
        )
    assert follow.choices[0].message.content == "Going on from B."
    # The chosen choice is a checkpoint like any step: the next step continues its chain.
    prefix = prompt_ids + chosen.model_extra["token_ids"]
    assert follow.model_extra["prompt_token_ids"][: len(prefix)] == prefix
    view = await settled(proxy, session)
    assert view["steps"] == 4 and view["trie"]["checkpoints"] == 4
    segments = await proxy.segments(session)
    assert sorted(len(segment["step_ids"]) for segment in segments) == [1, 1, 2]
    for segment in segments:
        assert segment["token_ids"][: len(prompt_ids)] == prompt_ids
    siblings = [segment for segment in segments if len(segment["step_ids"]) == 1]
    assert sorted(segment["token_ids"][len(prompt_ids):] for segment in siblings) == sorted(
        ids for choice, ids in zip(completion.choices, choice_ids, strict=True) if choice is not chosen
    )


async def test_n3_streaming_sdk_assembles_three_choices_with_one_usage_chunk_and_one_done(start_proxy) -> None:
    session = "n3-stream"
    outputs = ["The first answer is here.", "A second answer, longer.", "Third."]
    proxy = await start_proxy(
        script=[{"session": session, "output": output} for output in outputs * 2],
        engine={"token_rate": 40.0},  # the choices generate side by side: their chunks interleave
    )
    prompt = [SYSTEM, {"role": "user", "content": "Three answers, please."}]
    async with proxy.async_client() as client:
        stream = await client.chat.completions.create(
            model="m", messages=prompt, n=3, stream=True, stream_options={"include_usage": True},
            extra_headers={"X-Session-Id": session}, extra_body=NO_THINKING,
        )
        contents: dict[int, str] = {}
        finishes: dict[int, str] = {}
        usages = []
        async for chunk in stream:
            if chunk.usage is not None:
                usages.append(chunk.usage)
            for choice in chunk.choices:
                contents[choice.index] = contents.get(choice.index, "") + (choice.delta.content or "")
                if choice.finish_reason:
                    finishes[choice.index] = choice.finish_reason
        # The SDK's own accumulator (ChatCompletionStreamState) over the same kind of stream.
        async with client.chat.completions.stream(
            model="m", messages=prompt, n=3, stream_options={"include_usage": True},
            extra_headers={"X-Session-Id": session}, extra_body=NO_THINKING,
        ) as helper:
            final = await helper.get_final_completion()
    assert sorted(contents) == [0, 1, 2] and sorted(contents.values()) == sorted(outputs)
    assert finishes == {0: "stop", 1: "stop", 2: "stop"}
    assert len(usages) == 1
    assert [choice.index for choice in final.choices] == [0, 1, 2]
    assert sorted(choice.message.content for choice in final.choices) == sorted(outputs)
    assert final.usage.total_tokens == usages[0].total_tokens
    records = proxy.requests_of(session)[:3]
    assert usages[0].completion_tokens == sum(len(record.output_ids) for record in records)
    assert usages[0].prompt_tokens == records[0].input_len
    # Identical answers the second time: every choice refreshed its node (same prompt, same output).
    view = await settled(proxy, session)
    assert (view["steps"], view["trie"]["checkpoints"]) == (6, 3)


async def test_n3_stream_on_the_wire_multiplexes_indexed_chunks_and_ends_once(start_proxy) -> None:
    session = "n3-wire"
    outputs = [" ".join(f"{letter}{i}" for i in range(12)) for letter in "abc"]
    proxy = await start_proxy(script=[{"session": session, "output": output} for output in outputs],
                              engine={"token_rate": 60.0})
    response = await proxy.chat(session, {
        "messages": [SYSTEM, {"role": "user", "content": "go"}], "n": 3, "stream": True, **NO_THINKING,
        "stream_options": {"include_usage": True}, "return_token_ids": True,
    })
    assert response.status_code == 200
    events = sse_payloads(response.content)
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    chunks = events[:-1]
    assert len({chunk["id"] for chunk in chunks}) == 1 and len({chunk["created"] for chunk in chunks}) == 1
    usage_chunks = [chunk for chunk in chunks if "usage" in chunk]
    assert usage_chunks == [chunks[-1]] and chunks[-1]["choices"] == []
    indexed = [chunk for chunk in chunks if chunk["choices"]]
    assert all(len(chunk["choices"]) == 1 for chunk in indexed)
    order = [chunk["choices"][0]["index"] for chunk in indexed]
    by_index: dict[int, list[dict]] = {index: [c for c in indexed if c["choices"][0]["index"] == index]
                                       for index in range(3)}
    for index, own in by_index.items():
        assert own[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert [c["choices"][0]["finish_reason"] for c in own].count("stop") == 1
        assert own[-1]["choices"][0]["finish_reason"] == "stop"
        # Token extension: the prompt once (choice 0's opening chunk), each chunk's own token ids.
        assert ("prompt_token_ids" in own[0]) == (index == 0)
    # Multiplexed while generating: another choice's chunks come before choice 0 has finished.
    last_of_zero = max(position for position, index in enumerate(order) if index == 0)
    assert any(index != 0 for index in order[:last_of_zero])
    texts = {index: "".join(c["choices"][0]["delta"].get("content", "") for c in own)
             for index, own in by_index.items()}
    assert sorted(texts.values()) == sorted(outputs)
    token_ids = {index: [t for c in own for t in c.get("token_ids", [])] for index, own in by_index.items()}
    assert chunks[-1]["usage"]["completion_tokens"] == sum(map(len, token_ids.values()))
    assert chunks[-1]["usage"]["prompt_tokens"] == len(by_index[0][0]["prompt_token_ids"])


async def test_identical_outputs_of_several_choices_are_one_node_refreshed(start_proxy) -> None:
    session = "same"
    proxy = await start_proxy(script=[{"session": session, "output": "Always the same."}] * 3)
    response = await proxy.chat(session, {"messages": [SYSTEM, {"role": "user", "content": "?"}], "n": 3,
                                          **NO_THINKING})
    assert response.status_code == 200
    assert [choice["message"]["content"] for choice in response.json()["choices"]] == ["Always the same."] * 3
    view = await settled(proxy, session)
    # Three steps, one assistant node: each later choice refreshed the first one's (sessions.md, idempotent retry).
    assert (view["steps"], view["trie"]["checkpoints"]) == (3, 1)


async def test_tool_calls_of_different_choices_get_different_ids_and_an_identical_retry_the_same(start_proxy) -> None:
    session = "calls"
    output = "Adding.\n" + call("add", a=2, b=3)
    proxy = await start_proxy(script=[{"session": session, "output": output}] * 6)
    prompt = [SYSTEM, {"role": "user", "content": "2 + 3?"}]
    async with proxy.async_client() as client:
        first = await client.chat.completions.create(
            model="m", messages=prompt, tools=CALCULATOR_TOOLS, n=3, extra_headers={"X-Session-Id": session},
            extra_body=NO_THINKING,
        )
        # The retry streams: the streaming parser derives the same ids.
        stream = await client.chat.completions.create(
            model="m", messages=prompt, tools=CALCULATOR_TOOLS, n=3, stream=True,
            extra_headers={"X-Session-Id": session}, extra_body=NO_THINKING,
        )
        streamed: dict[int, list[str]] = {}
        async for chunk in stream:
            for choice in chunk.choices:
                for delta in choice.delta.tool_calls or ():
                    if delta.id:
                        streamed.setdefault(choice.index, []).append(delta.id)
    ids = [[c.id for c in choice.message.tool_calls] for choice in first.choices]
    assert [len(calls) for calls in ids] == [1, 1, 1]
    assert len({calls[0] for calls in ids}) == 3  # the same call in three choices: three ids
    # Choice 0 keeps the ids of an n = 1 request; the others add their index (proxy/parsing/tool_call_ids.py).
    assert [calls[0] for calls in ids] == [tool_call_id(session, len(prompt), 0, index) for index in range(3)]
    assert streamed == {index: calls for index, calls in enumerate(ids)}
    assert {choice.finish_reason for choice in first.choices} == {"tool_calls"}
    # Three distinct assistant messages (their ids differ): three siblings, each refreshed by the retry.
    view = await settled(proxy, session)
    assert (view["steps"], view["trie"]["checkpoints"]) == (6, 3)


async def test_a_client_that_leaves_a_stream_cancels_every_choice_and_nothing_is_committed(start_proxy) -> None:
    session = "leaver"
    words = " ".join(f"w{i}" for i in range(100))
    proxy = await start_proxy(script=[{"session": session, "output": words}] * 3, engine={"token_rate": 50.0})
    messages = [SYSTEM, {"role": "user", "content": "ramble"}]
    async with proxy.async_client() as client:
        stream = await client.chat.completions.create(
            model="m", messages=messages, n=3, stream=True, extra_headers={"X-Session-Id": session},
            extra_body=NO_THINKING,
        )
        seen: set[int] = set()
        async with stream:
            async for chunk in stream:
                seen.update(choice.index for choice in chunk.choices if choice.delta.content)
                if len(seen) == 3:
                    break
    with trio.fail_after(10):
        await proxy.engine.wait_until(lambda: len(proxy.requests_of(session)) == 3)
    records = proxy.requests_of(session)
    assert all(record.client_disconnected for record in records)
    assert all(len(record.output_ids) < 100 for record in records)
    view = await settled(proxy, session)
    assert view["steps"] == 0 and view["in_flight"] == 0
    assert proxy.handle.services.gate.statistics().in_flight == 0


async def test_a_client_that_leaves_a_non_streaming_request_cancels_every_choice(start_proxy) -> None:
    session = "leaver-plain"
    proxy = await start_proxy(script=[{"session": session, "output": "Late.", "latency": 5.0}] * 3)
    body = {"messages": [SYSTEM, {"role": "user", "content": "slow"}], "n": 3, **NO_THINKING}
    with trio.move_on_after(0.5):
        await proxy.chat(session, body)
    with trio.fail_after(10):
        await proxy.engine.wait_until(lambda: len(proxy.requests_of(session)) == 3)
    assert all(record.client_disconnected for record in proxy.requests_of(session))
    view = await settled(proxy, session)
    assert view["steps"] == 0


#: three choices: one answers at once, one has its stream cut by the engine after 0.3 s, one waits 3 s to begin
#: (the gateway set-up: every upstream request streams, so the cut is a stream cut)
RACE = [
    {"output": "Quick answer."},
    {"output": "Cut short " * 10, "drop_after": 3, "token_rate": 10.0},
    {"output": "Very slow answer.", "latency": 3.0},
]


async def test_a_failing_choice_fails_the_answer_cancels_the_rest_and_keeps_what_was_committed(start_proxy) -> None:
    session = "partial"
    proxy = await start_proxy(script=[{"session": session, **entry} for entry in RACE], worker_urls=False)
    began = trio.current_time()
    response = await proxy.chat(session, {"messages": [SYSTEM, {"role": "user", "content": "?"}], "n": 3,
                                          **NO_THINKING})
    assert trio.current_time() - began < 2.5  # answered at the failure, without waiting for the slow choice
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_unavailable"
    await engine_idle(proxy)  # the engine ends the aborted request after its (uninterruptible) first step
    slow = [record for record in proxy.requests_of(session) if record.source == "script[2]"]
    assert slow and slow[0].client_disconnected and slow[0].finish_reason["type"] == "abort"
    view = await settled(proxy, session)
    # The quick choice had committed before the failure: a real sample of the step, kept.
    assert view["steps"] == 1
    (segment,) = await proxy.segments(session)
    assert "Quick answer." in proxy.tito.decode(segment["token_ids"])


async def test_a_choice_failing_after_the_stream_opened_ends_it_with_one_error_event(start_proxy) -> None:
    session = "partial-stream"
    proxy = await start_proxy(script=[{"session": session, **entry} for entry in RACE], worker_urls=False)
    began = trio.current_time()
    response = await proxy.chat(session, {"messages": [SYSTEM, {"role": "user", "content": "?"}], "n": 3,
                                          "stream": True, **NO_THINKING})
    assert trio.current_time() - began < 2.5
    assert response.status_code == 200
    events = sse_payloads(response.content)
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    assert events[-2]["error"]["code"] == "upstream_unavailable"  # the cut stream
    assert not any("usage" in event for event in events[:-1] if isinstance(event, dict))
    chunks = [event["choices"][0] for event in events[:-2]]
    assert [chunk["index"] for chunk in chunks[:3]] == [0, 1, 2]  # the opening chunks, in index order
    quick = [chunk for chunk in chunks if "Quick" in chunk["delta"].get("content", "")]
    index = quick[0]["index"]
    # The quick choice streamed to its end (and committed); the cut one streamed a little; the slow one nothing.
    assert "".join(c["delta"].get("content", "") for c in chunks if c["index"] == index) == "Quick answer."
    assert [c["finish_reason"] for c in chunks if c["index"] == index][-1] == "stop"
    assert all(chunk["finish_reason"] is None for chunk in chunks if chunk["index"] != index)
    await engine_idle(proxy)
    slow = [record for record in proxy.requests_of(session) if record.source == "script[2]"]
    assert slow and slow[0].client_disconnected
    assert (await settled(proxy, session))["steps"] == 1


async def test_a_choice_refused_while_starting_releases_the_others(start_proxy) -> None:
    session = "limited"
    proxy = await start_proxy(script=[{"session": session, "output": f"Answer {i}.", "latency": 0.2}
                                      for i in range(5)], max_steps_per_session=2)
    body = {"messages": [SYSTEM, {"role": "user", "content": "?"}], **NO_THINKING}
    refused = await proxy.chat(session, {**body, "n": 3})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "max_steps_exceeded"
    view = await settled(proxy, session)
    assert view["steps"] == 0 and view["in_flight"] == 0
    await engine_idle(proxy)
    # All or nothing: the two choices started before the refusal were released; two choices fit now.
    accepted = await proxy.chat(session, {**body, "n": 2})
    assert accepted.status_code == 200 and len(accepted.json()["choices"]) == 2
    assert (await settled(proxy, session))["steps"] == 2


async def test_logit_bias_and_per_choice_seeds_reach_the_engine_as_sglang_sends_them(start_proxy) -> None:
    session = "sampling"
    proxy = await start_proxy()
    body = {"messages": [SYSTEM, {"role": "user", "content": "?"}], "n": 3, "seed": 7,
            "logit_bias": {"13": -100, "0151645": 2.5}, "stop": ["never-seen"], **NO_THINKING}
    response = await proxy.chat(session, body)
    assert response.status_code == 200 and len(response.json()["choices"]) == 3
    records = proxy.requests_of(session)
    assert len(records) == 3
    assert all(record.sampling.logit_bias == ((13, -100.0), (151645, 2.5)) for record in records)
    assert all(record.sampling.stop == ("never-seen",) for record in records)
    assert sorted(record.sampling.sampling_seed for record in records) == [7, 8, 9]
    # A token id outside the vocabulary: SGLang's SamplingParams.verify refuses it (400), and so does the engine.
    bad = await proxy.chat(session, {**body, "n": 1, "logit_bias": {"999999999": 1}})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "upstream_rejected"
    assert "logit_bias" in bad.json()["error"]["message"]


@pytest.mark.parametrize("stream", [False, True])
async def test_stop_strings_end_every_choice_and_are_cut_from_its_content(start_proxy, stream: bool) -> None:
    session = f"stop-{stream}"
    proxy = await start_proxy(script=[{"session": session, "output": f"Part {i} STOP never shown"}
                                      for i in range(3)])
    async with proxy.async_client() as client:
        kwargs = {"model": "m", "messages": [SYSTEM, {"role": "user", "content": "?"}], "n": 3, "stop": ["STOP"],
                  "extra_headers": {"X-Session-Id": session}, "extra_body": NO_THINKING}
        if stream:
            async with client.chat.completions.stream(**kwargs) as helper:
                completion = await helper.get_final_completion()
        else:
            completion = await client.chat.completions.create(**kwargs)
    assert sorted(choice.message.content for choice in completion.choices) == ["Part 0", "Part 1", "Part 2"]
    assert {choice.finish_reason for choice in completion.choices} == {"stop"}
    assert all(record.finish_reason == {"type": "stop", "matched": "STOP"} for record in proxy.requests_of(session))


@pytest.mark.parametrize(
    ("extra", "param"),
    [({"n": 17}, "n"), ({"store": True}, "store"), ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
     ({"modalities": ["text", "audio"]}, "modalities"), ({"service_tier": "flex"}, "service_tier"),
     ({"prediction": {"type": "content", "content": "x"}}, "prediction"),
     ({"web_search_options": {}}, "web_search_options"), ({"verbosity": "low"}, "verbosity"),
     ({"stream": True, "stream_options": {"continuous_usage_stats": True}}, "stream_options.continuous_usage_stats")],
)
async def test_unsupported_openai_parameters_are_400_naming_them_and_record_nothing(
    start_proxy, extra: dict, param: str
) -> None:
    proxy = await start_proxy()
    session = "refused-" + param
    async with proxy.async_client() as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], extra_headers={"X-Session-Id": session},
                extra_body=extra,
            )
    error = info.value.body
    assert (error["code"], error["param"]) == ("unsupported_parameter", param)
    assert await proxy.debug(session) is None and not proxy.requests_of(session)


async def test_reasoning_effort_none_renders_the_prompt_without_thinking_as_sglang(start_proxy) -> None:
    session = "effort"
    proxy = await start_proxy(script=[{"session": session, "output": "Plain."}] * 2)
    messages = [{"role": "user", "content": "hi"}]
    async with httpx.AsyncClient(timeout=30) as http:
        for body in ({"reasoning_effort": "none"}, {"chat_template_kwargs": {"enable_thinking": False}}):
            response = await http.post(proxy.url + "/v1/chat/completions", headers=session_headers(session),
                                       json={"messages": messages, **body})
            assert response.status_code == 200
    effort, explicit = proxy.requests_of(session)
    assert effort.input_ids == explicit.input_ids  # Qwen3's empty think block: thinking off
    assert "<think>\n\n</think>" in proxy.tito.decode(list(effort.input_ids))


@pytest.mark.parametrize("stream", [False, True])
async def test_an_idempotent_repeat_of_an_n3_request_replays_every_choice_without_generating(
    start_proxy, stream: bool
) -> None:
    session = f"idem-{stream}"
    proxy = await start_proxy(script=[{"session": session, "output": f"Answer {i}."} for i in range(6)])
    body = {"messages": [SYSTEM, {"role": "user", "content": "?"}], "n": 3, "stream": stream, **NO_THINKING}
    key = {"Idempotency-Key": "n3-once"}
    first = await proxy.chat(session, body, **key)
    repeat = await proxy.chat(session, body, **key)
    assert first.status_code == repeat.status_code == 200
    assert repeat.headers["Idempotent-Replayed"] == "true"
    assert repeat.content == first.content  # every choice, byte for byte
    assert len(proxy.requests_of(session)) == 3  # the repeat generated nothing
    assert (await settled(proxy, session))["steps"] == 3
