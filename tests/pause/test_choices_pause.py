"""A pause during an ``n > 1`` request: every choice is a generation of its own, so the pause aborts each one at a
token boundary, the gate counts each, and after resume each continues (partial rollout) or restarts (without it);
the client still gets one answer with every choice whole, and the session holds one step per choice."""

from __future__ import annotations

import pytest
import trio

from tests.pause.harness import (
    MESSAGES,
    NO_THINKING,
    engine_idle,
    generated_at_least,
    generated_versions,
    sse_payloads,
)

SLOW = {"token_rate": 10.0}
#: three distinct scripted answers of a few dozen tokens each
ANSWERS = [" ".join(f"{letter}{i}" for i in range(14)) for letter in "xyz"]


async def test_a_pause_cuts_every_choice_and_each_continues_after_resume(start_stack, mock_clock) -> None:
    stack = await start_stack(script=[{"session": "p", "output": answer} for answer in ANSWERS], engine=SLOW,
                              partial_rollout=True, record_token_versions=True)
    results: dict = {}

    async def chat() -> None:
        results["chat"] = await stack.chat("p", n=3)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(chat)
        await generated_at_least(stack.engine, 4, requests=3)
        paused = (await stack.post("/v1/rollout/pause")).json()
        assert paused["aborted"] == 3  # each choice is a gate member
        assert stack.gate.statistics().in_flight == 0
        await engine_idle(stack.engine)
        stack.engine.update_weight_version("v2", abort_all_requests=False)
        await stack.post("/v1/rollout/resume", {"weight_version": "v2"})
    answer = results["chat"].json()
    assert results["chat"].status_code == 200
    choices = answer["choices"]
    assert [choice["index"] for choice in choices] == [0, 1, 2]
    assert sorted(choice["message"]["content"] for choice in choices) == sorted(ANSWERS)
    records = stack.requests_of("p")
    assert len(records) == 6
    prompt = answer["prompt_token_ids"]
    first, continuations = records[:3], records[3:]
    assert all(record.finish_reason["type"] == "abort" for record in first)
    for choice in choices:
        ids, versions = choice["token_ids"], choice["weight_versions"]
        # Its own continuation: the prompt plus exactly the tokens this choice kept.
        (cut,) = [record for record in first if tuple(ids[: len(record.output_ids)]) == record.output_ids]
        (rest,) = [record for record in continuations if record.input_ids == tuple(prompt) + cut.output_ids]
        assert tuple(ids) == cut.output_ids + rest.output_ids
        assert versions == ["default"] * len(cut.output_ids) + ["v2"] * len(rest.output_ids)
    assert answer["usage"]["completion_tokens"] == sum(len(choice["token_ids"]) for choice in choices)
    segments = await stack.segments("p")
    assert len(segments) == 3
    assert sorted(generated_versions(segment) for segment in segments) == sorted(
        choice["weight_versions"] for choice in choices
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_without_partial_rollout_every_choice_restarts_under_the_new_version(
    start_stack, mock_clock, stream: bool
) -> None:
    stack = await start_stack(script=[{"session": "r", "output": answer} for answer in ANSWERS], engine=SLOW)
    results: dict = {}

    async def chat() -> None:
        results["chat"] = await stack.chat("r", n=3, stream=stream)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(chat)
        await generated_at_least(stack.engine, 4, requests=3)
        assert (await stack.post("/v1/rollout/pause")).json()["aborted"] == 3
        await engine_idle(stack.engine)
        stack.engine.update_weight_version("v2", abort_all_requests=False)
        await stack.post("/v1/rollout/resume", {"weight_version": "v2"})
    response = results["chat"]
    assert response.status_code == 200
    if stream:
        # The choices had streamed tokens that a restart cannot take back: one error event ends the answer.
        events = sse_payloads(response.content)
        assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
        assert events[-2]["error"]["code"] == "generation_restarted"
        await engine_idle(stack.engine)
        assert (await stack.get("/session/r")).json()["steps"] == 0
        return
    answer = response.json()
    choices = answer["choices"]
    assert [choice["index"] for choice in choices] == [0, 1, 2]
    # Each choice restarted from scratch: one request of the new version, from the prompt alone.
    records = stack.requests_of("r")
    assert len(records) == 6 and all(record.finish_reason["type"] == "abort" for record in records[:3])
    restarts = records[3:]
    assert all(record.input_ids == tuple(answer["prompt_token_ids"]) for record in restarts)
    assert sorted(tuple(choice["token_ids"]) for choice in choices) == sorted(r.output_ids for r in restarts)
    assert all(set(choice["weight_versions"]) == {"v2"} for choice in choices)
    assert (await stack.get("/session/r")).json()["steps"] == 3
