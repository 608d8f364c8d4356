"""Access control over real sockets (issue 15 item 5, ``proxy/access.py``): the API key with the official openai SDK,
the admin key with the trainer's ``ProxyClient``, JSON-only bodies, browser origins and CORS, the Host rule, keys
kept out of logs, the bind warning."""

from __future__ import annotations

import logging

import httpx
import openai
import pytest

from proxy.access import RouteClass, route_class
from proxy.app import create_proxy_app
from proxy.cli import run_proxy
from proxy.client import ProxyClient, ProxyError
from proxy.config import ProxyConfig

API_KEY = "sk-agent-5b1f0c"
ADMIN_KEY = "sk-admin-9e44d2"
MESSAGES = [{"role": "user", "content": "hi"}]
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


def sdk(proxy, api_key: str) -> openai.AsyncOpenAI:
    return proxy.async_client(api_key=api_key, default_headers={"X-Session-Id": "agent"})


async def ask(client: openai.AsyncOpenAI) -> str:
    completion = await client.chat.completions.create(model="m", messages=MESSAGES, extra_body=NO_THINKING)
    return completion.choices[0].message.content


# -- the API key (the agent API) -------------------------------------------------------------------------------------


async def test_api_key_with_the_openai_sdk_right_key_answers_wrong_or_missing_key_is_401(start_proxy) -> None:
    proxy = await start_proxy(script=[{"session": "*", "output": "Hello."}] * 4, api_key=API_KEY)
    async with sdk(proxy, API_KEY) as client:
        assert await ask(client) == "Hello."
        assert [card.id for card in (await client.models.list()).data]
    async with sdk(proxy, "sk-wrong") as client:
        with pytest.raises(openai.AuthenticationError) as wrong:
            await ask(client)
        with pytest.raises(openai.AuthenticationError):
            await client.models.list()
    assert wrong.value.status_code == 401 and wrong.value.code == "unauthorized"
    assert wrong.value.response.headers["www-authenticate"].startswith("Bearer")
    assert "sk-wrong" not in wrong.value.response.text
    async with httpx.AsyncClient(base_url=proxy.url) as http:
        missing = await http.get("/v1/models")
        by_x_api_key = await http.get("/v1/models", headers={"x-api-key": API_KEY})
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "unauthorized"
    assert missing.headers["www-authenticate"] == 'Bearer realm="dressage-proxy"'
    assert missing.json()["error"]["request_id"] == missing.headers["x-request-id"]
    assert by_x_api_key.status_code == 200  # the Anthropic SDK's header


async def test_the_admin_key_opens_the_agent_api_the_api_key_does_not_open_admin(start_proxy) -> None:
    proxy = await start_proxy(script=[{"session": "*", "output": "Hello."}], api_key=API_KEY, admin_key=ADMIN_KEY)
    async with sdk(proxy, ADMIN_KEY) as client:
        assert await ask(client) == "Hello."
    async with ProxyClient(proxy.url, admin_key=API_KEY) as trainer:
        with pytest.raises(ProxyError) as refused:
            await trainer.pause()
    assert (refused.value.status, refused.value.code) == (401, "unauthorized")
    async with ProxyClient(proxy.url, admin_key=ADMIN_KEY) as trainer:
        assert (await trainer.pause_state()).state == "RUNNING"


# -- the admin key (rollout control and trajectories) ----------------------------------------------------------------


async def test_admin_key_protects_rollout_control_and_trajectories_and_proxy_client_sends_it(
    start_proxy, monkeypatch
) -> None:
    proxy = await start_proxy(script=[{"session": "*", "output": "Hello."}], admin_key=ADMIN_KEY)
    monkeypatch.delenv("DRESSAGE_ADMIN_KEY", raising=False)
    async with ProxyClient(proxy.url) as stranger:
        for call in (stranger.pause, stranger.resume, stranger.pause_state, stranger.stats,
                     lambda: stranger.finalize_session("agent"), lambda: stranger.read_trajectory("agent"),
                     lambda: stranger.session_debug("agent")):
            with pytest.raises(ProxyError) as refused:
                await call()
            assert (refused.value.status, refused.value.code) == (401, "unauthorized")
        # Without an API key the agent API stays open.
        answer = await stranger.chat_completions({"messages": MESSAGES, **NO_THINKING}, session_id="agent")
        assert answer["choices"][0]["message"]["content"] == "Hello."
    async with ProxyClient(proxy.url, admin_key=ADMIN_KEY) as trainer:
        assert (await trainer.pause())["state"] == "PAUSED"
        assert (await trainer.pause_state()).state == "PAUSED"
        assert (await trainer.resume("v2"))["weight_version"] == "v2"
        assert (await trainer.finalize_session("agent")).segments == 1
        async with trainer.drain_trajectories("agent") as segments:  # the read and its ack are admin calls
            assert len(segments) == 1
        assert (await trainer.stats()).drained_segments == 1
    monkeypatch.setenv("DRESSAGE_ADMIN_KEY", ADMIN_KEY)
    async with ProxyClient(proxy.url) as from_env:
        assert (await from_env.pause_state()).state == "RUNNING"


async def test_health_without_the_admin_key_shows_only_its_verdict_ready_needs_no_key(start_proxy) -> None:
    proxy = await start_proxy(admin_key=ADMIN_KEY, api_key=API_KEY)
    async with ProxyClient(proxy.url, admin_key=None) as stranger:
        assert await stranger.health() == {"status": "ok", "reasons": []}
    async with httpx.AsyncClient(base_url=proxy.url) as http:
        ready = await http.get("/ready")
        with_api_key = (await http.get("/health", headers={"Authorization": f"Bearer {API_KEY}"})).json()
    assert (ready.status_code, ready.json()) == (200, {"ready": True, "reasons": []})
    assert set(with_api_key) == {"status", "reasons"}
    async with ProxyClient(proxy.url, admin_key=ADMIN_KEY) as trainer:
        full = await trainer.health()
    assert full["upstream"]["reachable"] and full["config"]["admin_key"] is True
    assert ADMIN_KEY not in str(full) and API_KEY not in str(full)


async def test_every_route_has_a_class_and_unknown_paths_need_the_admin_key(start_proxy) -> None:
    """A new route forces a decision here: its class comes from the rule, and this table must say it."""
    expected = {
        # the trajectory viewer (proxy/ui/viewer_routes.py)
        "/ui": RouteClass.ADMIN, "/ui/": RouteClass.ADMIN, "/ui/static/<name>": RouteClass.ADMIN,
        "/ui/api/sessions": RouteClass.ADMIN, "/ui/api/sessions/<path:session_id>": RouteClass.ADMIN,
        "/health": RouteClass.OPEN, "/ready": RouteClass.OPEN,
        "/v1/models": RouteClass.AGENT, "/v1/chat/completions": RouteClass.AGENT,
        "/v1/rollout/pause": RouteClass.ADMIN, "/v1/rollout/resume": RouteClass.ADMIN,
        "/v1/rollout/pause_state": RouteClass.ADMIN, "/session/finalize": RouteClass.ADMIN,
        "/session/<path:session_id>": RouteClass.ADMIN, "/trajectory/read": RouteClass.ADMIN,
        "/trajectory/ack": RouteClass.ADMIN,
        "/trajectory/stats": RouteClass.ADMIN, "/metrics": RouteClass.ADMIN,
        # the Anthropic Messages API (proxy/routes/messages.py)
        "/v1/messages": RouteClass.AGENT, "/v1/messages/count_tokens": RouteClass.AGENT,
        "/v1/responses": RouteClass.AGENT,  # proxy/routes/responses.py
    }
    proxy = await start_proxy()
    app = create_proxy_app(proxy.handle.services)
    rules = {rule.rule for rule in app.url_map.iter_rules() if rule.endpoint != "static"}
    assert rules == set(expected)
    assert {rule: route_class(rule) for rule in rules} == expected
    # Future surfaces: the OpenAI-compatible ones are agent traffic, the rest admin.
    assert route_class("/v1/responses") is route_class("/v1/messages") is RouteClass.AGENT
    assert route_class("/metrics") is route_class("/ui/") is route_class("/anything") is RouteClass.ADMIN
    assert route_class("//v1//rollout/pause") is RouteClass.ADMIN
    assert route_class("/v1/rollout") is RouteClass.ADMIN


# -- JSON-only bodies ------------------------------------------------------------------------------------------------


async def test_form_and_text_plain_posts_are_415_and_change_nothing(start_proxy) -> None:
    proxy = await start_proxy(script=[{"session": "*", "output": "Hello."}])
    async with httpx.AsyncClient(base_url=proxy.url) as http:
        form = await http.post("/v1/rollout/pause", data={"weight_version": "x"})
        plain = await http.post("/v1/chat/completions", headers={"X-Session-Id": "a", "Content-Type": "text/plain"},
                                content=b'{"messages": [{"role": "user", "content": "hi"}]}')
        latin1 = await http.post("/session/finalize", content=b'{"session_id": "a"}',
                                 headers={"Content-Type": "application/json; charset=latin-1"})
        state = (await http.get("/v1/rollout/pause_state")).json()
        utf8 = await http.post("/v1/chat/completions", json={"messages": MESSAGES, **NO_THINKING},
                               headers={"X-Session-Id": "b", "Content-Type": "application/json; charset=utf-8"})
    for refused in (form, plain, latin1):
        assert refused.status_code == 415, refused.text
        assert refused.json()["error"]["code"] == "unsupported_media_type"
    assert state["state"] == "RUNNING"
    assert utf8.status_code == 200 and utf8.json()["choices"][0]["message"]["content"] == "Hello."
    assert [record.routing_key for record in proxy.engine.request_log] == ["b"]


async def test_a_post_without_a_body_needs_no_content_type(start_proxy) -> None:
    """``ProxyClient.pause()`` and ``curl -X POST .../pause`` send no body and no Content-Type."""
    proxy = await start_proxy()
    async with httpx.AsyncClient(base_url=proxy.url) as http:
        paused = await http.post("/v1/rollout/pause")
        resumed = await http.post("/v1/rollout/resume")
    assert (paused.status_code, paused.json()["state"]) == (200, "PAUSED")
    assert (resumed.status_code, resumed.json()["state"]) == (200, "RUNNING")


# -- browser origins, CORS, Host ---------------------------------------------------------------------------------------


async def test_no_cors_by_default_and_a_foreign_origin_cannot_pause(start_proxy) -> None:
    proxy = await start_proxy()
    page = {"Origin": "https://evil.example"}
    async with httpx.AsyncClient(base_url=proxy.url) as http:
        preflight = await http.options("/v1/rollout/pause", headers={**page, "Access-Control-Request-Method": "POST"})
        pause = await http.post("/v1/rollout/pause", headers=page)  # a no-cors fetch: no body, no Content-Type
        state = (await http.get("/v1/rollout/pause_state")).json()["state"]
        own_origin = await http.get("/v1/rollout/pause_state", headers={"Origin": proxy.url})
    assert not any(name.startswith("access-control-") for name in preflight.headers)
    assert (pause.status_code, pause.json()["error"]["code"]) == (403, "forbidden")
    assert not any(name.startswith("access-control-") for name in pause.headers)
    assert state == "RUNNING"
    assert own_origin.status_code == 200 and "access-control-allow-origin" not in own_origin.headers


async def test_cors_origin_answers_preflights_and_allows_only_the_listed_origins(start_proxy) -> None:
    ui = "https://ui.example.org"
    proxy = await start_proxy(cors_origins=(ui,), admin_key=ADMIN_KEY)
    async with httpx.AsyncClient(base_url=proxy.url) as http:
        preflight = await http.options("/v1/rollout/pause", headers={
            "Origin": ui, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        listed = await http.get("/v1/rollout/pause_state",
                                headers={"Origin": ui, "Authorization": f"Bearer {ADMIN_KEY}"})
        listed_no_key = await http.get("/v1/rollout/pause_state", headers={"Origin": ui})
        other = await http.get("/v1/rollout/pause_state",
                               headers={"Origin": "https://evil.example", "Authorization": f"Bearer {ADMIN_KEY}"})
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == ui
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert preflight.headers["access-control-allow-headers"] == "authorization, content-type"
    assert listed.status_code == 200 and listed.headers["access-control-allow-origin"] == ui
    assert "x-request-id" in listed.headers["access-control-expose-headers"]
    # The page can read why it was refused.
    assert listed_no_key.status_code == 401 and listed_no_key.headers["access-control-allow-origin"] == ui
    assert other.status_code == 403 and "access-control-allow-origin" not in other.headers


async def test_a_loopback_proxy_refuses_a_foreign_host_name_dns_rebinding(start_proxy) -> None:
    proxy = await start_proxy()
    async with httpx.AsyncClient(base_url=proxy.url) as http:
        rebound = await http.post("/v1/rollout/pause", headers={"Host": "evil.example:8800"})
        port = proxy.url.rsplit(":", 1)[1]
        by_name = await http.get("/v1/rollout/pause_state", headers={"Host": f"localhost:{port}"})
        by_v6 = await http.get("/v1/rollout/pause_state", headers={"Host": f"[::1]:{port}"})
        state = (await http.get("/v1/rollout/pause_state")).json()["state"]
    assert (rebound.status_code, rebound.json()["error"]["code"]) == (403, "forbidden")
    assert by_name.status_code == by_v6.status_code == 200 and state == "RUNNING"


# -- keys stay secret; the bind warning --------------------------------------------------------------------------------


async def test_keys_never_reach_a_log_line(start_proxy, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    proxy = await start_proxy(script=[{"session": "*", "output": "Hello."}], api_key=API_KEY, admin_key=ADMIN_KEY)
    async with httpx.AsyncClient(base_url=proxy.url) as http:
        for key in (API_KEY, ADMIN_KEY, "sk-guess"):
            for headers in ({"Authorization": f"Bearer {key}"}, {"x-api-key": key}):
                await http.post("/v1/chat/completions", headers={**headers, "X-Session-Id": "s"},
                                content=b"{not json")  # an error answer: the mapping logs it
                await http.post("/session/finalize", headers=headers, json={"session_id": 7.5})
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert caplog.records  # the error paths did log
    for key in (API_KEY, ADMIN_KEY, "sk-guess"):
        assert key not in logged


async def test_binding_beyond_the_loopback_without_an_admin_key_warns_at_start(nursery, qwen3_path, caplog) -> None:
    # A log line (WARNING) like every start-up line, in the process's log format (proxy/observability/logs.py).
    await nursery.start(run_proxy, ProxyConfig(host="0.0.0.0", port=0, tokenizer_path=qwen3_path))
    assert "warning: listening on 0.0.0.0 without an admin key" in caplog.text
    caplog.clear()
    await nursery.start(run_proxy, ProxyConfig(host="0.0.0.0", port=0, tokenizer_path=qwen3_path,
                                               admin_key=ADMIN_KEY))
    await nursery.start(run_proxy, ProxyConfig(port=0, tokenizer_path=qwen3_path))
    assert "without an admin key" not in caplog.text
