"""A chat completion whose step cannot be made durable is answered 503 ``store_unavailable`` (never a 500), over
the real generation controller and its embedded engine; the step stays in memory and a later finalize exports it."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from engine import EngineConfig, serve_engine
from proxy.api import ApiError, ChatCompletionRequest
from proxy.config import ProxyConfig
from proxy.services import ProxyServices
from proxy.upstream.client import SGLangClient

from .test_registry_restart import FailingJournalStore

MESSAGES = [{"role": "user", "content": "count"}]


async def close_at_exit(client: SGLangClient) -> None:
    try:
        await trio.sleep_forever()
    finally:
        await client.aclose()


async def test_a_step_the_store_cannot_journal_is_answered_503_store_unavailable(nursery, qwen3_path: Path, caplog):
    handle = await nursery.start(serve_engine, EngineConfig(
        port=0, tokenizer_path=qwen3_path, script_lines=({"session": "s", "output": "One."},),
    ))
    upstream = SGLangClient.single_server(handle.url)
    nursery.start_soon(close_at_exit, upstream)
    config = ProxyConfig(port=0, tokenizer_path=qwen3_path, tool_call_parse_backend="local",
                         reasoning_parse_backend="local")
    store = FailingJournalStore()
    store.failing = True
    services = ProxyServices.build(config, upstream, store)
    controller = services.generation_controller()
    request = ChatCompletionRequest.from_http(
        {"messages": MESSAGES, "chat_template_kwargs": {"enable_thinking": False}}, {"X-Session-Id": "s"}
    )
    generation = await controller.start(request, nursery)
    with pytest.raises(ApiError) as caught:
        await generation.result()
    assert (caught.value.status, caught.value.code) == (503, "store_unavailable")
    assert "No space left" not in caught.value.message and "No space left" not in caplog.text
    # Kept in memory: finalize exports it (the store's write works; only its journal failed).
    await services.sessions.finalize("s")
    segments = await services.sessions.read(session_id="s")
    assert len(segments) == 1 and segments[0]["num_turns"] == 1
