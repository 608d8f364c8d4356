"""A real proxy on 127.0.0.1:0 whose services the test can reach, and sessions recorded through the registry.

``serve_stack`` is ``proxy.cli.run_proxy`` with the services kept: the embedded engine on its own port, the proxy's
app served by hypercorn, both in the caller's trio run. Tests of the rollout endpoints seed sessions through
``services.sessions`` (prepare, commit: what the chat-completions path does) so they do not depend on that path;
``ProxyThread`` runs the same stack in a background thread for sync tests (hypothesis, asyncio).
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from engine import EngineConfig, EngineHandle
from proxy.cli import run_proxy
from proxy.config import ProxyConfig
from proxy.services import ProxyServices

TOOLS = [
    {"type": "function", "function": {"name": "add", "description": "Add two numbers", "parameters": {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}},
]
SYSTEM = {"role": "system", "content": "You are a helpful calculator assistant."}
USER = {"role": "user", "content": "Please calculate 5 plus 3."}
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": json.dumps({"a": 5, "b": 3})}}]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "8"}
ANSWER = {"role": "assistant", "content": "5 plus 3 is 8."}


@attrs.frozen
class Stack:
    """A running proxy: its URL, its services, its engine."""

    url: str
    services: ProxyServices
    engine: EngineHandle


async def serve_stack(
    tokenizer_path: Path, *, config: Mapping[str, Any] | None = None, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    """Engine + proxy until cancelled; ``task_status.started(Stack)``."""
    async with trio.open_nursery() as nursery:
        handle = await nursery.start(
            run_proxy, ProxyConfig(port=0, tokenizer_path=tokenizer_path, **(config or {})),
            EngineConfig(tokenizer_path=tokenizer_path),
        )
        task_status.started(Stack(handle.url, handle.services, handle.engine))
        await trio.sleep_forever()


async def record_turn(
    services: ProxyServices,
    session_id: str,
    messages: list[dict[str, Any]],
    answer: dict[str, Any],
    *,
    tools: list[dict[str, Any]] | None = TOOLS,
    **prepare: Any,
) -> list[int]:
    """One step as the chat path records it: the model "generates" the template's rendering of ``answer``."""
    registry = services.sessions
    prepared = await registry.prepare(session_id, messages, tools=tools, **prepare)
    ids = registry.tokenizer.encode_text(registry.tokenizer.render_assistant(answer))
    logprobs = [-0.5 - i / 1000 for i in range(len(ids))]
    await registry.commit(prepared.handle, ids, logprobs, ["v0"] * len(ids), None, "stop", answer)
    return ids


async def record_calculator_session(services: ProxyServices, session_id: str, **prepare: Any) -> None:
    """Two steps of one chain: a tool call, then the answer after its result."""
    await record_turn(services, session_id, [SYSTEM, USER], CALL, **prepare)
    await record_turn(services, session_id, [SYSTEM, USER, CALL, RESULT], ANSWER, **prepare)


class ProxyThread:
    """``serve_stack`` in a background thread with its own trio run, for sync tests.

    ``call(async_fn, *args)`` runs a coroutine function in the proxy's trio run (e.g. to seed a session).
    """

    def __init__(self, tokenizer_path: Path) -> None:
        self._tokenizer_path = tokenizer_path
        self._started: queue.Queue[Any] = queue.Queue()
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)
        self.stack: Stack

    async def _main(self) -> None:
        try:
            with trio.CancelScope() as scope:
                self._cancel, self._token = scope, trio.lowlevel.current_trio_token()
                async with trio.open_nursery() as nursery:
                    self._started.put(await nursery.start(serve_stack, self._tokenizer_path))
        except BaseException as exc:  # reported to the starting thread
            self._started.put(exc)
            raise

    def __enter__(self) -> ProxyThread:
        self._thread.start()
        started = self._started.get(timeout=60)
        if isinstance(started, BaseException):
            raise started
        self.stack = started
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None and self._cancel is not None
        trio.from_thread.run_sync(self._cancel.cancel, trio_token=self._token)
        self._thread.join(timeout=30)

    def call(self, async_fn: Any, *args: Any) -> Any:
        return trio.from_thread.run(async_fn, *args, trio_token=self._token)
