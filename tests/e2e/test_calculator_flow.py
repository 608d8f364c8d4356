"""The calculator flow of the request-flow seed (two tool calls, then the answer) through the official openai SDK,
with the exact token spans and loss masks of the finalized trajectory, for Qwen3 (JSON tool calls, sync SDK in a
thread) and Qwen3.5 (XML tool calls, async SDK on trio), including the client-supplied ``response_mask``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.harness import CALCULATOR_TOOLS, assistant_echo, generated_ids

SYSTEM = "You are a helpful calculator assistant with access to calculator tools."
USER = "Please calculate 5 plus 3, and then multiply the result by 2."
ANSWER = "5 plus 3 equals 8. Multiplying 8 by 2 gives 16."


def qwen3_outputs() -> list[str]:
    def call(name: str, a: int, b: int) -> str:
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": {"a": a, "b": b}}) + "\n</tool_call>"

    return [
        "<think>\nFirst add 5 and 3.\n</think>\n\nI'll calculate that for you.\n" + call("add", 5, 3),
        "<think>\nNow multiply 8 by 2.\n</think>\n\nContinuing the calculation.\n" + call("multiply", 8, 2),
        "<think>\nDone.\n</think>\n\n" + ANSWER,
    ]


def qwen3_5_outputs() -> list[str]:
    def call(name: str, a: int, b: int) -> str:
        return (
            f"<tool_call>\n<function={name}>\n<parameter=a>\n{a}\n</parameter>\n<parameter=b>\n{b}\n</parameter>\n"
            "</function>\n</tool_call>"
        )

    # The Qwen3.5 prompt ends inside <think>: outputs start in the reasoning.
    return [
        "First add 5 and 3.\n</think>\n\nI'll calculate that for you.\n\n" + call("add", 5, 3),
        "Now multiply 8 by 2.\n</think>\n\nContinuing the calculation.\n\n" + call("multiply", 8, 2),
        "Done.\n</think>\n\n" + ANSWER,
    ]


def fragment(tito: Any, checkpoint: list[int], history: list[dict], new: list[dict]) -> list[int]:
    """The TITO fragment the proxy appends after the checkpoint for the new messages (what the agent's mask
    must cover)."""
    result = tito.encode_incremental(
        checkpoint, new, prior_messages=history, tools=CALCULATOR_TOOLS, chat_template_kwargs={}
    )
    assert result.ok, result
    return list(result.ids)


async def run_calculator(
    proxy: Any, session: str, outputs: list[str], *, use_async: bool, proxy_records_versions: bool = False
) -> None:
    tito = proxy.tito
    messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
    expected_ids = tito.encode_full(messages, CALCULATOR_TOOLS, {})
    expected_mask = [0] * len(expected_ids)
    expected_logprobs: list[float] = [0.0] * len(expected_ids)
    expected_versions: list[str | None] = [None] * len(expected_ids)
    masks: list[list[int] | None] = [None]
    results = ["8", "16"]

    async def create(extra: dict) -> Any:
        kwargs = dict(
            model="calculator", messages=messages, tools=CALCULATOR_TOOLS, temperature=0.7, top_p=0.9,
            max_tokens=512, logprobs=True, extra_headers={"X-Session-Id": session, "X-Instance-Id": "demo-1234"},
            extra_body={"return_token_ids": True, **extra},
        )
        if use_async:
            async with proxy.async_client() as client:
                return await client.chat.completions.create(**kwargs)
        return await proxy.in_thread(lambda client: client.chat.completions.create(**kwargs))

    for turn, output in enumerate(outputs):
        extra = {} if masks[-1] is None else {"response_mask": masks[-1]}
        completion = await create(extra)
        choice = completion.choices[0]
        body = completion.model_extra
        gen = generated_ids(tito, output)
        # The prompt sent upstream is exactly the previous checkpoint plus the fragment (TITO).
        assert body["prompt_token_ids"] == expected_ids
        assert proxy.requests_of(session)[-1].input_ids == tuple(expected_ids)
        assert body["token_ids"] == gen
        assert len(body["token_logprobs"]) == len(gen)
        assert [entry.logprob for entry in choice.logprobs.content] == body["token_logprobs"][:-1]
        expected_ids = expected_ids + gen
        expected_mask = expected_mask + [1] * len(gen)
        expected_logprobs = expected_logprobs + body["token_logprobs"]
        expected_versions = expected_versions + body["weight_versions"]
        assert body["weight_versions"] == ["default"] * len(gen)
        if turn < 2:
            assert choice.finish_reason == "tool_calls"
            call = choice.message.tool_calls[0]
            assert call.function.name == ("add", "multiply")[turn]
            assert json.loads(call.function.arguments) == [{"a": 5, "b": 3}, {"a": 8, "b": 2}][turn]
            assert choice.message.content == ["I'll calculate that for you.", "Continuing the calculation."][turn]
            tool = {"role": "tool", "content": results[turn], "tool_call_id": call.id}
            frag = fragment(tito, expected_ids, messages + [assistant_echo(choice.message)], [tool])
            if turn == 0:
                # A mask of the wrong length is refused with 422 and records nothing.
                messages.extend([assistant_echo(choice.message), tool])
                wrong = await proxy.chat(session, {"messages": messages, "tools": CALCULATOR_TOOLS,
                                                   "response_mask": [0] * (len(frag) + 1)})
                assert wrong.status_code == 422, wrong.text
                error = wrong.json()["error"]
                assert error["code"] == "response_mask_mismatch"
                assert (error["expected"], error["got"]) == (len(frag), len(frag) + 1)
                view = await proxy.debug(session)
                assert (view["steps"], view["in_flight"]) == (1, 0)
                mask = [0] * len(frag)  # the seed's rule: tool output tokens are 0
            else:
                messages.extend([assistant_echo(choice.message), tool])
                # Any client mask is recorded as given (here: every other fragment token trained).
                mask = [index % 2 for index in range(len(frag))]
            masks.append(mask)
            expected_ids = expected_ids + frag
            expected_mask = expected_mask + mask
            expected_logprobs = expected_logprobs + [0.0] * len(frag)
            expected_versions = expected_versions + [None] * len(frag)
        else:
            assert choice.finish_reason == "stop"
            assert choice.message.content == ANSWER
            assert not choice.message.tool_calls

    segments = await proxy.segments(session)
    assert len(segments) == 1
    segment = segments[0]
    assert segment["token_ids"] == expected_ids
    assert segment["loss_mask"] == expected_mask
    assert segment["logprobs"] == pytest.approx(expected_logprobs)
    assert segment["num_turns"] == 3 and segment["boundary_reason"] == "session_start"
    assert segment["instance_id"] == "demo-1234" and segment["parent_traj_id"] == session
    if proxy_records_versions:
        assert segment["weight_versions"] == expected_versions
    # The recorded conversation is the one the agent saw, and decoding the segment gives its text.
    assert tito.decode(segment["token_ids"]).endswith(ANSWER + "<|im_end|>")


async def test_calculator_flow_qwen3_sync_sdk_exact_spans_and_masks(start_proxy) -> None:
    outputs = qwen3_outputs()
    proxy = await start_proxy(
        model="qwen3", script=[{"session": "calc-qwen3", "output": o} for o in outputs], record_token_versions=True,
    )
    await run_calculator(proxy, "calc-qwen3", outputs, use_async=False, proxy_records_versions=True)


async def test_calculator_flow_qwen3_5_async_sdk_xml_tool_calls(start_proxy) -> None:
    outputs = qwen3_5_outputs()
    proxy = await start_proxy(model="qwen3_5", script=[{"session": "calc-q35", "output": o} for o in outputs])
    await run_calculator(proxy, "calc-q35", outputs, use_async=True)
