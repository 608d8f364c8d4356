"""The same scripted generations through the proxy with the engine streaming cumulative chunks (SGLang's default)
and incremental ones (``--incremental-streaming-output``, detected by ``--upstream-stream-mode auto``): the answers
(non-streamed bodies, streamed chunks) are byte-identical after normalising ids and timestamps, and so are the
recorded segments (tokens, logprobs, masks, versions); a pause mid-stream keeps the partial output exactly the same
way in both modes (issue 21 item 1).

Before this, an incremental upstream failed every stream ("cumulative chunk disagrees with received token 0").
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from proxy.client import ProxyClient
from tests.e2e.harness import CALCULATOR_TOOLS

TOOL_OUTPUT = (
    "<think>\nThe user wants 6 times 7; I will call the tool.\n</think>\n\nLet me multiply — ça va.\n"
    + "<tool_call>\n" + json.dumps({"name": "multiply", "arguments": {"a": 6, "b": 7}}) + "\n</tool_call>"
)
ANSWER = "<think>\nThe tool said 42.\n</think>\n\n6 × 7 = **42** 🎉 — done."
WORDS = " ".join(f"w{i}" for i in range(40))
QUESTION = [{"role": "user", "content": "What is 6 times 7?"}]
#: what varies between two runs of the same generation: ids, clocks
VOLATILE = {"id", "created", "tool_call_id", "trajectory_id", "parent_traj_id", "rollout_id", "step_ids",
            "tip_step", "step_id", "turn_id", "e2e_latency"}


def normalised(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: normalised(v) for k, v in value.items()
                if not (isinstance(k, str) and (k in VOLATILE or "time" in k or k.endswith("_at")))}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    return value


def sse_chunks(body: bytes) -> list[Any]:
    events = [e[len(b"data: "):] for e in body.split(b"\n\n") if e.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    return [json.loads(e) for e in events[:-1]]


def assembled(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """A streamed answer as a client assembles it (how the text is cut into chunks depends on timing)."""
    fields: dict[str, Any] = {"content": "", "reasoning_content": "", "tool_calls": {}, "finish": None,
                              "usage": None, "token_ids": [], "token_logprobs": [], "weight_versions": []}
    for chunk in chunks:
        fields["usage"] = chunk.get("usage") or fields["usage"]
        for key in ("token_ids", "token_logprobs", "weight_versions"):
            fields[key] += chunk.get(key) or []
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            fields["content"] += delta.get("content") or ""
            fields["reasoning_content"] += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or ():
                entry = fields["tool_calls"].setdefault(call["index"], {"name": None, "arguments": ""})
                entry["name"] = entry["name"] or (call.get("function") or {}).get("name")
                entry["arguments"] += (call.get("function") or {}).get("arguments") or ""
            fields["finish"] = choice.get("finish_reason") or fields["finish"]
    return fields


async def run_conversations(proxy: Any) -> dict[str, Any]:
    """Two sessions, each a tool call then its answer: one streamed, one not. Returns what the clients saw and
    what the proxy recorded."""
    seen: dict[str, Any] = {}
    for session, stream in (("streamed", True), ("plain", False)):
        messages = list(QUESTION)
        for turn in range(2):
            body = {"model": "m", "messages": messages, "tools": CALCULATOR_TOOLS, "stream": stream,
                    "return_token_ids": True, "stream_options": {"include_usage": True}} if stream else {
                    "model": "m", "messages": messages, "tools": CALCULATOR_TOOLS, "return_token_ids": True}
            response = await proxy.chat(session, body)
            assert response.status_code == 200, response.text
            if stream:
                chunks = sse_chunks(response.content)
                answer = assembled(chunks)
                seen[f"{session}-{turn}"] = normalised(answer)
                calls = [{"id": f"call_{i}", "type": "function", "function": c}
                         for i, c in sorted(answer["tool_calls"].items())]
                message = {"role": "assistant", "content": answer["content"],
                           "reasoning_content": answer["reasoning_content"] or None, "tool_calls": calls or None}
            else:
                seen[f"{session}-{turn}"] = json.dumps(normalised(response.json()), sort_keys=True)
                message = response.json()["choices"][0]["message"]
            messages = messages + [{k: v for k, v in message.items() if v is not None}]
            for call in message.get("tool_calls") or ():
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": "42"})
        seen[f"{session}-segments"] = json.dumps(normalised(await proxy.segments(session)), sort_keys=True)
    return seen


def script() -> list[dict[str, Any]]:
    return [{"session": s, "output": o} for s in ("streamed", "plain") for o in (TOOL_OUTPUT, ANSWER)]


@pytest.mark.parametrize("worker_urls", [True, False], ids=["workers", "router-only"])
async def test_answers_and_recorded_steps_are_identical_in_both_stream_modes(start_proxy, worker_urls: bool) -> None:
    runs = {}
    for incremental in (False, True):
        proxy = await start_proxy(script=script(), engine={"incremental_streaming_output": incremental},
                                  worker_urls=worker_urls, record_token_versions=True)
        assert proxy.handle.services.upstream.incremental_streaming is incremental  # auto detected it
        runs[incremental] = await run_conversations(proxy)
    cumulative, incremental = runs[False], runs[True]
    assert cumulative.keys() == incremental.keys()
    for key in cumulative:
        assert incremental[key] == cumulative[key], key
    # The conversations really were what the script says (not two identical failures).
    assert cumulative["streamed-0"]["tool_calls"][0]["name"] == "multiply"
    assert "42" in json.loads(cumulative["plain-1"])["choices"][0]["message"]["content"]


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.02)


@pytest.mark.parametrize("incremental", [False, True], ids=["cumulative", "incremental"])
async def test_a_pause_mid_stream_keeps_the_partial_output_and_resumes_it(
    start_proxy, mock_clock, incremental: bool
) -> None:
    proxy = await start_proxy(
        script=[{"session": "live", "output": WORDS}],
        engine={"token_rate": 10.0, "incremental_streaming_output": incremental},
        partial_rollout=True, record_token_versions=True,
    )
    assert proxy.handle.services.upstream.incremental_streaming is incremental
    streamed: list[Any] = []

    async def live() -> None:
        body = {"model": "m", "messages": [{"role": "user", "content": "count"}], "stream": True,
                "return_token_ids": True, "chat_template_kwargs": {"enable_thinking": False}}
        response = await proxy.chat("live", body)
        streamed.extend(sse_chunks(response.content))

    engine = proxy.engine
    async with ProxyClient(proxy.url) as rollout, trio.open_nursery() as nursery:
        nursery.start_soon(live)
        await engine.wait_until(lambda: any(len(s.output_ids) >= 7 for s in engine.active_requests()))
        paused = await rollout.pause()
        assert (paused["aborted"], paused["state"]) == (1, "PAUSED")
        async with httpx.AsyncClient(timeout=None) as engine_http:
            update = await engine_http.post(proxy.engine_handle.url + "/update_weights_from_disk",
                                            json={"model_path": "/ckpt/2", "weight_version": "v2"})
        assert update.status_code == 200
        await rollout.resume(weight_version="v2")
    answer = assembled(streamed)
    assert (answer["content"], answer["finish"]) == (WORDS, "stop")
    first, second = proxy.requests_of("live")
    # The tokens the proxy received before the pause (the engine may have produced one more it never delivered)
    # are kept and continued, exactly once.
    kept = second.input_len - first.input_len
    assert kept >= 7
    assert second.input_ids[first.input_len:] == first.output_ids[:kept]
    expected = ["default"] * kept + ["v2"] * len(second.output_ids)
    assert answer["weight_versions"] == expected
    assert answer["token_ids"] == list(first.output_ids[:kept]) + list(second.output_ids)
    (segment,) = await proxy.segments("live")
    generated = [t for t, bit in zip(segment["token_ids"], segment["loss_mask"]) if bit]
    assert generated == answer["token_ids"]
    assert [v for v, bit in zip(segment["weight_versions"], segment["loss_mask"]) if bit] == expected
    assert [lp for lp, bit in zip(segment["logprobs"], segment["loss_mask"]) if bit] == answer["token_logprobs"]
