"""``/health`` tells the truth and ``/ready`` answers orchestrators (issue 15 item 6): a real unreachable upstream
(the proxy pointed at a closed port) and a real paused gate. The verdicts' rules, value by value, are in
``tests/proxy/test_health_verdict.py``."""

from __future__ import annotations

import socket

import httpx

from proxy.cli import run_proxy
from proxy.client import ProxyClient
from proxy.config import ProxyConfig


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_an_unreachable_upstream_makes_health_degraded_and_the_proxy_not_ready(nursery, qwen3_path) -> None:
    config = ProxyConfig(port=0, tokenizer_path=qwen3_path, sglang_router_url=f"http://127.0.0.1:{closed_port()}")
    proxy = await nursery.start(run_proxy, config)
    async with httpx.AsyncClient(base_url=proxy.url) as http:
        health = (await http.get("/health")).json()
        ready = await http.get("/ready")
    assert (health["status"], health["reasons"]) == ("degraded", ["upstream_unreachable"])
    assert health["upstream"]["reachable"] is False
    assert (ready.status_code, ready.json()) == (503, {"ready": False, "reasons": ["upstream_unreachable"]})


async def test_a_paused_gate_makes_the_proxy_not_ready_but_still_healthy(start_proxy) -> None:
    proxy = await start_proxy()
    async with ProxyClient(proxy.url) as trainer, httpx.AsyncClient(base_url=proxy.url) as http:
        before = await http.get("/ready")
        await trainer.pause()
        paused = await http.get("/ready")
        health = await trainer.health()
        await trainer.resume("v2")
        after = await http.get("/ready")
    assert (before.status_code, before.json()) == (200, {"ready": True, "reasons": []})
    assert (paused.status_code, paused.json()) == (503, {"ready": False, "reasons": ["paused"]})
    assert (health["status"], health["reasons"]) == ("ok", [])
    assert (after.status_code, after.json()["ready"]) == (200, True)


async def test_sessions_over_the_memory_budget_make_health_degraded_but_the_proxy_still_ready(start_proxy) -> None:
    """The budget is checked against what the registry and the store really hold: one recorded step of a
    conversation is more than a 1 KiB budget, none is less."""
    proxy = await start_proxy(memory_budget=1024)
    async with ProxyClient(proxy.url) as trainer, httpx.AsyncClient(base_url=proxy.url) as http:
        empty = await trainer.health()
        chat = {"model": "m", "messages": [{"role": "user", "content": "hello " * 200}], "max_tokens": 8,
                "session_id": "heavy"}
        assert (await http.post("/v1/chat/completions", json=chat)).status_code == 200
        full = await trainer.health()
        ready = await http.get("/ready")
    assert (empty["status"], empty["memory"]["budget"]) == ("ok", 1024)
    assert empty["memory"]["bytes_held"] < 1024
    assert (full["status"], full["reasons"]) == ("degraded", ["memory_budget_exceeded"])
    assert full["memory"]["bytes_held"] > 1024
    assert (ready.status_code, ready.json()["ready"]) == (200, True)
