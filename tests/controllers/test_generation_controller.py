"""GenerationController without HTTP: the controller driven against the embedded engine over loopback, including
what HTTP tests cannot reach (pause and resume, with and without partial rollout, streaming or not; the pause-wait
timeout; a fail-closed bug; a commit after finalize; the sampling parameters sent upstream), and its pure helpers
(context budget, text decoder, upstream outcome mapping). Pauses run on trio's mock clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from engine import EngineConfig, serve_engine
from proxy.api import ApiError, ChatCompletionRequest
from proxy.api.errors import ERROR_TABLE, ErrorCode
from proxy.config import ProxyConfig
from proxy.controllers.context_budget import StepBudget, plan_step_budget
from proxy.controllers.generation import GenerationController
from proxy.controllers.generation_driver import Generation
from proxy.controllers.step_output import TextDecoder
from proxy.controllers.upstream_request import ReadOutcome, ending_event, failure_event
from proxy.services import ProxyServices
from proxy.families import load_tito_tokenizer
from proxy.upstream.client import SGLangClient
from proxy.upstream.errors import (
    UpstreamErrorChunk,
    UpstreamHTTPError,
    UpstreamProtocolError,
    UpstreamStreamCut,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from proxy.upstream.events import FinishAbort, Finished, FinishLength, FinishStop
from statemachines.generation import FinishKind, UpstreamAborted, UpstreamFailed, UpstreamFinished

WORDS = " ".join(f"w{i}" for i in range(16))
MESSAGES = [{"role": "user", "content": "count"}]
NO_THINKING = {"enable_thinking": False}


@attrs.define(eq=False)
class Harness:
    services: ProxyServices
    controller: GenerationController
    engine: Any
    nursery: trio.Nursery

    @property
    def gate(self) -> Any:
        return self.services.gate

    async def start(self, session: str, **body: Any) -> Generation:
        body = {"messages": MESSAGES, "chat_template_kwargs": NO_THINKING, **body}
        request = ChatCompletionRequest.from_http(body, {"X-Session-Id": session})
        return await self.controller.start(request, self.nursery)

    async def segments(self, session: str) -> list[dict]:
        await self.services.sessions.finalize(session)
        return await self.services.sessions.read(session_id=session)

    def in_flight(self, session: str) -> int:
        return self.services.sessions.debug_view(session).in_flight


async def close_at_exit(client: SGLangClient) -> None:
    try:
        await trio.sleep_forever()
    finally:
        await client.aclose()


@pytest.fixture
def build(nursery: trio.Nursery, qwen3_path: Path):
    async def build(*, script: tuple = (), engine: dict | None = None, **config: Any) -> Harness:
        handle = await nursery.start(serve_engine, EngineConfig(
            port=0, tokenizer_path=qwen3_path, script_lines=tuple(script), **(engine or {})
        ))
        upstream = SGLangClient.single_server(handle.url)
        nursery.start_soon(close_at_exit, upstream)
        proxy_config = ProxyConfig(
            port=0, tokenizer_path=qwen3_path, tool_call_parse_backend="local", reasoning_parse_backend="local",
            **config,
        )
        services = ProxyServices.build(proxy_config, upstream)
        return Harness(services, services.generation_controller(), handle.engine, nursery)

    return build


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    """Jumps once every task has been idle 20 ms of real time (loopback I/O is never mistaken for idleness)."""
    return trio.testing.MockClock(autojump_threshold=0.02)


def sse_payloads(raw: bytes) -> list[Any]:
    frames = [frame[len(b"data: "):] for frame in raw.split(b"\n\n") if frame]
    return ["[DONE]" if frame == b"[DONE]" else json.loads(frame) for frame in frames]


async def read_stream(generation: Generation, into: list[bytes]) -> None:
    first = await generation.first_output()
    into.append(first)
    async for data in generation.sse_body(first):
        if data is not first:
            into.append(data)


def streamed_content(payloads: list[Any]) -> str:
    return "".join(
        choice["delta"].get("content") or ""
        for payload in payloads if isinstance(payload, dict) and "choices" in payload
        for choice in payload["choices"]
    )


async def generated_at_least(engine: Any, count: int) -> None:
    await engine.wait_until(lambda: any(len(s.output_ids) >= count for s in engine.active_requests()))


# -- pause and resume -------------------------------------------------------------------------------------------------


async def test_pause_mid_generation_with_partial_rollout_continues_and_stamps_each_version(build, mock_clock) -> None:
    h = await build(script=[{"session": "p", "output": WORDS}], engine={"token_rate": 10.0}, partial_rollout=True,
                    record_token_versions=True)
    generation = await h.start("p")
    await generated_at_least(h.engine, 6)
    paused = await h.gate.pause()
    assert (paused.aborted, paused.waiting) == (1, 1)
    kept = len(generation.output.ids)
    assert kept >= 5
    # The stream is closed (and the rid aborted): the engine stops it. Tokens it makes meanwhile are never accepted.
    await h.engine.wait_until(lambda: h.engine.statistics().running == 0)
    h.engine.update_weight_version("v2", abort_all_requests=False)
    await h.gate.resume("v2")
    completion = await generation.result()
    assert completion["choices"][0]["message"]["content"] == WORDS
    first, second = h.engine.request_log
    assert second.input_ids == first.input_ids + tuple(generation.output.ids[:kept])
    (segment,) = await h.segments("p")
    generated = [v for v, bit in zip(segment["weight_versions"], segment["loss_mask"]) if bit]
    assert generated == ["default"] * kept + ["v2"] * (len(generated) - kept)
    assert h.gate.statistics().in_flight == 0


async def test_weights_changed_under_a_running_stream_fail_it_even_within_one_read(build, mock_clock) -> None:
    # Not through the proxy's pause: SGLang's version moves while the request runs. The chunks say so; the reader
    # feeds a read's tokens as one run per version, so the machine sees the change and fails the generation rather
    # than mix versions in one request (architecture invariant 3); nothing is committed.
    h = await build(script=[{"session": "v", "output": WORDS}], engine={"token_rate": 10.0})
    generation = await h.start("v", stream=True)
    await generated_at_least(h.engine, 4)
    h.engine.update_weight_version("v2", abort_all_requests=False)
    out: list[bytes] = []
    await read_stream(generation, out)
    errors = [p["error"] for p in sse_payloads(b"".join(out)) if isinstance(p, dict) and "error" in p]
    assert [e["code"] for e in errors] == ["weight_version_changed"]
    await h.engine.wait_until(lambda: bool(h.engine.request_log))  # the failed generation aborted it
    (record,) = h.engine.request_log
    assert {"default", "v2"} <= set(record.token_versions)  # the upstream request did mix them
    assert set(generation.output.versions) == {"default"}  # and no token of the new version was recorded
    await trio.testing.wait_all_tasks_blocked()
    assert h.in_flight("v") == 0 and h.gate.statistics().in_flight == 0


async def test_weights_changed_under_a_running_whole_answer_request_are_labelled_with_its_final_version(
    build, mock_clock
) -> None:
    # The documented limit (docs/partial-rollout.md, "Weight versions"): a non-streaming upstream answer carries one
    # weight_version, SGLang's when it finished, so a change behind the proxy's back cannot be seen in it.
    h = await build(script=[{"session": "w", "output": WORDS}], engine={"token_rate": 10.0}, record_token_versions=True)
    generation = await h.start("w")
    await generated_at_least(h.engine, 4)
    h.engine.update_weight_version("v2", abort_all_requests=False)
    completion = await generation.result()
    assert completion["choices"][0]["message"]["content"] == WORDS
    (record,) = h.engine.request_log
    assert {"default", "v2"} <= set(record.token_versions)
    (segment,) = await h.segments("w")
    assert {v for v, bit in zip(segment["weight_versions"], segment["loss_mask"]) if bit} == {"v2"}


async def test_pause_without_partial_rollout_regenerates_the_step_under_one_version(build, mock_clock) -> None:
    h = await build(script=[{"session": "r", "output": WORDS}], engine={"token_rate": 10.0},
                    record_token_versions=True)
    generation = await h.start("r")
    await generated_at_least(h.engine, 4)
    await h.gate.pause()
    await h.engine.wait_until(lambda: h.engine.statistics().running == 0)  # (the script entry is left open)
    h.engine.update_weight_version("v2", abort_all_requests=False)
    await h.gate.resume("v2")
    completion = await generation.result()
    assert completion["choices"][0]["message"]["content"] == WORDS
    first, second = h.engine.request_log
    assert second.input_ids == first.input_ids  # from scratch
    (segment,) = await h.segments("r")
    assert {v for v, bit in zip(segment["weight_versions"], segment["loss_mask"]) if bit} == {"v2"}


async def test_streaming_with_partial_rollout_stays_one_seamless_stream_across_the_pause(build, mock_clock) -> None:
    h = await build(script=[{"session": "s", "output": WORDS}], engine={"token_rate": 10.0}, partial_rollout=True)
    generation = await h.start("s", stream=True)
    received: list[bytes] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_stream, generation, received)
        await generated_at_least(h.engine, 6)
        await h.gate.pause()
        await h.engine.wait_until(lambda: h.engine.statistics().running == 0)
        await trio.sleep(30)  # a long pause: the client's stream stays open
        await h.gate.resume()
    payloads = sse_payloads(b"".join(received))
    assert payloads[-1] == "[DONE]"
    assert streamed_content(payloads) == WORDS
    assert len(h.engine.request_log) == 2


async def test_streaming_without_partial_rollout_ends_a_stream_that_showed_tokens_with_generation_restarted(
    build, mock_clock
) -> None:
    h = await build(script=[{"session": "x", "output": WORDS}], engine={"token_rate": 10.0})
    generation = await h.start("x", stream=True)
    received: list[bytes] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_stream, generation, received)
        await generated_at_least(h.engine, 6)
        await h.gate.pause()
        await h.gate.resume()
    payloads = sse_payloads(b"".join(received))
    assert payloads[-1] == "[DONE]"
    assert payloads[-2]["error"]["code"] == "generation_restarted"
    await h.engine.wait_until(lambda: h.engine.statistics().running == 0)
    await trio.testing.wait_all_tasks_blocked()
    assert h.in_flight("x") == 0 and h.gate.statistics().in_flight == 0
    assert len(h.engine.request_log) == 1  # no second request for a client that was given up
    assert await h.segments("x") == []


async def test_a_generation_waiting_longer_than_the_pause_wait_timeout_gets_503_with_retry_after(
    build, mock_clock
) -> None:
    h = await build(pause_wait_timeout=30.0)
    await h.gate.pause()
    start = trio.current_time()
    generation = await h.start("late")
    assert h.gate.statistics().waiting == 1
    with pytest.raises(ApiError) as caught:
        await generation.result()
    assert trio.current_time() - start >= 30.0
    assert (caught.value.status, caught.value.code) == (503, "paused_timeout")
    assert "Retry-After" in caught.value.headers
    await trio.testing.wait_all_tasks_blocked()
    assert h.gate.statistics().waiting == 0 and h.in_flight("late") == 0
    assert h.engine.request_log == type(h.engine.request_log)()  # nothing was generated


async def test_a_resume_before_the_timeout_admits_the_waiting_generation(build, mock_clock) -> None:
    h = await build(script=[{"session": "w", "output": "Resumed."}], pause_wait_timeout=30.0)
    await h.gate.pause()
    generation = await h.start("w")
    await trio.sleep(20)
    await h.gate.resume("v9")
    completion = await generation.result()
    assert completion["choices"][0]["message"]["content"] == "Resumed."


async def test_a_client_gone_while_waiting_releases_the_gate_wait_and_the_session(build) -> None:
    h = await build()
    await h.gate.pause()
    generation = await h.start("gone")
    assert (h.gate.statistics().waiting, h.in_flight("gone")) == (1, 1)
    generation.client_gone()
    await trio.testing.wait_all_tasks_blocked()
    assert (h.gate.statistics().waiting, h.in_flight("gone")) == (0, 0)
    assert generation.statistics().state == "CANCELLED"


async def test_a_client_gone_mid_stream_stops_the_driver_on_answer_nobody_without_a_fault(build, caplog) -> None:
    # The machine's AnswerNobody is what stops the driver (no flag beside the machine): the cut request's end is
    # never fed to the CANCELLED machine (that would be a fault), the driver ends, and it counts once.
    h = await build(script=[{"session": "left", "output": WORDS}], engine={"token_rate": 10.0})
    generation = await h.start("left")
    await generated_at_least(h.engine, 2)
    generation.client_gone()
    generation.client_gone()  # idempotent: the end of the exchange calls it again
    await h.engine.wait_until(lambda: h.engine.statistics().running == 0)
    await trio.testing.wait_all_tasks_blocked()
    assert generation.statistics().state == "CANCELLED"
    stats = h.controller.statistics()
    assert (stats.cancelled, stats.active, stats.failed, stats.responded) == (1, 0, 0, 0)
    assert (h.gate.statistics().in_flight, h.in_flight("left")) == (0, 0)
    assert not [r for r in caplog.records if "controller fault" in r.getMessage()]


# -- failures ---------------------------------------------------------------------------------------------------------


class ExplodingParser:
    """A parser with a bug."""

    async def parse_final(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("parser exploded")


async def test_a_bug_in_the_driver_fails_closed_with_500_and_releases_everything(build) -> None:
    h = await build(script=[{"session": "bug", "output": o} for o in ("One.", "Two.")])
    real = h.controller.parser
    h.controller.parser = ExplodingParser()
    generation = await h.start("bug")
    with pytest.raises(ApiError) as caught:
        await generation.result()
    assert (caught.value.status, caught.value.code) == (500, "internal_error")
    assert "exploded" not in caught.value.message  # no internals leak
    await trio.testing.wait_all_tasks_blocked()
    assert h.in_flight("bug") == 0 and h.gate.statistics().in_flight == 0
    h.controller.parser = real
    assert (await (await h.start("bug")).result())["choices"][0]["message"]["content"] == "Two."


async def test_a_generation_that_completes_after_finalize_is_rejected_and_changes_nothing(build, mock_clock) -> None:
    h = await build(script=[{"session": "fin", "output": WORDS}], engine={"token_rate": 10.0})
    generation = await h.start("fin")
    await generated_at_least(h.engine, 3)
    result = await h.services.sessions.finalize("fin")
    assert result.segments == 0
    with pytest.raises(ApiError) as caught:
        await generation.result()
    assert (caught.value.status, caught.value.code) == (400, "session_finalized")
    assert await h.services.sessions.read(session_id="fin") == []
    assert generation.statistics().state == "REJECTED"


async def test_upstream_failures_commit_nothing_and_answer_with_the_mapped_status(build) -> None:
    h = await build(script=[{"session": "e", "output": "x", "error_status": 429}])
    generation = await h.start("e")
    with pytest.raises(ApiError) as caught:
        await generation.result()
    assert (caught.value.status, caught.value.code) == (503, "upstream_overloaded")
    await trio.testing.wait_all_tasks_blocked()
    assert h.in_flight("e") == 0 and h.gate.statistics().in_flight == 0


# -- what is sent upstream --------------------------------------------------------------------------------------------


@attrs.define
class RecordingUpstream:
    """Delegates to the real client, recording every generation call (``stream`` says which kind)."""

    real: SGLangClient
    calls: list[dict[str, Any]] = attrs.field(factory=list)

    def generate_stream(self, input_ids: Any, sampling_params: Any, **kwargs: Any) -> Any:
        self.calls.append({"sampling_params": dict(sampling_params), "stream": True, **kwargs})
        return self.real.generate_stream(input_ids, sampling_params, **kwargs)

    async def generate(self, input_ids: Any, sampling_params: Any, **kwargs: Any) -> Any:
        self.calls.append({"sampling_params": dict(sampling_params), "stream": False, **kwargs})
        return await self.real.generate(input_ids, sampling_params, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


async def test_sampling_params_rollout_temperature_budget_and_routing_key_upstream(build) -> None:
    h = await build(rollout_temperature=0.25, context_window=4096)
    recorder = RecordingUpstream(h.controller.upstream)
    h.controller.upstream = recorder
    await (await h.start("t", temperature=1.5, top_p=0.5, max_tokens=7, stop=["zzz"], seed=3)).result()
    await (await h.start("u")).result()
    clamped, default = recorder.calls
    assert clamped["sampling_params"] == {
        "max_new_tokens": 7, "temperature": 0.25, "top_p": 0.5, "stop": ["zzz"], "sampling_seed": 3,
    }
    assert clamped["routing_key"] == "t" and clamped["rid"]
    # Non-streaming clients go upstream non-streaming when worker URLs are known (abort by rid keeps the tokens).
    assert clamped["stream"] is False and default["stream"] is False
    prompt = len(h.engine.request_log[1].input_ids)
    assert default["sampling_params"] == {"max_new_tokens": 4096 - prompt, "temperature": 0.25}


async def test_without_a_configured_window_or_max_tokens_the_upstream_window_is_sent_never_null(build) -> None:
    """A gateway drops null fields and SGLang's default is 128 tokens: the window the upstream reports decides."""
    h = await build()
    recorder = RecordingUpstream(h.controller.upstream)
    h.controller.upstream = recorder
    await (await h.start("n")).result()
    prompt = len(h.engine.request_log[0].input_ids)
    assert recorder.calls[0]["sampling_params"] == {"max_new_tokens": h.engine.config.context_length - prompt}


# -- pure helpers -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "requested", "window", "dynamic", "expected"),
    [
        (10, None, 100, True, StepBudget(90)),
        (10, 50, 100, True, StepBudget(50)),
        (10, 500, 100, True, StepBudget(90, clamped=True)),
        (10, 500, 100, False, StepBudget(500)),
        (99, None, 100, True, StepBudget(1)),
    ],
)
def test_plan_step_budget_table(prompt, requested, window, dynamic, expected) -> None:
    assert plan_step_budget(prompt, requested, context_window=window, dynamic=dynamic) == expected


@pytest.mark.parametrize("prompt", [100, 101, 5000])
def test_plan_step_budget_refuses_a_full_window_with_context_overflow(prompt) -> None:
    with pytest.raises(ApiError) as caught:
        plan_step_budget(prompt, 10, context_window=100)
    assert caught.value.code == "context_overflow"
    assert caught.value.to_json()["error"]["prompt_tokens"] == prompt


@pytest.fixture(scope="module")
def tito(qwen3_path: Path) -> Any:
    return load_tito_tokenizer("qwen3", qwen3_path)


def decode_all(tito: Any, text: str, stop: list[str] | None, matched: Any = None, *, end: bool = True) -> tuple[str, list[str]]:
    ids = tito.encode_text(text) + ([tito.end_of_turn_id] if end else [])
    decoder = TextDecoder(tito, end_ids={tito.end_of_turn_id}, stop=stop)
    pieces = [decoder.feed(i) for i in ids]
    pieces.append(decoder.finish(matched))
    return decoder.text, pieces


def test_text_decoder_releases_whole_characters_and_drops_the_end_token(tito) -> None:
    text = "naïve 😀 日本語 <think>x</think>"
    decoded, pieces = decode_all(tito, text, None)
    assert decoded == text
    assert all("\ufffd" not in piece for piece in pieces)


def test_text_decoder_holds_back_and_cuts_stop_strings(tito) -> None:
    decoded, pieces = decode_all(tito, "Hello there END and more", ["END"], matched="END", end=False)
    assert decoded == "Hello there "
    assert not any("E" in piece for piece in pieces)
    # A prefix of a stop string that never completes is released at the end.
    decoded, _ = decode_all(tito, "Ends with EN", ["END"])
    assert decoded == "Ends with EN"


def test_failure_event_maps_every_upstream_error_to_a_stable_code_with_the_tables_status(caplog) -> None:
    url = "http://10.1.2.3:30000/generate"
    cases = [
        (UpstreamUnavailable("cannot connect (OSError: [Errno 111])", url=url), (502, "upstream_unavailable")),
        (UpstreamStreamCut("cut", url=url), (502, "upstream_unavailable")),
        (UpstreamTimeout("slow", phase="connect", url=url), (502, "upstream_unavailable")),
        (UpstreamHTTPError(503, "busy", url=url), (503, "upstream_overloaded")),
        (UpstreamHTTPError(429, "busy"), (503, "upstream_overloaded")),
        (UpstreamHTTPError(408, "slow"), (503, "upstream_overloaded")),
        (UpstreamHTTPError(400, "too long"), (400, "upstream_rejected")),
        (UpstreamHTTPError(422, "field required"), (400, "upstream_rejected")),
        (UpstreamHTTPError(404, "no route /generate", url=url), (502, "upstream_error")),
        (UpstreamHTTPError(401, "unauthorized"), (502, "upstream_error")),
        (UpstreamHTTPError(500, "boom"), (502, "upstream_error")),
        (UpstreamErrorChunk(400, "bad sampling"), (400, "upstream_rejected")),
        (UpstreamErrorChunk(409, "conflict"), (400, "upstream_rejected")),
        (UpstreamErrorChunk(500, "oom"), (502, "upstream_error")),
        (UpstreamProtocolError("garbage", url=url), (502, "upstream_protocol_error")),
    ]
    for error, expected in cases:
        caplog.clear()
        event = failure_event(error)
        assert (event.status, event.code) == expected, error
        assert ERROR_TABLE[ErrorCode(event.code)].status == event.status
        # The client's message names the failure, never the URL or the exception; the log has both.
        assert "10.1.2.3" not in event.message and "Error" not in event.message and "http" not in event.message
        assert str(error) in caplog.text and type(error).__name__ in caplog.text


def test_failure_event_quotes_sglangs_reason_for_a_refusal_only_when_it_holds_no_internals() -> None:
    refused = failure_event(UpstreamHTTPError(400, "The input (50 tokens) is longer than the context (40 tokens)."))
    assert refused.message.endswith(": The input (50 tokens) is longer than the context (40 tokens).")
    leaky = failure_event(UpstreamHTTPError(400, "ValueError: worker http://10.0.0.1:30000 said no"))
    assert leaky.message == "the upstream SGLang server refused the request (HTTP 400)"
    failed = failure_event(UpstreamHTTPError(500, "Traceback (most recent call last): ..."))
    assert failed.message == "the upstream SGLang server failed (HTTP 500)"


def finished(reason: Any) -> Finished:
    return Finished(None, reason, (1,), (0.0,), (None,), None, 1, 1, 0, None, "")


def test_ending_event_for_each_finish_reason() -> None:
    assert ending_event(ReadOutcome(finished=finished(FinishStop())), 1) == UpstreamFinished(FinishKind.STOP, 1)
    assert ending_event(ReadOutcome(finished=finished(FinishLength(1))), 1) == UpstreamFinished(FinishKind.LENGTH, 1)
    assert ending_event(ReadOutcome(finished=finished(FinishAbort("Aborted"))), 1) == UpstreamAborted(1)
    failed = ending_event(ReadOutcome(finished=finished(FinishAbort("bad", status_code=400))), 1)
    assert isinstance(failed, UpstreamFailed) and (failed.status, failed.code) == (400, "upstream_rejected")
    busy = ending_event(ReadOutcome(finished=finished(FinishAbort("busy", status_code=503))), 1)
    assert isinstance(busy, UpstreamFailed) and (busy.status, busy.code) == (503, "upstream_overloaded")
    crashed = ending_event(ReadOutcome(finished=finished(FinishAbort("Internal error: KeyError", status_code=500))), 1)
    assert isinstance(crashed, UpstreamFailed) and (crashed.status, crashed.code) == (502, "upstream_error")
    assert "KeyError" not in crashed.message
    missing = ending_event(ReadOutcome(), 0)
    assert isinstance(missing, UpstreamFailed) and (missing.status, missing.code) == (502, "upstream_error")
