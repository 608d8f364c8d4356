"""Where the context window comes from (``proxy/controllers/context_window.py``): the flag, the upstream, the
tokenizer; and when an unknown window is asked for again. Real upstreams on 127.0.0.1:0: the embedded engine, and
a bare quart-trio server that answers like an OpenAI-compatible server reporting no window."""

from __future__ import annotations

from pathlib import Path

import trio
from quart import jsonify
from quart_trio import QuartTrio

from engine import EngineConfig, serve_engine
from proxy.controllers.context_window import ContextWindow
from proxy.upstream.client import SGLangClient
from serving.http_server import serve_app


async def test_the_engine_reports_its_window_and_the_flag_overrides_it(nursery, qwen3_path: Path) -> None:
    engine = await nursery.start(serve_engine, EngineConfig(port=0, tokenizer_path=qwen3_path, context_length=4096))
    async with SGLangClient(engine.url) as upstream:
        window = ContextWindow(upstream, None, qwen3_path)
        assert (await window.tokens(), window.source) == (4096, "upstream")
        assert await ContextWindow(upstream, 1000, qwen3_path).tokens() == 1000


async def test_an_upstream_that_says_nothing_falls_back_to_the_tokenizer_and_is_asked_again_later(
    nursery, qwen3_path: Path, autojump_clock
) -> None:
    app = QuartTrio("silent")
    asked: list[str] = []

    @app.get("/v1/models")
    async def models():
        asked.append("/v1/models")
        return jsonify({"object": "list", "data": [{"id": "m", "object": "model"}]})

    url = await nursery.start(serve_app, app, "127.0.0.1", 0)
    async with SGLangClient(url) as upstream:
        window = ContextWindow(upstream, None, qwen3_path)
        assert (await window.tokens(), window.source) == (131072, "tokenizer")  # Qwen3's model_max_length
        await window.tokens()
        assert asked == ["/v1/models"]  # answered without a window: not asked again at once
        await trio.sleep(61)
        await window.tokens()
        assert asked == ["/v1/models"] * 2


async def test_an_unreachable_upstream_is_asked_again_by_the_next_request(nursery, qwen3_path: Path) -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with SGLangClient(f"http://127.0.0.1:{port}") as upstream:
        window = ContextWindow(upstream, None, qwen3_path)
        assert await window.tokens() == 131072
        await nursery.start(serve_engine, EngineConfig(port=port, tokenizer_path=qwen3_path, context_length=2048))
        assert (await window.tokens(), window.source) == (2048, "upstream")
