"""Per-token weight versions across a real pause and weight update (spec 7): each token carries the version the
engine generated it under; ``--record-token-versions`` stores them; ``--mask-nonlast-version-tokens`` masks, at export,
the generated tokens whose version is not the segment's last (their logprobs stay)."""

from __future__ import annotations

import httpx
import trio

from tests.pause.harness import WORDS, engine_idle, generated_at_least, generated_versions

SLOW = {"token_rate": 10.0}


async def test_a_weight_update_inside_a_pause_switches_versions_at_the_cut_and_masks_the_stale_tokens(
    start_stack, mock_clock
) -> None:
    stack = await start_stack(script=[{"session": "v", "output": WORDS}], engine=SLOW, partial_rollout=True,
                              record_token_versions=True, mask_nonlast_version_tokens=True)
    results: dict = {}

    async def chat() -> None:
        results["chat"] = await stack.chat("v")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(chat)
        await generated_at_least(stack.engine, 6)
        paused = (await stack.post("/v1/rollout/pause")).json()
        # The trainer's update: SGLang's writer lock waits for the aborted request's last decode step.
        async with httpx.AsyncClient(timeout=None) as client:
            update = await client.post(stack.engine_handle.url + "/update_weights_from_disk",
                                       json={"model_path": "/ckpt/step-1", "weight_version": "step-1"})
        assert update.json()["success"] is True
        await stack.post("/v1/rollout/resume", {"weight_version": "step-1"})
    answer = results["chat"].json()
    assert answer["choices"][0]["message"]["content"] == WORDS
    first, second = stack.requests_of("v")
    kept = paused["tokens_kept"]
    assert second.input_ids == first.input_ids + first.output_ids[:kept]
    # Every token carries the version the engine generated it under (its own per-token record).
    engine_versions = list(first.token_versions[:kept]) + list(second.token_versions)
    assert engine_versions == ["default"] * kept + ["step-1"] * len(second.output_ids)
    assert answer["weight_versions"] == engine_versions
    (segment,) = await stack.segments("v")
    assert generated_versions(segment) == engine_versions
    (record,) = segment["steps"]
    context = record["concat_context_token_count"]
    assert record["concat_response_mask"][context:] == [0] * kept + [1] * len(second.output_ids)
    assert segment["loss_mask"][context:] == record["concat_response_mask"][context:]
    # Masked, not dropped: the stale tokens keep their logprobs.
    assert segment["logprobs"][context:] == answer["token_logprobs"]
    await engine_idle(stack.engine)


async def test_without_recording_no_versions_are_exported_and_nothing_is_masked(start_stack, mock_clock) -> None:
    stack = await start_stack(script=[{"session": "n", "output": WORDS}], engine=SLOW, partial_rollout=True)
    results: dict = {}

    async def chat() -> None:
        results["chat"] = await stack.chat("n")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(chat)
        await generated_at_least(stack.engine, 6)
        await stack.post("/v1/rollout/pause")
        await engine_idle(stack.engine)
        stack.engine.update_weight_version("v2", abort_all_requests=False)
        await stack.post("/v1/rollout/resume", {"weight_version": "v2"})
    (segment,) = await stack.segments("n")
    assert "weight_versions" not in segment
    (record,) = segment["steps"]
    assert all(record["concat_response_mask"][record["concat_context_token_count"]:])
    # The per-step record keeps its versions (spec 5.6's concat_versions) whatever the flag.
    assert set(generated_versions(segment)) == {"default", "v2"}
