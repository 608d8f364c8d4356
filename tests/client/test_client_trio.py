"""ProxyClient under trio against the real proxy (``run_proxy`` and the rollout harness on 127.0.0.1:0)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from engine import EngineConfig
from proxy.cli import run_proxy
from proxy.client import FinalizeResult, ProxyClient, ProxyConnectionError, ProxyError, TrajectoryStats
from proxy.config import ProxyConfig
from tests.rollout.harness import Stack, record_calculator_session, serve_stack


async def test_client_health_models_and_stats_against_run_proxy(nursery, qwen3_path: Path) -> None:
    handle = await nursery.start(
        run_proxy, ProxyConfig(port=0, tokenizer_path=qwen3_path), EngineConfig(tokenizer_path=qwen3_path,
                                                                                 weight_version="v3"))
    async with ProxyClient(handle.url) as proxy:
        health = await proxy.health()
        assert health["status"] == "ok" and health["upstream"]["weight_version"] == "v3"
        models = await proxy.models()
        assert models and models[0]["id"] == "dressage/embedded-engine"
        assert await proxy.stats() == TrajectoryStats(0, 0, 0, 0, 0, 0, 0)
        finalized = await proxy.finalize_session("nobody")
        assert finalized == FinalizeResult("nobody", 0, 0, ())
        assert await proxy.read_trajectory(session_id="nobody") == []
        assert (await proxy.session_debug("nobody"))["state"] == "FINALIZED"


async def test_client_finalize_read_drain_and_debug_of_a_recorded_session(nursery, qwen3_path: Path) -> None:
    stack: Stack = await nursery.start(serve_stack, qwen3_path)
    await record_calculator_session(stack.services, "s/1", instance_id="i1")
    async with ProxyClient(stack.url + "/") as proxy:
        debug = await proxy.session_debug("s/1")
        assert (debug["session_id"], debug["steps"], debug["state"]) == ("s/1", 2, "ACTIVE")
        live = await proxy.stats()  # the registry holds the live session's steps; the store nothing yet
        assert (live.registry_sessions, live.registry_tombstones, live.bytes) == (1, 0, 0)
        assert live.approximate_bytes == live.registry_bytes > 0
        result = await proxy.finalize_session("s/1", reward_info={"reward": 1.0}, rollout_id="r1")
        assert result == FinalizeResult("s/1", 1, 2, ("s/1:0",))
        assert await proxy.finalize_session("s/1", reward_info={"reward": 0.0}) == result
        (segment,) = await proxy.read_trajectory(trajectory_id="s/1:0")
        assert segment["reward_info"] == {"reward": 1.0} and segment["rollout_id"] == "r1"
        stats = await proxy.stats()
        assert (stats.sessions, stats.segments, stats.tokens) == (1, 1, len(segment["token_ids"]))
        leased = await proxy.read_trajectory(session_id="s/1", drain=True)
        assert leased == [segment] and leased.lease_id is not None and leased.lease_seconds == 300.0
        # Leased, not deleted: a plain read still sees it, a second drain gets nothing (and no lease).
        assert await proxy.read_trajectory(session_id="s/1") == [segment]
        again = await proxy.read_trajectory(session_id="s/1", drain=True)
        assert (again, again.lease_id) == ([], None)
        assert (await proxy.stats()).leased_segments == 1
        assert await proxy.acknowledge(leased) == 1
        assert await proxy.acknowledge(leased.lease_id) == 0  # idempotent
        assert await proxy.read_trajectory(session_id="s/1") == []
        drained = await proxy.stats()  # a tombstone is all that is left of the session
        assert (drained.drained_segments, drained.registry_tombstones, drained.bytes) == (1, 1, 0)
        assert drained.approximate_bytes == drained.registry_bytes < live.registry_bytes


async def test_client_raises_proxy_errors_with_the_openai_fields(nursery, qwen3_path: Path) -> None:
    stack: Stack = await nursery.start(serve_stack, qwen3_path)
    async with ProxyClient(stack.url) as proxy:
        with pytest.raises(ProxyError) as caught:
            await proxy.read_trajectory()
        assert (caught.value.status, caught.value.code, caught.value.param) == (400, "invalid_request", "session_id")
        assert caught.value.type == "invalid_request_error"
        with pytest.raises(ProxyError) as caught:
            await proxy.read_trajectory(trajectory_id="missing:0")
        assert (caught.value.status, caught.value.code) == (404, "not_found")
        with pytest.raises(ProxyError) as caught:
            await proxy.session_debug("..")
        assert (caught.value.status, caught.value.code) == (404, "not_found")
        assert "'..'" in caught.value.message
        await record_calculator_session(stack.services, "doomed")
        await stack.services.sessions.abort("doomed")
        with pytest.raises(ProxyError) as caught:
            await proxy.finalize_session("doomed")
        assert (caught.value.status, caught.value.code) == (409, "session_aborted")
        with pytest.raises(ProxyError) as caught:
            await proxy.finalize_session("s", reward_info=[1])  # type: ignore[arg-type]
        assert caught.value.param == "reward_info" and caught.value.body["error"]["code"] == "invalid_request"


async def test_client_connection_refused_is_a_proxy_connection_error() -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with ProxyClient(dead) as proxy:
        with pytest.raises(ProxyConnectionError) as caught:
            await proxy.health()
    assert (caught.value.status, caught.value.code) == (0, "proxy_unreachable")


async def test_client_without_async_with_opens_and_closes_its_pool(nursery, qwen3_path: Path) -> None:
    stack: Stack = await nursery.start(serve_stack, qwen3_path)
    proxy = ProxyClient(stack.url)
    assert (await proxy.stats()).sessions == 0
    await proxy.aclose()
    await proxy.aclose()
    assert (await proxy.stats()).sessions == 0
    await proxy.aclose()


# -- chat completions (the route of the request path) ------------------------------------------------------------

WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


async def test_client_chat_completions_records_the_step_it_answered(nursery, qwen3_path: Path) -> None:
    handle = await nursery.start(run_proxy, ProxyConfig(port=0, tokenizer_path=qwen3_path))
    async with ProxyClient(handle.url) as proxy:
        answer = await proxy.chat_completions({"messages": ASK, "tools": WEATHER, "return_token_ids": True},
                                              session_id="chat-1", instance_id="inst-1", turn_id="t1")
        assert answer["object"] == "chat.completion"
        choice = answer["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
        debug = await proxy.session_debug("chat-1")
        assert (debug["steps"], debug["instance_id"]) == (1, "inst-1")
        result = await proxy.finalize_session("chat-1")
        assert (result.segments, result.steps) == (1, 1)
        (segment,) = await proxy.read_trajectory(session_id="chat-1")
    assert segment["token_ids"] == answer["prompt_token_ids"] + answer["token_ids"]
    assert segment["loss_mask"] == [0] * len(answer["prompt_token_ids"]) + [1] * len(answer["token_ids"])
    assert segment["steps"][0]["turn_id"] == "t1" and segment["instance_id"] == "inst-1"


async def test_client_stream_chat_completions_under_trio(nursery, qwen3_path: Path) -> None:
    handle = await nursery.start(run_proxy, ProxyConfig(port=0, tokenizer_path=qwen3_path))
    async with ProxyClient(handle.url) as proxy:
        async with proxy.stream_chat_completions(
            {"messages": ASK, "stream_options": {"include_usage": True}}, session_id="chat-2"
        ) as chunks:
            events = [chunk async for chunk in chunks]
        content = "".join(c["choices"][0]["delta"].get("content") or "" for c in events if c["choices"])
        finishes = [c["choices"][0]["finish_reason"] for c in events if c["choices"]]
        assert content and finishes[-1] == "stop" and events[-1]["usage"]["completion_tokens"] > 0
        assert (await proxy.finalize_session("chat-2")).steps == 1


async def test_client_chat_errors_are_proxy_errors(nursery, qwen3_path: Path) -> None:
    handle = await nursery.start(run_proxy, ProxyConfig(port=0, tokenizer_path=qwen3_path))
    async with ProxyClient(handle.url) as proxy:
        with pytest.raises(ProxyError) as caught:
            await proxy.chat_completions({"messages": ASK})
        assert (caught.value.status, caught.value.code, caught.value.param) == (400, "missing_session_id",
                                                                                 "X-Session-Id")
        with pytest.raises(ProxyError) as caught:
            async with proxy.stream_chat_completions({"messages": ASK, "n": 17}, session_id="s"):
                raise AssertionError("not reached")
        assert (caught.value.status, caught.value.code) == (400, "unsupported_parameter")
        first = await proxy.chat_completions({"messages": ASK}, session_id="masked")
        follow_up = ASK + [first["choices"][0]["message"], {"role": "user", "content": "And in Rome?"}]
        with pytest.raises(ProxyError) as caught:
            await proxy.chat_completions({"messages": follow_up, "response_mask": [0]}, session_id="masked")
        error = caught.value
        assert (error.status, error.code, error.param) == (422, "response_mask_mismatch", "response_mask")
        assert error.body["error"]["got"] == 1 and error.body["error"]["expected"] > 1
