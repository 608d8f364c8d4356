"""Fixtures of the end-to-end suite (see ``harness.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from engine import EngineConfig, serve_engine
from proxy.cli import run_proxy
from proxy.config import ProxyConfig
from tests.e2e.harness import Proxy

StartProxy = Callable[..., Awaitable[Proxy]]


@pytest.fixture
def start_proxy(nursery: trio.Nursery, qwen3_path: Path, qwen3_5_path: Path) -> StartProxy:
    """``await start_proxy(model="qwen3", script=(...), engine={...}, **config)`` -> :class:`Proxy`.

    ``model`` is the trajectory build model (``qwen3`` or ``qwen3_5``) and picks the tokenizer; the parsers are
    local unless the test asks otherwise (the SGLang-backed ones are exercised in ``test_streaming.py``).
    ``worker_urls=False`` serves the engine on its own and gives the proxy only a router URL, as behind a gateway:
    aborts are then closed streams, so every upstream request streams (also a non-streaming client's)."""

    async def start(
        *, model: str = "qwen3", script: tuple[dict[str, Any], ...] | list[dict[str, Any]] = (),
        engine: dict[str, Any] | None = None, worker_urls: bool = True, **config: Any,
    ) -> Proxy:
        path = qwen3_path if model == "qwen3" else qwen3_5_path
        config.setdefault("tool_call_parse_backend", "local")
        config.setdefault("reasoning_parse_backend", "local")
        proxy_config = ProxyConfig(port=0, tokenizer_path=path, trajectory_build_model=model, **config)
        engine_config = EngineConfig(tokenizer_path=path, script_lines=tuple(script), **(engine or {}))
        if worker_urls:
            handle = await nursery.start(run_proxy, proxy_config, engine_config)
        else:
            engine_handle = await nursery.start(serve_engine, attrs.evolve(engine_config, port=0))
            routed = attrs.evolve(proxy_config, sglang_router_url=engine_handle.url)
            handle = attrs.evolve(await nursery.start(run_proxy, routed), engine=engine_handle)
        return Proxy(handle, path, model)

    return start
