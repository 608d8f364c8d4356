"""SGLangClient against the real embedded engine over real sockets: streams, abort, cancellation, pause and
weight versions, parsers, and error translation."""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest
import trio

from engine import EngineHandle, expected_row
from proxy.upstream.client import SGLangClient
from proxy.upstream.errors import (
    UpstreamErrorChunk,
    UpstreamHTTPError,
    UpstreamStreamCut,
)
from proxy.upstream.events import Event, FinishAbort, Finished, FinishLength, FinishStop, Token

from .conftest import HANG_GUARD, StartEngine

IM_END = 151645
#: "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" in Qwen3 ids.
PROMPT = [151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198]
LONG = {"max_new_tokens": 10_000, "ignore_eos": True}
ABORTED = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}


class Collector:
    """Consumes a stream in its own task and lets the test wait until some number of tokens has arrived."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.rid: str | None = None
        self._changed = trio.Event()

    @property
    def tokens(self) -> list[Token]:
        return [e for e in self.events if isinstance(e, Token)]

    @property
    def final(self) -> Finished:
        assert isinstance(self.events[-1], Finished)
        return self.events[-1]

    async def consume(self, client: SGLangClient, *args: Any, **kwargs: Any) -> None:
        async with client.generate_stream(*args, **kwargs) as stream:
            self.rid = stream.rid
            self._notify()
            async for event in stream:
                self.events.append(event)
                self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_tokens(self, count: int) -> None:
        with trio.fail_after(HANG_GUARD):
            while len(self.tokens) < count:
                await self._changed.wait()


async def collect(client: SGLangClient, *args: Any, **kwargs: Any) -> tuple[str, list[Token], Finished]:
    with trio.fail_after(HANG_GUARD):
        async with client.generate_stream(*args, **kwargs) as stream:
            events = [event async for event in stream]
    assert isinstance(events[-1], Finished)
    assert all(isinstance(e, Token) for e in events[:-1])
    return stream.rid, events[:-1], events[-1]  # type: ignore[return-value]


def record_of(handle: EngineHandle, rid: str) -> Any:
    (record,) = [r for r in handle.engine.request_log if r.rid == rid]
    return record


async def wait_recorded(handle: EngineHandle, rid: str) -> Any:
    engine = handle.engine
    with trio.fail_after(HANG_GUARD):
        await engine.wait_until(lambda: any(r.rid == rid for r in engine.request_log))
    return record_of(handle, rid)


def assert_matches_record(tokens: list[Token], final: Finished, record: Any) -> None:
    """Every token exactly once, in order, equal to what the engine generated and stamped."""
    assert [t.index for t in tokens] == list(range(len(tokens)))
    assert tuple(t.token_id for t in tokens) == record.output_ids == final.output_ids
    assert tuple(t.weight_version for t in tokens) == record.token_versions == final.weight_versions
    assert tuple(t.logprob for t in tokens) == final.output_logprobs
    assert all(t.logprob is not None for t in tokens)


# -- streaming ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("incremental", [False, True], ids=["cumulative", "incremental"])
async def test_stream_token_events_equal_the_engine_record(start_engine: StartEngine, incremental: bool):
    text = "The capital of France is Paris."
    handle = await start_engine(
        incremental_streaming_output=incremental,
        script_lines=[{"session": "s1", "output": text}, {"session": "s2", "output": text}],
    )
    async with SGLangClient.single_server(handle.url, incremental_streaming=incremental) as client:
        rid, tokens, final = await collect(client, PROMPT, {"max_new_tokens": 64}, routing_key="s1")
        record = record_of(handle, rid)
        assert record.routing_key == "s1" and record.source == "script[0]"  # the header reached the engine
        assert_matches_record(tokens, final, record)
        assert final.finish_reason == FinishStop(IM_END) and tokens[-1].token_id == IM_END
        assert final.text == text
        assert (final.prompt_tokens, final.completion_tokens) == (len(PROMPT), len(tokens))
        assert final.rid == rid and final.weight_version == "default"

        # The non-streaming form returns the same value for the same scripted output.
        same = await client.generate(PROMPT, {"max_new_tokens": 64}, routing_key="s2")
        assert same.output_ids == final.output_ids and same.output_logprobs == final.output_logprobs
        assert same.finish_reason == final.finish_reason and same.text == text
        assert client.statistics().open_streams == 0


@pytest.mark.parametrize("incremental", [False, True], ids=["cumulative", "incremental"])
async def test_batches_group_the_events_of_each_read_and_hold_every_token_once(
    start_engine: StartEngine, incremental: bool
):
    handle = await start_engine(incremental_streaming_output=incremental)
    async with SGLangClient.single_server(handle.url, incremental_streaming=incremental) as client:
        batches: list[list[Event]] = []
        with trio.fail_after(HANG_GUARD):
            async with client.generate_stream(PROMPT, {"max_new_tokens": 40, "ignore_eos": True}) as stream:
                while batch := await stream.receive_batch():
                    batches.append(batch)
                    if len(batches) == 1:
                        await trio.sleep(0.2)  # fall behind the engine: the next reads hold several chunks
                assert await stream.receive_batch() == []  # the end stays the end
    events = [event for batch in batches for event in batch]
    assert all(batch for batch in batches)
    assert isinstance(events[-1], Finished) and all(isinstance(e, Token) for e in events[:-1])
    assert_matches_record(events[:-1], events[-1], record_of(handle, stream.rid))  # type: ignore[arg-type]
    assert len(events) - 1 == 40 and max(len(batch) for batch in batches) > 1


async def test_length_finish_and_routed_experts(start_engine: StartEngine):
    handle = await start_engine(num_layers=3, num_experts=8, experts_per_token=2)
    start = len(PROMPT) - 1
    async with SGLangClient.single_server(handle.url) as client:
        rid, tokens, final = await collect(
            client, PROMPT, {"max_new_tokens": 6}, return_routed_experts=True, routed_experts_start_len=start
        )
    assert final.finish_reason == FinishLength(6) and len(tokens) == 6
    experts = final.routed_experts
    assert experts is not None and experts.shape(3) == (6, 3, 2)  # one row per new input position
    sequence = PROMPT + list(final.output_ids)
    for row, position in zip(experts.rows(3), range(start, len(sequence) - 1), strict=True):
        expected = expected_row(0, position, sequence[position], "default", 3, 8, 2)
        assert [list(layer) for layer in row] == expected


async def test_many_concurrent_streams_share_the_pool(start_engine: StartEngine):
    """More streams than the usual 64 at once; each one's events equal its own record."""
    handle = await start_engine(token_rate=200)
    results: dict[str, tuple[list[Token], Finished]] = {}
    async with SGLangClient.single_server(handle.url, max_connections=256) as client:

        async def one(i: int) -> None:
            rid, tokens, final = await collect(client, PROMPT + [i], {"max_new_tokens": 8})
            results[rid] = (tokens, final)

        async with trio.open_nursery() as nursery:
            for i in range(100):
                nursery.start_soon(one, i)
        assert client.statistics().open_streams == 0
    assert len(results) == 100
    for rid, (tokens, final) in results.items():
        assert_matches_record(tokens, final, record_of(handle, rid))


async def test_finished_streams_are_read_to_the_end_and_reuse_the_connection(
    engine: EngineHandle, client: SGLangClient
):
    for _ in range(3):
        await collect(client, PROMPT, {"max_new_tokens": 4})
    async with client.generate_stream(PROMPT, {"max_new_tokens": 2}) as stream:
        async for event in stream:
            if isinstance(event, Finished):
                break  # leaving after the final event still drains [DONE]
    await client.generate(PROMPT, {"max_new_tokens": 2})
    pool = client.pool_statistics()
    assert (pool.connections_opened, pool.connections_reused) == (1, 4)  # five requests, one connection
    assert (pool.idle_connections, pool.active_connections, pool.stale_discarded, pool.retries) == (1, 0, 0, 0)
    assert client.statistics().streams_started == 4


# -- abort and cancellation ----------------------------------------------------------------------------------


async def test_abort_mid_stream_returns_the_partial_tokens(start_engine: StartEngine):
    handle = await start_engine(token_rate=100)
    async with SGLangClient.single_server(handle.url) as client:
        events: list[Event] = []
        with trio.fail_after(HANG_GUARD):
            async with client.generate_stream(PROMPT, LONG) as stream:
                async for event in stream:
                    events.append(event)
                    if isinstance(event, Token) and event.index == 2:
                        assert await client.abort(stream.rid) is True  # on the worker URL
    final = events[-1]
    assert isinstance(final, Finished) and final.finish_reason == FinishAbort("Aborted")
    record = record_of(handle, stream.rid)
    assert record.finish_reason == ABORTED and not record.client_disconnected
    assert_matches_record(events[:-1], final, record)  # type: ignore[arg-type]
    assert 3 <= len(final.output_ids) < 10_000


async def test_cancelling_the_scope_closes_the_upstream_stream(start_engine: StartEngine):
    handle = await start_engine(token_rate=100)
    async with SGLangClient.single_server(handle.url) as client:
        with trio.CancelScope() as scope:
            async with client.generate_stream(PROMPT, LONG) as stream:
                async for event in stream:
                    if isinstance(event, Token) and event.index == 2:
                        scope.cancel()
        assert scope.cancelled_caught
        assert client.statistics().open_streams == 0
        record = await wait_recorded(handle, stream.rid)  # the engine saw the disconnect and stopped
    assert record.client_disconnected and record.finish_reason["type"] == "abort"


async def test_leaving_a_stream_early_closes_it(start_engine: StartEngine):
    handle = await start_engine(token_rate=100)
    async with SGLangClient.single_server(handle.url) as client:
        async with client.generate_stream(PROMPT, LONG) as stream:
            async for event in stream:
                if isinstance(event, Token) and event.index == 1:
                    break
        assert stream.result is None and len(stream.partial().output_ids) >= 2
        record = await wait_recorded(handle, stream.rid)
    assert record.client_disconnected


async def test_abort_without_worker_urls_falls_back_to_closing_the_stream(start_engine: StartEngine):
    handle = await start_engine(token_rate=100)
    async with SGLangClient(handle.url) as client:  # a router URL only
        with trio.fail_after(HANG_GUARD):
            async with client.generate_stream(PROMPT, LONG) as stream:
                async for event in stream:
                    if isinstance(event, Token) and await client.abort(stream.rid) is False:
                        break
        record = await wait_recorded(handle, stream.rid)
    assert record.client_disconnected


# -- pause, continue and weight versions ---------------------------------------------------------------------


async def test_in_place_pause_and_version_update_are_seen_per_token(start_engine: StartEngine):
    handle = await start_engine(token_rate=100)
    collector = Collector()
    async with SGLangClient.single_server(handle.url) as client, trio.open_nursery() as nursery:
        nursery.start_soon(collector.consume, client, PROMPT, LONG)
        await collector.wait_tokens(3)
        await client.pause_generation("in_place")
        (state,) = handle.engine.active_requests()
        before = len(state.output_ids)
        await collector.wait_tokens(before)  # everything generated before the pause has arrived
        (result,) = await client.update_weight_version("v2")
        assert result.success and result.url == handle.url
        assert await client.weight_version() == "v2"
        await client.continue_generation()
        await collector.wait_tokens(before + 3)
        assert collector.rid is not None
        await client.abort(collector.rid)
    final = collector.final
    after = len(collector.tokens) - before
    assert [t.weight_version for t in collector.tokens] == ["default"] * before + ["v2"] * after
    assert final.finish_reason == FinishAbort("Aborted") and final.weight_version == "v2"
    assert_matches_record(collector.tokens, final, record_of(handle, collector.rid))


async def test_version_update_without_pause_is_observed_mid_stream(start_engine: StartEngine):
    """Without a pause the switch is visible too. SGLang labels chunks, not tokens (§3.4): a token generated just
    before the update can travel in a chunk built just after it, so at most the one token at the switch may be
    labelled differently from the engine's own record."""
    handle = await start_engine(token_rate=100)
    collector = Collector()
    async with SGLangClient.single_server(handle.url) as client, trio.open_nursery() as nursery:
        nursery.start_soon(collector.consume, client, PROMPT, LONG)
        await collector.wait_tokens(3)
        await client.update_weight_version("v3")  # abort_all_requests=False: the stream goes on
        seen = len(collector.tokens)
        await collector.wait_tokens(seen + 2)
        assert collector.rid is not None
        await client.abort(collector.rid)
    versions = [t.weight_version for t in collector.tokens]
    switch = versions.index("v3")
    assert 3 <= switch <= seen and versions == ["default"] * switch + ["v3"] * (len(versions) - switch)
    record = record_of(handle, collector.rid)
    assert tuple(t.token_id for t in collector.tokens) == record.output_ids
    assert sum(a != b for a, b in zip(versions, record.token_versions)) <= 1


async def test_abort_pause_ends_streams_and_blocks_new_ones_until_continue(start_engine: StartEngine):
    handle = await start_engine(token_rate=100)
    engine = handle.engine
    running, blocked = Collector(), Collector()
    async with SGLangClient.single_server(handle.url) as client, trio.open_nursery() as nursery:
        nursery.start_soon(running.consume, client, PROMPT, LONG)
        await running.wait_tokens(2)
        await client.pause_generation("abort")  # returns once every in-flight request has finished
        (record,) = engine.request_log
        assert record.finish_reason == ABORTED
        nursery.start_soon(blocked.consume, client, PROMPT, {"max_new_tokens": 3})
        with trio.fail_after(HANG_GUARD):
            await engine.wait_until(lambda: engine.statistics().blocked == 1)
        (update,) = await client.update_weights_from_disk("/ckpt/step-2", weight_version="v2")
        assert update.success
        info = await client.model_info()
        assert (info.model_path, info.weight_version) == ("/ckpt/step-2", "v2")
        await client.continue_generation()
    assert running.final.finish_reason == FinishAbort("Aborted")
    assert_matches_record(running.tokens, running.final, record)
    assert [t.weight_version for t in blocked.tokens] == ["v2"] * 3
    assert_matches_record(blocked.tokens, blocked.final, record_of(handle, blocked.rid))


async def test_retract_pause_keeps_the_stream_open(start_engine: StartEngine):
    handle = await start_engine(token_rate=100)
    collector = Collector()
    async with SGLangClient.single_server(handle.url) as client, trio.open_nursery() as nursery:
        nursery.start_soon(collector.consume, client, PROMPT, LONG)
        await collector.wait_tokens(2)
        await client.pause_generation("retract")
        await client.continue_generation()
        await collector.wait_tokens(len(collector.tokens) + 2)  # the same stream goes on after the retraction
        assert collector.rid is not None
        await client.abort(collector.rid)
    final = collector.final
    assert final.finish_reason == FinishAbort("Aborted") and final.meta_info["num_retractions"] == 1
    assert_matches_record(collector.tokens, final, record_of(handle, collector.rid))


@pytest.mark.parametrize("return_logprob", [True, False])
async def test_abort_of_a_retracted_request_neither_shrinks_nor_duplicates(
    start_engine: StartEngine, return_logprob: bool
):
    """§2.2: a request aborted while retracted ends with a chunk whose ``output_ids`` is only the last token and
    which has no ``prompt_tokens``; the client keeps its own tokens."""
    handle = await start_engine(token_rate=100)
    collector = Collector()
    async with SGLangClient.single_server(handle.url) as client, trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(collector.consume, client, PROMPT, LONG, return_logprob=return_logprob))
        await collector.wait_tokens(3)
        await client.pause_generation("retract")
        (state,) = handle.engine.active_requests()
        await collector.wait_tokens(len(state.output_ids))
        assert collector.rid is not None
        await client.abort(collector.rid)
    final = collector.final
    assert final.finish_reason == FinishAbort("Abort in waiting queue")
    assert final.prompt_tokens is None and "prompt_tokens" not in final.meta_info
    record = record_of(handle, collector.rid)
    assert tuple(t.token_id for t in collector.tokens) == record.output_ids == final.output_ids
    assert [t.index for t in collector.tokens] == list(range(len(record.output_ids)))
    assert final.completion_tokens == len(record.output_ids) >= 3
    assert all((t.logprob is not None) == return_logprob for t in collector.tokens)


async def test_control_calls_reach_every_worker(start_engine: StartEngine):
    """Abort, pause, continue and version updates go to all workers (the gateway has none of them)."""
    first, second = await start_engine(token_rate=100), await start_engine(token_rate=100)
    collector = Collector()
    async with SGLangClient(first.url, (first.url, second.url)) as client, trio.open_nursery() as nursery:
        nursery.start_soon(collector.consume, client, PROMPT, LONG)
        await collector.wait_tokens(2)
        await client.pause_generation("in_place")
        assert first.engine.statistics().paused == second.engine.statistics().paused == "in_place"
        (state,) = first.engine.active_requests()
        await collector.wait_tokens(len(state.output_ids))  # so no chunk is labelled after the update
        results = await client.update_weight_version("v9")
        assert [r.url for r in results] == [first.url, second.url] and all(r.success for r in results)
        assert first.engine.weight_version == second.engine.weight_version == "v9"
        await client.continue_generation()
        assert first.engine.statistics().paused is None and second.engine.statistics().paused is None
        assert collector.rid is not None
        assert await client.abort(collector.rid) is True  # the worker without that rid ignores it
    assert collector.final.finish_reason == FinishAbort("Aborted")
    assert_matches_record(collector.tokens, collector.final, record_of(first, collector.rid))
    assert {t.weight_version for t in collector.tokens} <= {"default", "v9"}


# -- information and parsers ---------------------------------------------------------------------------------


async def test_model_info_and_models(start_engine: StartEngine):
    handle = await start_engine(model_path="org/model-a", weight_version="w7", context_length=4096)
    async with SGLangClient.single_server(handle.url) as client:
        info = await client.model_info()
        assert (info.model_path, info.weight_version, info.is_generation) == ("org/model-a", "w7", True)
        assert await client.weight_version(handle.url) == "w7"
        (card,) = await client.models()
        assert (card.id, card.max_model_len) == ("org/model-a", 4096)


async def test_parse_function_call_and_separate_reasoning(client: SGLangClient):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    parsed = await client.parse_function_call(text, "qwen25", tools)
    assert parsed.normal_text == "Let me check."
    (call,) = parsed.calls
    assert (call.tool_index, call.name) == (0, "get_weather")
    assert isinstance(call.parameters, str) and '"Paris"' in call.parameters
    reasoning = await client.separate_reasoning("<think>\nhmm\n</think>\n\nHello!", "qwen3")
    assert "hmm" in reasoning.reasoning_text and reasoning.text.strip() == "Hello!"
    with pytest.raises(UpstreamHTTPError) as info:
        await client.parse_function_call(text, "no-such-parser", tools)
    assert info.value.status == 500  # SGLang 0.5.23 raises ValueError outside any handler (docs/engine.md, Parsers)


# -- errors ----------------------------------------------------------------------------------------------------


async def test_bad_request_is_an_http_error_with_sglangs_message(client: SGLangClient):
    with pytest.raises(UpstreamHTTPError) as info:
        async with client.generate_stream(PROMPT, {"max_new_tokens": 4}, extra_body={"top_logprobs_num": "all"}):
            pass  # pragma: no cover
    assert type(info.value) is UpstreamHTTPError and info.value.status == 400
    assert "top_logprobs_num" in info.value.message
    with pytest.raises(UpstreamHTTPError) as info:
        await client.generate(PROMPT, {"max_new_tokens": -1})
    assert info.value.status == 400 and "max_new_tokens" in info.value.message
    assert client.statistics().open_streams == 0


async def test_invalid_streaming_request_is_an_error_chunk(client: SGLangClient):
    """§1.6: a ValueError inside SGLang's generate handler reaches a streaming client as a 200 stream holding one
    ``data: {"error": ...}`` event and ``[DONE]``."""
    with pytest.raises(UpstreamErrorChunk) as info:
        async with client.generate_stream([], {"max_new_tokens": 4}) as stream:
            async for _ in stream:
                pass  # pragma: no cover
    error = info.value
    assert (error.status, error.message, error.err_type) == (400, "input_ids cannot be empty.", "invalid_request_error")
    assert error.partial is not None and error.partial.output_ids == ()
    assert client.statistics().open_streams == 0


async def test_duplicate_rid_is_refused(start_engine: StartEngine):
    handle = await start_engine(token_rate=100)
    collector = Collector()
    async with SGLangClient.single_server(handle.url) as client, trio.open_nursery() as nursery:
        nursery.start_soon(collector.consume, client, PROMPT, LONG)
        await collector.wait_tokens(1)
        assert collector.rid is not None
        with pytest.raises(UpstreamHTTPError) as info:
            await client.generate(PROMPT, {"max_new_tokens": 2}, rid=collector.rid)
        assert info.value.status == 400 and info.value.message == "Duplicate request ID detected"
        await client.abort(collector.rid)
    assert collector.final.finish_reason == FinishAbort("Aborted")


async def test_validation_abort_in_a_stream_is_a_typed_finish(client: SGLangClient):
    """An abort with status 400 during streaming is yielded as a normal final chunk (§1.6), not raised."""
    _, tokens, final = await collect(client, PROMPT, {"max_new_tokens": 4}, extra_body={"logprob_start_len": 99})
    assert tokens == [] and isinstance(final.finish_reason, FinishAbort)
    assert final.finish_reason.status_code == 400 and final.finish_reason.is_error


@pytest.mark.parametrize("status", [503, 500])
async def test_server_errors_are_http_errors(start_engine: StartEngine, status: int):
    handle = await start_engine(fault_error_every=1, fault_error_status=status)
    async with SGLangClient.single_server(handle.url) as client:
        with pytest.raises(UpstreamHTTPError) as info:
            async with client.generate_stream(PROMPT, {"max_new_tokens": 4}):
                pass  # pragma: no cover
        assert info.value.status == status and "Injected fault" in info.value.message
        with pytest.raises(UpstreamHTTPError) as info:
            await client.generate(PROMPT, {"max_new_tokens": 4})
        assert info.value.status == status
        assert client.statistics().open_streams == 0


async def test_dropped_stream_is_a_stream_cut_with_the_tokens_so_far(start_engine: StartEngine):
    handle = await start_engine(fault_drop_stream_after=3)
    async with SGLangClient.single_server(handle.url) as client:
        events: list[Event] = []
        with pytest.raises(UpstreamStreamCut) as info, trio.fail_after(HANG_GUARD):
            async with client.generate_stream(PROMPT, LONG) as stream:
                async for event in stream:
                    events.append(event)
        assert client.statistics().open_streams == 0
    assert [e.index for e in events] == [0, 1, 2]  # the tokens before the cut were handed out first
    partial = info.value.partial
    record = await wait_recorded(handle, stream.rid)
    assert record.dropped_by_fault
    assert partial.rid == stream.rid
    assert partial.output_ids == tuple(e.token_id for e in events) == record.output_ids[:3]
    assert partial.weight_versions == ("default",) * 3


async def canned_server(nursery: trio.Nursery, response: bytes) -> str:
    """A bare TCP server answering every HTTP request with ``response`` and then closing the connection."""

    async def handler(stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some()
        head, _, body = data.partition(b"\r\n\r\n")
        match = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
        while match and len(body) < int(match.group(1)):
            body += await stream.receive_some()
        await stream.send_all(response)
        await stream.aclose()

    listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    return f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"


async def test_error_chunk_after_tokens(nursery: trio.Nursery):
    """``data: {"error": ...}`` after some tokens (§1.6). The embedded engine sends error chunks only for requests
    that fail validation, before any token, so a canned HTTP response over a real socket stands in for SGLang
    here, to check that the tokens before the error are handed out and carried by the error."""
    chunk = b'{"text":"a","output_ids":[64],"meta_info":{"id":"r","finish_reason":null,"weight_version":"w",' \
            b'"prompt_tokens":1,"completion_tokens":1,"output_token_logprobs":[[-0.5,64,null]]}}'
    error = b'{"error":{"message":"boom","type":"invalid_request_error","code":400,"retryable":false}}'
    body = b"data: " + chunk + b"\n\ndata: " + error + b"\n\ndata: [DONE]\n\n"
    url = await canned_server(
        nursery,
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n" + body,
    )
    async with SGLangClient(url) as client:
        events: list[Event] = []
        with pytest.raises(UpstreamErrorChunk) as info:
            async with client.generate_stream([1]) as stream:
                async for event in stream:
                    events.append(event)
        assert client.statistics().open_streams == 0
    assert [e.token_id for e in events] == [64]  # type: ignore[union-attr]
    assert (info.value.status, info.value.message, info.value.partial.output_ids) == (400, "boom", (64,))
    assert info.value.partial.rid == stream.rid


async def test_stream_without_done_or_finish_is_a_stream_cut(nursery: trio.Nursery):
    """A server that closes a complete HTTP response early (no ``[DONE]``, no finish reason). The engine's drop
    fault cuts the connection instead, so a canned response over a real socket covers the clean-EOF case."""
    chunk = b'{"text":"","output_ids":[5,6],"meta_info":{"id":"r","finish_reason":null,"weight_version":"w",' \
            b'"prompt_tokens":1,"completion_tokens":2}}'
    body = b"data: " + chunk + b"\n\n"
    url = await canned_server(
        nursery,
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(body) + body,
    )
    async with SGLangClient(url) as client:
        with pytest.raises(UpstreamStreamCut) as info:
            async with client.generate_stream([1], return_logprob=False) as stream:
                async for _ in stream:
                    pass
    assert info.value.partial.output_ids == (5, 6)
    assert info.value.partial.output_logprobs == (None, None)

