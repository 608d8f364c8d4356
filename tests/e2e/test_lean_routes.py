"""The lean path (``proxy/lean_http.py``) answers exactly as the quart route it replaces on the hot path.

One proxy's services are served twice: by the app as the proxy runs it (``POST /v1/chat/completions`` on the lean
path) and by the same app built with ``lean_routes=False`` (the route through quart's request and response objects).
The same requests, valid and junk, go to both; status, body (request ids and the answer's id and time set aside)
and response headers (``date`` and the ids set aside) must be the same. The body limits (413, 408) and the rest of
``tests/e2e`` run against the lean path too (it is the default).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import httpx
import trio

from proxy.app import create_proxy_app
from proxy.http_limits import http_limits
from proxy.lean_http import LEAN_ROUTES_KEY, ScopeHeaders
from serving.http_server import serve_app

MESSAGES = [{"role": "user", "content": "Say hello."}]
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
VOLATILE_HEADERS = {"date", "x-request-id", "request-id", "content-length"}


def normalized(body: bytes, session: str) -> Any:
    """The body with what differs between two runs of one request made equal: request ids, the answer's id and
    time, the session id."""
    text = body.decode("utf-8").replace(session, "SESSION")
    text = re.sub(r"req_[0-9a-f]{32}", "req_ID", text)
    text = re.sub(r'"id":"chatcmpl-[^"]*"', '"id":"ID"', text)
    text = re.sub(r'"created":\d+', '"created":0', text)
    text = re.sub(r'"id":"call_[^"]*"', '"id":"CALL"', text)
    text = re.sub(r"(msg|resp|rs|fc)_[0-9a-zA-Z]+", r"\1_ID", text)
    text = re.sub(r'"created_at":[0-9.]+', '"created_at":0', text)
    if text.startswith("event: "):  # an Anthropic stream: its text deltas added up, the kinds of its events
        events = [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")]
        deltas = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
        return deltas, sorted({e["type"] for e in events})
    if text.startswith("data: "):  # a stream: how its deltas are cut depends on timing, what they add up to not
        events = [json.loads(e[6:]) for e in text.split("\n\n") if e.startswith("data: {")]
        content = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
        return content, [c["finish_reason"] for e in events for c in e["choices"]][-1], text.endswith("[DONE]\n\n")
    try:
        return json.loads(text)
    except ValueError:
        return text


def answer_of(response: httpx.Response, session: str) -> tuple[int, dict[str, str], Any]:
    headers = {k: v.replace(session, "SESSION") for k, v in response.headers.items() if k not in VOLATILE_HEADERS}
    return response.status_code, headers, normalized(response.content, session)


#: (name, headers, raw body or a JSON body): every one answered alike by both paths
ANTHROPIC = {"anthropic-version": "2023-06-01"}
MESSAGES_CASES: list[tuple[str, dict[str, str], Any]] = [
    ("messages valid", ANTHROPIC, {"model": "m", "max_tokens": 64, "messages": MESSAGES}),
    ("messages valid stream", ANTHROPIC, {"model": "m", "max_tokens": 64, "messages": MESSAGES, "stream": True}),
    ("messages no max_tokens", ANTHROPIC, {"model": "m", "messages": MESSAGES}),
    ("messages not json", ANTHROPIC, b"{nope"),
    ("messages over the body limit", ANTHROPIC, {"model": "m", "max_tokens": 8,
                                                 "messages": [{"role": "user", "content": "x" * 5000}]}),
]
RESPONSES_CASES: list[tuple[str, dict[str, str], Any]] = [
    ("responses valid", {}, {"model": "m", "input": "Say hello.", "store": False}),
    ("responses bad input", {}, {"model": "m", "input": 42}),
    ("responses not json", {}, b"[nope"),
]
CASES: list[tuple[str, dict[str, str], Any]] = [
    ("valid", {}, {"messages": MESSAGES, **NO_THINKING}),
    ("valid stream", {}, {"messages": MESSAGES, "stream": True, **NO_THINKING}),
    ("not json", {}, b"{not json"),
    ("empty body", {}, b""),
    ("array body", {}, b"[1, 2]"),
    ("no messages", {}, {"model": "x"}),
    ("bad role", {}, {"messages": [{"role": "wizard", "content": "x"}]}),
    ("bad temperature", {}, {"messages": MESSAGES, "temperature": "hot"}),
    ("nan", {}, b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}'),
    ("lone surrogate", {}, b'{"messages": [{"role": "user", "content": "\\ud800"}]}'),
    ("not utf-8", {}, b'{"messages": [{"role": "user", "content": "\xff"}]}'),
    ("bad idempotency key", {"Idempotency-Key": "\u00e9"}, {"messages": MESSAGES}),
    ("two idempotency keys", {"Idempotency-Key": "a, b"}, {"messages": MESSAGES}),
    ("no session", {"X-Session-Id": ""}, {"messages": MESSAGES}),
    ("over the body limit", {}, {"messages": [{"role": "user", "content": "x" * 5000}]}),
]


async def test_the_lean_path_answers_as_the_quart_route_does(start_proxy, nursery: trio.Nursery) -> None:
    script = [{"session": "*", "output": "Hello there."} for _ in range(12)]
    proxy = await start_proxy(script=script, max_body_bytes=4096)
    services = proxy.handle.services
    # The running proxy serves the chat route on the lean path; a second app on the same services, through quart.
    lean = create_proxy_app(services).extensions[LEAN_ROUTES_KEY]
    assert {("POST", "/v1/chat/completions"), ("POST", "/v1/messages"), ("POST", "/v1/responses")} <= lean.keys()
    quart_url = await nursery.start(functools.partial(
        serve_app, create_proxy_app(services, lean_routes=False), "127.0.0.1", 0,
        limits=http_limits(services.config)))
    seen = {}
    cases = [("/v1/chat/completions", *case) for case in CASES]
    cases += [("/v1/messages", *case) for case in MESSAGES_CASES]
    cases += [("/v1/responses", *case) for case in RESPONSES_CASES]
    for path, name, headers, body in cases:
        answers = []
        for which, url in (("lean", proxy.url), ("quart", quart_url)):
            session = f"{which}-{len(seen)}"
            sent: dict[str, Any] = {"X-Session-Id": session, "Content-Type": "application/json", **headers}
            sent = {name: value.encode("utf-8") for name, value in sent.items()}  # raw bytes: a non-ASCII key too
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            async with httpx.AsyncClient(base_url=url) as http:
                response = await http.post(path, content=content, headers=sent)
            answers.append(answer_of(response, session))
        seen[name] = answers
        assert answers[0] == answers[1], name
    assert seen["valid"][0][0] == 200 and seen["valid"][0][2]["choices"][0]["message"]["content"] == "Hello there."
    assert seen["valid stream"][0][1]["content-type"] == "text/event-stream"
    assert seen["over the body limit"][0][0] == 413 and seen["over the body limit"][0][1]["connection"] == "close"
    assert seen["not json"][0][0] == 400 and seen["no session"][0][0] == 400
    assert seen["messages valid"][0][0] == 200 and seen["messages valid"][0][2]["type"] == "message"
    assert seen["messages not json"][0][2]["type"] == "error"  # Anthropic's shape, from the outer wrapper
    assert seen["messages over the body limit"][0][0] == 413
    assert seen["responses valid"][0][0] == 200 and seen["responses bad input"][0][0] == 400


async def test_other_methods_and_spellings_of_the_path_still_reach_quart(start_proxy) -> None:
    """Only the exact method and path are lean: a GET is quart's 405, a doubled slash quart's own answer."""
    proxy = await start_proxy()
    async with httpx.AsyncClient(base_url=proxy.url) as http:
        get = await http.get("/v1/chat/completions")
        options = await http.request("OPTIONS", "/v1/chat/completions")
    assert get.status_code == 405 and get.json()["error"]["request_id"] == get.headers["x-request-id"]
    assert "POST" in options.headers.get("allow", "")


def test_scope_headers_read_like_a_clients_headers() -> None:
    headers = ScopeHeaders([(b"x-session-id", b"s1"), (b"Idempotency-Key", b"a"), (b"idempotency-key", b"b")])
    assert headers.get("X-Session-Id") == "s1" and headers.get("absent") is None
    assert headers.getlist("IDEMPOTENCY-KEY") == ["a", "b"]
    assert list(headers.items())[0] == ("x-session-id", "s1") and "x-session-id" in headers
