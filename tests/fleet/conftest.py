"""Fixtures of the fleet tests: proxies in this process over one shared store and one engine (``start_member``),
standing for proxy processes sharing a PostgreSQL store; ``test_fleet_balancer.py`` runs real processes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from engine import EngineConfig, EngineHandle, serve_engine
from proxy.cli import ProxyHandle, run_proxy
from proxy.config import ProxyConfig
from proxy.trajectory.store import TrajectoryStore

StartMember = Callable[..., Awaitable[ProxyHandle]]


@pytest.fixture
async def engine(nursery: trio.Nursery, qwen3_path: Path) -> EngineHandle:
    """One engine every member talks to (the fleet's SGLang)."""
    return await nursery.start(serve_engine, EngineConfig(port=0, tokenizer_path=qwen3_path))


@pytest.fixture
def start_member(nursery: trio.Nursery, qwen3_path: Path, engine: EngineHandle) -> StartMember:
    """``await start_member(store, **config)``: a proxy on 127.0.0.1:0 over ``store`` (shared by the caller) and
    the one engine (or ``router_url``'s); each call is another member of the fleet."""

    async def start(store: TrajectoryStore, *, router_url: str | None = None, **config: Any) -> ProxyHandle:
        proxy_config = ProxyConfig(
            port=0, tokenizer_path=qwen3_path, sglang_router_url=router_url or engine.url,
            tool_call_parse_backend="local",
            reasoning_parse_backend="local", **config,
        )
        return await nursery.start(lambda task_status: run_proxy(proxy_config, store=store, task_status=task_status))

    return start
