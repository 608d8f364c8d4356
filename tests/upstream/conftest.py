"""Fixtures for the client suite: the real embedded engine on 127.0.0.1:0, and a client pointed at it.

These tests run on trio's real clock: the client's httpx timeouts and drain bound are real seconds, which a
jumping mock clock would fire at once. No assertion depends on how long anything takes; waits are bounded with
``trio.fail_after`` only so that a bug fails instead of hanging.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from engine import EngineConfig, EngineHandle, serve_engine
from proxy.upstream.client import SGLangClient

StartEngine = Callable[..., Awaitable[EngineHandle]]

#: Upper bound for any wait in these tests (a hang guard, not a performance assertion).
HANG_GUARD = 30


@pytest.fixture
def start_engine(nursery: trio.Nursery, qwen3_path: Path) -> StartEngine:
    """``await start_engine(**config_fields)`` serves an engine for the test's duration."""

    async def start(**fields: Any) -> EngineHandle:
        fields.setdefault("tokenizer_path", qwen3_path)
        fields.setdefault("seed", 0)
        fields["port"] = 0
        return await nursery.start(serve_engine, EngineConfig(**fields))

    return start


@pytest.fixture
async def engine(start_engine: StartEngine) -> EngineHandle:
    return await start_engine()


@pytest.fixture
async def client(engine: EngineHandle) -> AsyncIterator[SGLangClient]:
    async with SGLangClient.single_server(engine.url) as c:
        yield c
