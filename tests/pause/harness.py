"""A proxy on its scripted engine, over real sockets, with its services and engine in reach (preemptible generation).

``await nursery.start(serve_pause_stack, tokenizer_path, script=[...], engine={...}, workers=True, **config)``
serves the embedded engine and the proxy app in the test's trio run and reports a :class:`PauseStack`: the proxy's
URL, its services (``services.gate``, ``services.sessions``), the engine (``request_log``, ``wait_until``,
``active_requests``) and HTTP helpers. ``workers=False`` gives the proxy no worker URLs (a gateway-only set-up:
aborts happen by closing the stream, nothing is posted to ``/abort_request``); a list gives it those URLs.

Tests run on trio's ``MockClock`` with an autojump threshold (the ``mock_clock`` fixture of ``conftest.py``): a slow
engine ``token_rate`` makes generations long in mock time, and tests wait for *engine state* (``generated_at_least``),
never for wall-clock sleeps.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from engine import EngineConfig, EngineHandle, serve_engine
from proxy.cli import run_proxy
from proxy.config import ProxyConfig
from proxy.services import ProxyServices

#: a scripted answer of 16 plain words (a few dozen tokens), long enough to pause in the middle of
WORDS = " ".join(f"w{i}" for i in range(16))
MESSAGES = [{"role": "user", "content": "count"}]
NO_THINKING = {"enable_thinking": False}


@attrs.frozen
class PauseStack:
    """A running proxy, its services and its engine."""

    url: str
    services: ProxyServices
    engine_handle: EngineHandle

    @property
    def engine(self) -> Any:
        return self.engine_handle.engine

    @property
    def gate(self) -> Any:
        return self.services.gate

    async def post(self, path: str, body: Any = None, headers: Mapping[str, str] | None = None) -> httpx.Response:
        async with httpx.AsyncClient(timeout=None) as client:
            content = b"" if body is None else (body if isinstance(body, (bytes, str)) else json.dumps(body))
            return await client.post(self.url + path, content=content, headers={
                "content-type": "application/json", **(headers or {})
            })

    async def get(self, path: str) -> httpx.Response:
        async with httpx.AsyncClient(timeout=None) as client:
            return await client.get(self.url + path)

    async def chat(self, session_id: str, **body: Any) -> httpx.Response:
        """A non-streaming chat completion of ``MESSAGES`` (``body`` overrides), token extension on."""
        body = {"messages": MESSAGES, "chat_template_kwargs": NO_THINKING, "return_token_ids": True, **body}
        return await self.post("/v1/chat/completions", body, {"X-Session-Id": session_id})

    async def segments(self, session_id: str) -> list[dict[str, Any]]:
        await self.services.sessions.finalize(session_id)
        return await self.services.sessions.read(session_id=session_id)

    def requests_of(self, session_id: str) -> list[Any]:
        """The engine's finished requests of one session, oldest first."""
        return [record for record in self.engine.request_log if record.routing_key == session_id]


async def serve_pause_stack(
    tokenizer_path: Path,
    *,
    script: Sequence[Mapping[str, Any]] = (),
    engine: Mapping[str, Any] | None = None,
    workers: bool | Sequence[str] = True,
    task_status: Any = trio.TASK_STATUS_IGNORED,
    **config: Any,
) -> None:
    """Engine + proxy until cancelled; ``task_status.started(PauseStack)``."""
    async with trio.open_nursery() as nursery:
        handle = await nursery.start(serve_engine, EngineConfig(
            port=0, tokenizer_path=tokenizer_path, script_lines=tuple(script), **(engine or {})
        ))
        worker_urls = ((handle.url,) if workers else ()) if isinstance(workers, bool) else tuple(workers)
        config.setdefault("tool_call_parse_backend", "local")
        config.setdefault("reasoning_parse_backend", "local")
        proxy_config = ProxyConfig(
            port=0, tokenizer_path=tokenizer_path, sglang_router_url=handle.url, sglang_worker_urls=worker_urls,
            **config,
        )
        proxy = await nursery.start(run_proxy, proxy_config)
        task_status.started(PauseStack(proxy.url, proxy.services, handle))
        await trio.sleep_forever()


async def generated_at_least(engine: Any, count: int, *, requests: int = 1) -> None:
    """Wait until ``requests`` running engine requests have produced ``count`` tokens each (engine state, no sleep)."""
    await engine.wait_until(
        lambda: sum(len(state.output_ids) >= count for state in engine.active_requests()) >= requests
    )


async def engine_idle(engine: Any) -> None:
    """Wait until the engine runs nothing (the aborted requests finished their last decode step)."""
    await engine.wait_until(lambda: not engine.active_requests())


def sse_payloads(raw: bytes) -> list[Any]:
    frames = [frame[len(b"data: "):] for frame in raw.split(b"\n\n") if frame.strip()]
    return ["[DONE]" if frame == b"[DONE]" else json.loads(frame) for frame in frames]


def generated_versions(segment: Mapping[str, Any]) -> list[str | None]:
    """The recorded weight versions of the segment's generated tokens (those not in a step's context)."""
    versions: list[str | None] = []
    for record in segment["steps"]:
        versions += record["concat_versions"][record["concat_context_token_count"]:]
    return versions


__all__ = [
    "MESSAGES", "NO_THINKING", "WORDS", "PauseStack", "engine_idle", "generated_at_least", "generated_versions",
    "serve_pause_stack", "sse_payloads",
]
