"""Graceful shutdown inside the process (issue 15, item 4): what the signal test cannot reach from outside.

``run_proxy`` on its embedded engine, stopped with ``services.lifecycle.request_stop()`` (what SIGTERM calls): requests
parked by a pause wait out the grace, then get 503 ``shutting_down`` and nothing of them is recorded; a request that
reaches the app once the stop began is refused with 503 before anything starts; ``run_proxy`` returns by itself.
"""

from __future__ import annotations

import functools
from pathlib import Path

import httpx
import trio

from engine import EngineConfig
from proxy.app import create_proxy_app
from proxy.cli import ProxyHandle, run_proxy
from proxy.config import ProxyConfig

BOUND = 60  # seconds; a bound on each wait, never asserted on


async def _start(nursery: trio.Nursery, qwen3_path: Path, grace: float, **engine) -> tuple[ProxyHandle, trio.Event]:
    """The proxy, and an event set when ``run_proxy`` returned on its own."""
    returned = trio.Event()

    async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
        await run_proxy(ProxyConfig(port=0, tokenizer_path=qwen3_path, shutdown_grace=grace),
                        EngineConfig(tokenizer_path=qwen3_path, **engine), task_status=task_status)
        returned.set()

    return await nursery.start(run), returned


def _chat(session: str, stream: bool) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "stream": stream,
            "session_id": session}


async def test_requests_parked_by_a_pause_wait_out_the_grace_then_get_503_and_nothing_is_recorded(
    nursery, qwen3_path: Path
) -> None:
    handle, returned = await _start(nursery, qwen3_path, grace=0.5)
    services = handle.services
    answers: dict[str, httpx.Response] = {}
    async with httpx.AsyncClient(timeout=BOUND) as client:
        assert (await client.post(handle.url + "/v1/rollout/pause")).status_code == 200
        async with trio.open_nursery() as clients:

            async def ask(session: str, stream: bool) -> None:
                answers[session] = await client.post(handle.url + "/v1/chat/completions", json=_chat(session, stream))

            clients.start_soon(ask, "parked-stream", True)
            clients.start_soon(ask, "parked-plain", False)
            with trio.fail_after(BOUND):
                while services.gate.statistics().waiting < 2:
                    await trio.sleep(0.01)
            services.lifecycle.request_stop()
            assert services.lifecycle.draining
    # Neither was resumed: both waited out the grace, then were cut before any byte was sent.
    for session in ("parked-stream", "parked-plain"):
        response = answers[session]
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "shutting_down"
        assert response.json()["error"]["type"] == "server_error"
    assert services.sessions.statistics().steps == 0
    assert services.gate.statistics().waiting == 0
    with trio.fail_after(BOUND):
        await returned.wait()
    assert services.lifecycle.statistics().state == "STOPPED"


async def test_a_request_that_reaches_the_app_after_the_stop_gets_503_and_starts_nothing(
    nursery, qwen3_path: Path
) -> None:
    # The listener is closed once the stop began, so a request can reach the app only through a connection that
    # was already open; the app itself (here through quart's test client, sharing the process's services) refuses.
    slow = {"session": "slow", "output": "Still thinking.", "eos": False, "token_rate": 20}
    handle, _ = await _start(nursery, qwen3_path, grace=BOUND, script_lines=(slow,))
    services = handle.services
    async with httpx.AsyncClient(timeout=BOUND) as client, trio.open_nursery() as clients:
        # One slow generation keeps the process draining (the stop waits for it).
        slow_chat = {**_chat("slow", False), "max_tokens": 4000}
        clients.start_soon(functools.partial(client.post, handle.url + "/v1/chat/completions", json=slow_chat))
        with trio.fail_after(BOUND):
            while services.gate.statistics().in_flight < 1:
                await trio.sleep(0.01)
        services.lifecycle.request_stop()
        app = create_proxy_app(services)
        async with app.test_app() as test_app:
            for stream in (False, True):
                response = await test_app.test_client().post("/v1/chat/completions", json=_chat("late", stream))
                assert response.status_code == 503
                assert (await response.get_json())["error"]["code"] == "shutting_down"
            # An orchestrator asking on such a connection hears the proxy is going (/ready, issue 15 item 6).
            ready = await test_app.test_client().get("/ready")
            assert ready.status_code == 503 and "draining" in (await ready.get_json())["reasons"]
        assert services.gate.statistics().in_flight == 1  # only the slow one: the late requests started nothing
        services.lifecycle.request_stop()  # a second stop cuts the slow one at once
    assert services.sessions.statistics().sessions == 1 and services.sessions.statistics().steps == 0
