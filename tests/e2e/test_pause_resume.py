"""Pause, weight update, resume, end to end with the official openai SDK (issue 6, item 7).

An agent's streaming and non-streaming requests are paused mid-generation through ``/v1/rollout/pause``
(``ProxyClient``), the engine's weights are updated (``/update_weights_from_disk`` with a new ``weight_version``: the
proxy's pause already aborted its streams, so no engine-side pause is needed and the update does not wait), and
generation resumes through ``/v1/rollout/resume``. The agents see complete answers; the trajectory shows the version
switch at the first token of the continuation. The engine is slow (10 tokens/s of mock time); the tests wait for
engine state, never for wall-clock time.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
import trio
import trio.testing

from proxy.client import ProxyClient

WORDS = " ".join(f"w{i}" for i in range(16))
MESSAGES = [{"role": "user", "content": "count"}]
NO_THINKING = {"enable_thinking": False}
TOKENS = {"chat_template_kwargs": NO_THINKING, "return_token_ids": True}


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.02)


async def engine_tokens(engine: Any, count: int, requests: int) -> None:
    await engine.wait_until(
        lambda: sum(len(state.output_ids) >= count for state in engine.active_requests()) >= requests
    )


def generated_versions(segment: dict[str, Any]) -> list[str | None]:
    return [version for version, bit in zip(segment["weight_versions"], segment["loss_mask"]) if bit]


async def test_sdk_streaming_and_non_streaming_answers_survive_pause_weight_update_and_resume(
    start_proxy, mock_clock
) -> None:
    proxy = await start_proxy(
        script=[{"session": "plain", "output": WORDS}, {"session": "live", "output": WORDS}],
        engine={"token_rate": 10.0}, partial_rollout=True, record_token_versions=True,
    )
    client = proxy.async_client()
    answers: dict[str, Any] = {}
    streamed: list[Any] = []

    async def plain() -> None:
        answers["plain"] = await client.chat.completions.create(
            model="m", messages=MESSAGES, extra_headers={"X-Session-Id": "plain"}, extra_body=TOKENS)

    async def live() -> None:
        stream = await client.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, extra_headers={"X-Session-Id": "live"}, extra_body=TOKENS)
        async with stream:
            async for chunk in stream:
                streamed.append(chunk)

    async with ProxyClient(proxy.url) as rollout, trio.open_nursery() as nursery:
        nursery.start_soon(plain)
        nursery.start_soon(live)
        await engine_tokens(proxy.engine, 5, requests=2)
        paused = await rollout.pause()
        assert (paused["aborted"], paused["waiting"], paused["state"]) == (2, 2, "PAUSED")
        seen = len(streamed)
        assert seen > 1  # the stream was open and showing tokens before the pause
        # The trainer updates the weights. Nothing runs upstream (the pause returned), so no engine pause is needed.
        async with httpx.AsyncClient(timeout=None) as engine_http:
            update = await engine_http.post(proxy.engine_handle.url + "/update_weights_from_disk",
                                            json={"model_path": "/ckpt/step-7", "weight_version": "step-7"})
        assert update.status_code == 200 and update.json()["success"] is True
        await trio.sleep(20)  # a long update: the stream stays open and silent
        assert len(streamed) == seen and (await rollout.pause_state()).state == "PAUSED"
        resumed = await rollout.resume(weight_version="step-7")
        assert (resumed["admitted"], resumed["epoch"], resumed["weight_version"]) == (2, 1, "step-7")
    await client.close()

    # The agents saw complete answers.
    message = answers["plain"].choices[0].message
    assert (message.content, answers["plain"].choices[0].finish_reason) == (WORDS, "stop")
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == WORDS
    assert [c.choices[0].finish_reason for c in streamed if c.choices][-1] == "stop"
    # Each answer's tokens switch version at the first token of its continuation, where the engine says.
    streamed_versions = [v for c in streamed for v in (c.model_extra or {}).get("weight_versions") or []]
    shown = {"plain": answers["plain"].model_extra["weight_versions"], "live": streamed_versions}
    async with ProxyClient(proxy.url) as rollout:
        for session in ("plain", "live"):
            first, second = proxy.requests_of(session)
            kept = second.input_len - first.input_len
            assert second.input_ids[first.input_len:] == first.output_ids[:kept]
            expected = ["default"] * kept + ["step-7"] * len(second.output_ids)
            assert list(first.token_versions[:kept]) + list(second.token_versions) == expected
            assert shown[session] == expected
            await rollout.finalize_session(session)
            (segment,) = await rollout.read_trajectory(session_id=session)
            assert generated_versions(segment) == expected
        assert (await rollout.pause_state()).in_flight == 0


async def test_sdk_stream_without_partial_rollout_ends_with_generation_restarted_and_a_retry_succeeds(
    start_proxy, mock_clock
) -> None:
    proxy = await start_proxy(script=[{"session": "r", "output": WORDS}, {"session": "r", "output": WORDS}],
                              engine={"token_rate": 10.0}, record_token_versions=True)
    client = proxy.async_client()
    caught: list[openai.APIError] = []
    received: list[Any] = []

    async def live() -> None:
        stream = await client.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, extra_headers={"X-Session-Id": "r"}, extra_body=TOKENS)
        try:
            async with stream:
                async for chunk in stream:
                    received.append(chunk)
        except openai.APIError as exc:
            caught.append(exc)

    async with ProxyClient(proxy.url) as rollout, trio.open_nursery() as nursery:
        nursery.start_soon(live)
        await engine_tokens(proxy.engine, 5, requests=1)
        await rollout.pause()
        await rollout.resume(weight_version="v2")
    # The tokens already streamed cannot be taken back: the stream ends with an error the SDK raises.
    (error,) = caught
    assert error.code == "generation_restarted" and received
    # The agent retries the step: it is generated from scratch under one version.
    retry = await client.chat.completions.create(
        model="m", messages=MESSAGES, extra_headers={"X-Session-Id": "r"}, extra_body=TOKENS)
    await client.close()
    assert retry.choices[0].message.content == WORDS
    assert set(retry.model_extra["weight_versions"]) == {"default"}  # the engine was not relabelled
    (segment,) = await proxy.segments("r")
    assert segment["num_turns"] == 1
