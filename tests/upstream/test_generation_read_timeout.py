"""``SGLangClient(generation_read_timeout=...)`` (the proxy's ``--upstream-read-timeout``): a ``/generate`` whose
upstream goes silent fails with ``UpstreamTimeout`` (phase ``read``) instead of waiting forever, a stream's error
carrying the tokens that had arrived; the connection is closed. Raw servers on 127.0.0.1:0 that answer, then say
nothing more."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from proxy.upstream.client import SGLangClient
from proxy.upstream.errors import UpstreamTimeout
from proxy.upstream.events import Token
from tests.upstream.conftest import HANG_GUARD
from tests.upstream.test_httplib import CHUNK_1, STREAM_HEAD, Peer, chunked, serve


async def test_a_stream_silent_after_its_first_token_fails_with_a_read_timeout(nursery: trio.Nursery):
    first_event = b"data: " + json.dumps(CHUNK_1).encode() + b"\n\n"

    async def one_token_then_silence(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(STREAM_HEAD + chunked(first_event, 1000)[: -len(b"0\r\n\r\n")])  # the body goes on...
        await peer.wait_client_gone()  # ...never

    server = await serve(nursery, one_token_then_silence)
    async with SGLangClient.single_server(server.url, generation_read_timeout=0.2) as client:
        events: list[Any] = []
        with pytest.raises(UpstreamTimeout) as info, trio.fail_after(HANG_GUARD):
            async with client.generate_stream([1], return_logprob=False) as stream:
                async for event in stream:
                    events.append(event)
        assert client.pool_statistics().open_connections == 0
    assert [e.token_id for e in events if isinstance(e, Token)] == [5]
    assert info.value.phase == "read"
    assert info.value.partial is not None and info.value.partial.output_ids == (5,)
    await server.wait_closed(1)


@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "generate_stream"])
async def test_a_generation_without_any_answer_fails_with_a_read_timeout(nursery: trio.Nursery, streaming: bool):
    async def silent(peer: Peer) -> None:
        await peer.read_request()
        await peer.wait_client_gone()

    server = await serve(nursery, silent)
    async with SGLangClient.single_server(server.url, generation_read_timeout=0.2) as client:
        with pytest.raises(UpstreamTimeout) as info, trio.fail_after(HANG_GUARD):
            if streaming:
                async with client.generate_stream([1], return_logprob=False):
                    pass
            else:
                await client.generate([1])
        assert info.value.phase == "read" and client.pool_statistics().open_connections == 0
    await server.wait_closed(1)
