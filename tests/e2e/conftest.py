"""Fixtures of the end-to-end suite (see ``harness.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from proxy.cli import run_proxy
from proxy.config import ProxyConfig
from proxy.upstream.engine import EngineConfig
from tests.e2e.harness import Proxy

StartProxy = Callable[..., Awaitable[Proxy]]


@pytest.fixture
def start_proxy(nursery: trio.Nursery, qwen3_path: Path, qwen3_5_path: Path) -> StartProxy:
    """``await start_proxy(model="qwen3", script=(...), engine={...}, **config)`` -> :class:`Proxy`.

    ``model`` is the trajectory build model (``qwen3`` or ``qwen3_5``) and picks the tokenizer; the parsers are
    local unless the test asks otherwise (the SGLang-backed ones are exercised in ``test_streaming.py``)."""

    async def start(
        *, model: str = "qwen3", script: tuple[dict[str, Any], ...] | list[dict[str, Any]] = (),
        engine: dict[str, Any] | None = None, **config: Any,
    ) -> Proxy:
        path = qwen3_path if model == "qwen3" else qwen3_5_path
        config.setdefault("tool_call_parse_backend", "local")
        config.setdefault("reasoning_parse_backend", "local")
        proxy_config = ProxyConfig(port=0, tokenizer_path=path, trajectory_build_model=model, **config)
        engine_config = EngineConfig(tokenizer_path=path, script_lines=tuple(script), **(engine or {}))
        handle = await nursery.start(run_proxy, proxy_config, engine_config)
        return Proxy(handle, path, model)

    return start
