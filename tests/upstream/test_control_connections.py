"""Control calls have connections of their own (issue 21 item 3): with every generation connection held by an open
stream, an abort, the information routes a health check reads, and a pause with its continue still go through,
instead of waiting for a stream to end (and failing on the pool timeout)."""

from __future__ import annotations

import trio

from proxy.upstream.client import SGLangClient
from proxy.upstream.events import FinishAbort

from .conftest import HANG_GUARD, StartEngine
from .test_client import LONG, PROMPT, Collector


async def test_control_calls_pass_streams_holding_every_generation_connection(start_engine: StartEngine):
    handle = await start_engine(token_rate=100)
    # Two generation connections, both taken by endless streams; a pool wait would fail after 5 s (not a timing
    # assertion: on a client that queues control calls behind streams, the abort below raises UpstreamTimeout).
    async with SGLangClient.single_server(handle.url, max_connections=2, pool_timeout=5) as client:
        streams = [Collector(), Collector()]
        async with trio.open_nursery() as nursery:
            for collector in streams:
                nursery.start_soon(collector.consume, client, PROMPT, LONG)
            with trio.fail_after(HANG_GUARD):
                for collector in streams:
                    await collector.wait_tokens(2)
                assert client.pool_statistics().active_connections == 2  # every generation slot is held
                assert (await client.server_info())["incremental_streaming_output"] is False
                assert (await client.model_info()).weight_version == "default"
                assert [card.id for card in await client.models()]
                await client.pause_generation("in_place")
                await client.continue_generation()
                for collector in streams:
                    assert collector.rid is not None and await client.abort(collector.rid) is True
    for collector in streams:
        assert collector.final.finish_reason == FinishAbort("Aborted")
