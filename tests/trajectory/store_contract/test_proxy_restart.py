"""A real proxy (``run_proxy`` on its embedded engine) on a durable store: a finalized session's segments survive a
restart of the proxy on the same SQLite file or PostgreSQL database, exactly as they were read before it, and a
draining read after the restart still gets them (the store, not the process, held them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from engine import EngineConfig
from proxy.cli import run_proxy
from proxy.config import ProxyConfig

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello 😀."}]


async def serve(store: str, qwen3_path: Path, session: str, work: Any) -> Any:
    """Run a proxy on ``store`` for ``work(client, url)``, then stop it (the store is flushed and closed)."""
    config = ProxyConfig(port=0, tokenizer_path=qwen3_path, trajectory_build_model="qwen3", store=store,
                         tool_call_parse_backend="local", reasoning_parse_backend="local")
    engine = EngineConfig(tokenizer_path=qwen3_path, script_lines=({"session": session, "output": "Hello there!"},))
    async with trio.open_nursery() as nursery:
        handle = await nursery.start(run_proxy, config, engine)
        async with httpx.AsyncClient(base_url=handle.url, timeout=60) as client:
            result = await work(client)
        nursery.cancel_scope.cancel()
    return result


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'proxy.sqlite3'}"
    return request.getfixturevalue("postgres_server").fresh_database("proxy")


async def test_finalized_segments_survive_a_proxy_restart(store_url, qwen3_path):
    session = "restart-1"

    async def first_life(client: httpx.AsyncClient) -> list[dict[str, Any]]:
        answer = await client.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES},
                                   headers={"X-Session-Id": session})
        assert answer.status_code == 200, answer.text
        finalized = await client.post("/session/finalize", json={"session_id": session})
        assert finalized.status_code == 200, finalized.text
        read = await client.post("/trajectory/read", json={"session_id": session})
        assert read.status_code == 200, read.text
        return read.json()["data"]

    async def second_life(client: httpx.AsyncClient) -> list[dict[str, Any]]:
        read = await client.post("/trajectory/read", json={"session_id": session, "drain": True})
        assert read.status_code == 200, read.text
        return read.json()["data"]

    before = await serve(store_url, qwen3_path, session, first_life)
    assert len(before) == 1 and before[0]["token_ids"]
    after = await serve(store_url, qwen3_path, session, second_life)
    assert after == before
