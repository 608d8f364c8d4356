"""The end-to-end harness: a proxy (``run_proxy``) on its in-process scripted engine, over real sockets.

``await start_proxy(model="qwen3", script=[...], engine={...}, **proxy_config)`` serves a proxy for the test's
duration and returns a :class:`Proxy`: its URL, the engine handle (``engine.request_log``, ``wait_until``), the
official openai SDK clients, and the rollout endpoints (finalize, read, debug view) over HTTP.

The SDK and trio: ``openai.AsyncOpenAI`` runs on httpx2/anyio, which detects trio, so the async client is awaited
directly in trio tests; the sync ``openai.OpenAI`` runs in a worker thread (``trio.to_thread.run_sync``), and the
async client is also exercised under asyncio (``asyncio.run`` in a worker thread), the loop most agents use.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import httpx
import openai
import trio

from engine import EngineHandle
from proxy.cli import ProxyHandle
from proxy.families import load_tito_tokenizer

#: every test client fails fast: no SDK retries (a retry would hide the error under test)
SDK_OPTIONS = {"api_key": "not-needed", "max_retries": 0, "timeout": 60.0}

CALCULATOR_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} two integers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
    for name in ("add", "multiply")
]


def session_headers(session_id: str, **more: str) -> dict[str, str]:
    return {"X-Session-Id": session_id, **more}


@attrs.define(eq=False)
class Proxy:
    """A running proxy and its engine."""

    handle: ProxyHandle
    tokenizer_path: Path
    model: str

    @property
    def url(self) -> str:
        return self.handle.url

    @property
    def engine_handle(self) -> EngineHandle:
        assert self.handle.engine is not None
        return self.handle.engine

    @property
    def engine(self) -> Any:
        """The embedded engine (``request_log``, ``wait_until``, ``statistics()``)."""
        return self.engine_handle.engine

    @property
    def tito(self) -> Any:
        return load_tito_tokenizer(self.model, self.tokenizer_path)

    # -- SDK clients ------------------------------------------------------------------------------------------

    def async_client(self, **options: Any) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.url + "/v1", **{**SDK_OPTIONS, **options})

    def sync_client(self, **options: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", **{**SDK_OPTIONS, **options})

    async def in_thread(self, function: Callable[[openai.OpenAI], Any], **options: Any) -> Any:
        """``function(sync_client)`` in a worker thread (the sync SDK blocks)."""
        def run() -> Any:
            with self.sync_client(**options) as client:
                return function(client)

        return await trio.to_thread.run_sync(run)

    async def under_asyncio(self, coroutine_function: Callable[[openai.AsyncOpenAI], Any], **options: Any) -> Any:
        """``await coroutine_function(async_client)`` on an asyncio loop in a worker thread."""
        async def main() -> Any:
            async with self.async_client(**options) as client:
                return await coroutine_function(client)

        return await trio.to_thread.run_sync(lambda: asyncio.run(main()))

    # -- raw HTTP and the rollout endpoints --------------------------------------------------------------------

    async def post(self, path: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
        async with httpx.AsyncClient(timeout=None) as client:
            content = body if isinstance(body, (bytes, str)) else json.dumps(body)
            return await client.post(self.url + path, content=content, headers={
                "content-type": "application/json", **(headers or {})
            })

    async def chat(self, session_id: str, body: dict[str, Any], **headers: str) -> httpx.Response:
        return await self.post("/v1/chat/completions", body, session_headers(session_id, **headers))

    async def finalize(self, session_id: str, **fields: Any) -> dict[str, Any]:
        response = await self.post("/session/finalize", {"session_id": session_id, **fields})
        assert response.status_code == 200, response.text
        return response.json()

    async def segments(self, session_id: str) -> list[dict[str, Any]]:
        """Finalize (idempotent) and read the session's segments."""
        await self.finalize(session_id)
        response = await self.post("/trajectory/read", {"session_id": session_id})
        assert response.status_code == 200, response.text
        return response.json()["data"]

    async def debug(self, session_id: str) -> dict[str, Any] | None:
        async with httpx.AsyncClient(timeout=None) as client:
            response = await client.get(f"{self.url}/session/{session_id}")
        if response.status_code == 404:
            return None
        assert response.status_code == 200, response.text
        return response.json()

    def requests_of(self, session_id: str) -> list[Any]:
        """The engine's finished requests routed with this session key, oldest first."""
        return [record for record in self.engine.request_log if record.routing_key == session_id]


def generated_ids(tito: Any, output: str) -> list[int]:
    """What the scripted engine generates for ``output``: its tokens, then ``<|im_end|>``."""
    return tito.encode_text(output) + [tito.end_of_turn_id]


def assistant_echo(message: Any) -> dict[str, Any]:
    """An SDK message as the agent sends it back (without reasoning, as most agents do)."""
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls
        ]
    return out
