"""Behind a real SGLang Model Gateway (``smg`` 1.13 from PyPI, ``--policy consistent_hashing``, two embedded engines
as its workers): what a gateway changes must not change what the model saw (issue 14, items 1-3).

- A gateway drops ``null`` JSON fields and SGLang's default ``max_new_tokens`` is 128: an agent that sets no
  ``max_tokens`` must still get its whole answer (the proxy always sends a number, the rest of the window).
- ``smg`` serves ``/get_model_info`` but 404s ``/model_info``, and its ``/v1/models`` has no ``max_model_len``:
  ``/health`` is still ``ok`` and the window is still learnt (from ``/get_server_info``).
"""

from __future__ import annotations

import httpx

from engine import EngineConfig, serve_engine
from proxy.cli import run_proxy
from proxy.config import ProxyConfig
from tests.e2e.gateway import smg_gateway

LONG = " ".join(f"token{i}" for i in range(120))  # ~240 tokens
MESSAGES = [{"role": "user", "content": "Tell me a long story."}]


async def test_behind_smg_an_answer_without_max_tokens_is_whole_and_health_is_ok(nursery, qwen3_path) -> None:
    engines = [
        await nursery.start(serve_engine, EngineConfig(port=0, tokenizer_path=qwen3_path,
                                                       script_lines=({"session": "*", "output": LONG},) * 4))
        for _ in range(2)
    ]
    async with smg_gateway([engine.url for engine in engines]) as router:
        config = ProxyConfig(port=0, tokenizer_path=qwen3_path, sglang_router_url=router,
                             sglang_worker_urls=tuple(engine.url for engine in engines),
                             tool_call_parse_backend="local", reasoning_parse_backend="local")
        proxy = await nursery.start(run_proxy, config)
        async with httpx.AsyncClient(timeout=60.0, base_url=proxy.url) as client:
            response = await client.post("/v1/chat/completions", headers={"X-Session-Id": "agent-1"}, json={
                "messages": MESSAGES, "chat_template_kwargs": {"enable_thinking": False}})
            body = response.json()
            assert response.status_code == 200, body
            assert body["choices"][0]["message"]["content"] == LONG
            assert body["choices"][0]["finish_reason"] == "stop"
            assert body["usage"]["completion_tokens"] > 128
            health = (await client.get("/health")).json()
            assert health["status"] == "ok", health
            assert health["upstream"]["reachable"] and health["upstream"]["weight_version"] == "default"
            assert health["context_window"] == {"tokens": 32768, "source": "upstream"}
        # The gateway routed the session's request to one worker, with the session's routing key.
        served = [record for engine in engines for record in engine.engine.request_log
                  if record.routing_key == "agent-1"]
        assert len(served) == 1
