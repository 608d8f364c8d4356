"""Fixtures for the engine suite: a real engine served with hypercorn on 127.0.0.1:0, and httpx clients."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from engine import EngineConfig, EngineHandle, serve_engine

StartEngine = Callable[..., Awaitable[EngineHandle]]


@pytest.fixture
def start_engine(nursery: trio.Nursery, qwen3_path: Path) -> StartEngine:
    """``await start_engine(**config_fields)`` serves an engine for the test's duration (Qwen3 tokenizer default)."""

    async def start(**fields: Any) -> EngineHandle:
        fields.setdefault("tokenizer_path", qwen3_path)
        fields["port"] = 0
        return await nursery.start(serve_engine, EngineConfig(**fields))

    return start


@pytest.fixture
async def engine(start_engine: StartEngine) -> EngineHandle:
    return await start_engine()


def client_for(handle: EngineHandle) -> httpx.AsyncClient:
    # timeout=None: tests may run on a jumping mock clock, where httpx's timeouts would fire at once.
    return httpx.AsyncClient(base_url=handle.url, timeout=None)


@pytest.fixture
async def client(engine: EngineHandle) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(engine) as c:
        yield c


async def read_sse(response: httpx.Response) -> list[Any]:
    """All events of an SSE response: decoded JSON objects, and the string ``"[DONE]"``. Checks the framing."""
    raw = b"".join([chunk async for chunk in response.aiter_bytes()])
    assert raw.endswith(b"\n\n"), raw[-50:]
    events: list[Any] = []
    for frame in raw.split(b"\n\n")[:-1]:
        assert frame.startswith(b"data: "), frame[:50]
        payload = frame[len(b"data: "):]
        events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return events


async def stream_events(client: httpx.AsyncClient, body: dict[str, Any], **kwargs: Any) -> list[Any]:
    async with client.stream("POST", "/generate", json={**body, "stream": True}, **kwargs) as response:
        assert response.status_code == 200, await response.aread()
        return await read_sse(response)


CHAT_PROMPT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n"
)
