"""SGLang's two streaming modes (issue 21 item 1): detecting the upstream's mode, forcing it, the one start-up
warning, and decoding each mode exactly (a chunk of the other mode is a protocol error, never a silent mis-decode).

Real embedded engines on 127.0.0.1:0, in each mode (``EngineConfig.incremental_streaming_output``, which its
``/get_server_info`` reports like SGLang's server args).
"""

from __future__ import annotations

import logging
import socket

import pytest
import trio

from proxy.cli import run_proxy
from proxy.config import ProxyConfig
from proxy.upstream.chunks import ChunkDecoder
from proxy.upstream.client import SGLangClient
from proxy.upstream.errors import UpstreamProtocolError
from proxy.upstream.events import Finished, Token
from proxy.upstream.stream_mode import MixedStreamModes, decide_stream_mode
from tests.upstream.conftest import HANG_GUARD

WORDS = " ".join(f"w{i}" for i in range(24))


def closed_port_url() -> str:
    """A loopback URL nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("incremental", [False, True])
async def test_auto_reads_each_engines_mode(start_engine, incremental: bool) -> None:
    engine = await start_engine(incremental_streaming_output=incremental)
    async with SGLangClient.single_server(engine.url) as client:
        decision = await decide_stream_mode(client, "auto")
    assert (decision.incremental, decision.source) == (incremental, "detected")
    assert decision.reports == ((engine.url, incremental),)
    assert (decision.warning() is None) == incremental


async def test_the_flag_overrides_detection(start_engine) -> None:
    engine = await start_engine(incremental_streaming_output=True)
    async with SGLangClient.single_server(engine.url) as client:
        forced = await decide_stream_mode(client, "cumulative")
    assert (forced.incremental, forced.source, forced.reports) == (False, "flag", ())
    assert "--upstream-stream-mode cumulative" in (forced.warning() or "")


async def test_workers_in_both_modes_stop_auto(start_engine) -> None:
    cumulative = await start_engine(incremental_streaming_output=False)
    incremental = await start_engine(incremental_streaming_output=True)
    async with SGLangClient(cumulative.url, (cumulative.url, incremental.url)) as client:
        with pytest.raises(MixedStreamModes, match="different modes") as raised:
            await decide_stream_mode(client, "auto")
        assert cumulative.url in str(raised.value) and incremental.url in str(raised.value)
        # Forcing a mode is the operator's choice: allowed.
        assert (await decide_stream_mode(client, "incremental")).incremental


async def test_silent_workers_are_skipped_and_nobody_answering_means_cumulative(start_engine) -> None:
    incremental = await start_engine(incremental_streaming_output=True)
    gone = closed_port_url()
    async with SGLangClient(incremental.url, (gone, incremental.url), connect_timeout=5) as client:
        decision = await decide_stream_mode(client, "auto")
    assert (decision.incremental, decision.source) == (True, "detected")
    assert gone in (decision.note() or "")
    async with SGLangClient.single_server(gone, connect_timeout=5) as client:
        decision = await decide_stream_mode(client, "auto")
    assert (decision.incremental, decision.source) == (False, "assumed")
    assert gone in (decision.warning() or "") and "--incremental-streaming-output" in (decision.warning() or "")


@pytest.mark.parametrize("incremental", [False, True])
async def test_the_proxy_warns_once_about_a_cumulative_upstream(
    nursery, qwen3_path, start_engine, caplog, incremental: bool
) -> None:
    engine = await start_engine(incremental_streaming_output=incremental)
    config = ProxyConfig(port=0, tokenizer_path=qwen3_path, sglang_router_url=engine.url,
                         sglang_worker_urls=(engine.url,))
    with caplog.at_level(logging.INFO):
        handle = await nursery.start(run_proxy, config)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "--incremental-streaming-output"
                in r.getMessage()]
    assert len(warnings) == (0 if incremental else 1)
    assert handle.services is not None


@pytest.mark.parametrize("incremental", [False, True])
async def test_a_stream_decodes_the_same_in_both_modes(start_engine, incremental: bool) -> None:
    engine = await start_engine(incremental_streaming_output=incremental, script_lines=[{"session": "s", "output": WORDS}])
    async with SGLangClient.single_server(engine.url) as client:
        client.incremental_streaming = (await decide_stream_mode(client)).incremental
        with trio.fail_after(HANG_GUARD):
            async with client.generate_stream([1, 2, 3], {"max_new_tokens": 64}, routing_key="s") as events:
                received = [event async for event in events]
    tokens = [e for e in received if isinstance(e, Token)]
    (final,) = [e for e in received if isinstance(e, Finished)]
    assert [t.index for t in tokens] == list(range(len(tokens)))
    assert final.output_ids == tuple(t.token_id for t in tokens) and final.text == WORDS
    assert final.completion_tokens == len(tokens)


# -- the decoder: chunks of the other mode ----------------------------------------------------------------------


def chunk(ids: list[int], total: int, *, finish: dict | None = None, text: str = "") -> dict:
    return {"text": text, "output_ids": ids, "meta_info": {
        "id": "r", "finish_reason": finish, "prompt_tokens": 3, "completion_tokens": total,
        "output_token_logprobs": [[-0.5, i, None] for i in ids]}}


def test_a_cumulative_chunk_in_incremental_mode_is_a_protocol_error() -> None:
    decoder = ChunkDecoder(incremental=True)
    decoder.feed_chunk(chunk([5], 1))
    with pytest.raises(UpstreamProtocolError, match="upstream streams cumulative chunks") as raised:
        decoder.feed_chunk(chunk([5, 6], 2))  # read as deltas it would record 5 twice
    assert "--upstream-stream-mode" in str(raised.value)
    assert raised.value.partial.output_ids == (5,)


def test_an_incremental_chunk_in_cumulative_mode_names_the_flag() -> None:
    decoder = ChunkDecoder(incremental=False)
    decoder.feed_chunk(chunk([5, 6], 2))
    with pytest.raises(UpstreamProtocolError, match="holds only the 2 ids after the 2 received") as raised:
        decoder.feed_chunk(chunk([7, 8], 4))
    assert "--incremental-streaming-output" in str(raised.value)
    # A delta that happens to pass the older checks (longer than what was received, agreeing at its last
    # position) would have dropped its first tokens silently: completion_tokens tells it apart.
    decoder = ChunkDecoder(incremental=False)
    decoder.feed_chunk(chunk([5, 6], 2))
    with pytest.raises(UpstreamProtocolError, match="holds only the 3 ids"):
        decoder.feed_chunk(chunk([7, 6, 8], 5))
    # Without completion_tokens the older checks still catch the usual case.
    decoder = ChunkDecoder(incremental=False)
    decoder.feed_chunk(chunk([5, 6], 2))
    delta = chunk([7, 8], 4)
    del delta["meta_info"]["completion_tokens"]
    with pytest.raises(UpstreamProtocolError, match="disagrees with received token 1"):
        decoder.feed_chunk(delta)


def test_incremental_text_deltas_join_and_coalesced_waiting_abort_keeps_every_token() -> None:
    decoder = ChunkDecoder(incremental=True)
    decoder.feed_chunk(chunk([5], 1, text="a"))
    decoder.feed_chunk(chunk([6], 2, text="b"))
    # SGLang coalesced a queued delta ([7]) with the waiting-queue abort chunk (whole text, [last id], the
    # whole output's triples, no prompt_tokens): the lists are concatenated.
    quirk = {"text": "c" + "abcd", "output_ids": [7, 8], "meta_info": {
        "id": "r", "finish_reason": {"type": "abort", "message": "Abort in waiting queue"}, "completion_tokens": 4,
        "output_token_logprobs": [[-0.5, 7, None]] + [[-0.5, i, None] for i in (5, 6, 7, 8)]}}
    events = decoder.feed_chunk(quirk)
    assert [e.token_id for e in events if isinstance(e, Token)] == [7, 8]
    assert decoder.result is not None and decoder.result.output_ids == (5, 6, 7, 8)


def test_incremental_text_is_the_join_of_the_deltas() -> None:
    decoder = ChunkDecoder(incremental=True)
    for index, piece in enumerate(["he", "llo", " wor", "ld"]):
        decoder.feed_chunk(chunk([index + 1], index + 1, text=piece))
    decoder.feed_chunk(chunk([], 4, finish={"type": "stop", "matched": 0}))
    assert decoder.result is not None and decoder.result.text == "hello world"


async def test_a_worker_that_never_answers_does_not_hold_the_start(nursery, start_engine) -> None:
    incremental = await start_engine(incremental_streaming_output=True)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    stuck = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
    accepted: list[trio.SocketStream] = []

    async def accept_and_stay_silent() -> None:
        while True:
            accepted.append(await listeners[0].accept())

    nursery.start_soon(accept_and_stay_silent)
    async with SGLangClient(incremental.url, (stuck, incremental.url)) as client:
        with trio.fail_after(HANG_GUARD):
            decision = await decide_stream_mode(client, "auto", timeout=0.5)
    assert (decision.incremental, decision.source) == (True, "detected")
    assert decision.reports == ((stuck, None), (incremental.url, True))
    for stream in accepted:
        await stream.aclose()
