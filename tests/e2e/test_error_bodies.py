"""No error body leaks internals, and every response carries a request id (issue 14, item 11).

A real proxy on 127.0.0.1:0 meets a matrix of failures: the upstream down, upstream error statuses (the engine's
fault flags), a stream cut (before and after the first bytes), SGLang refusing a request, a bug, and bad input.
For each error, plain or an SSE error event:

- the body holds no upstream URL, host or port, no ``http://``, no Python exception class name, errno or traceback;
- ``error.request_id`` equals the response's ``X-Request-Id`` header (``req_`` + 32 hex digits);
- for failures whose detail is not the client's (upstream, bug), the proxy's log has a line with that request id
  and the detail (the upstream URL, the exception).

Successful responses carry the header too, a different id each time.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from proxy.cli import run_proxy
from proxy.config import ProxyConfig
from tests.e2e.harness import Proxy

REQUEST_ID = re.compile(r"req_[0-9a-f]{32}")
#: what an error body must never hold
INTERNALS = re.compile(
    r"127\.0\.0\.1|localhost|://|Traceback|File \"|\bErrno\b|errno|\b[A-Z]\w*(?:Error|Exception)\b"
    r"|\bUpstream(?:Unavailable|Timeout|StreamCut|NotConfigured|HTTPError|ErrorChunk|ProtocolError)\b"
)
SYSTEM = {"role": "system", "content": "You are terse."}
MESSAGES = [SYSTEM, {"role": "user", "content": "hello"}]


@attrs.frozen
class Answer:
    """One exchange: status, the X-Request-Id header, and the error object (plain body or SSE error event)."""

    status: int
    request_id: str | None
    error: dict[str, Any] | None
    sse: bool = False


async def exchange(url: str, path: str, body: Any = None, *, method: str = "POST", stream: bool = False,
                   headers: dict[str, str] | None = None) -> Answer:
    content = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
    async with httpx.AsyncClient(timeout=60) as client:
        async with client.stream(method, url + path, content=content, headers={
            "content-type": "application/json", **(headers or {})
        }) as response:
            raw = b"".join([chunk async for chunk in response.aiter_bytes()])
    request_id = response.headers.get("x-request-id")
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [frame[len(b"data: "):] for frame in raw.split(b"\n\n") if frame]
        errors = [json.loads(event)["error"] for event in events if event.startswith(b'{"error"')]
        assert len(errors) <= 1 and (not errors or events[-1] == b"[DONE]"), raw
        return Answer(response.status_code, request_id, errors[0] if errors else None, sse=True)
    parsed = json.loads(raw) if raw else None
    error = parsed.get("error") if isinstance(parsed, dict) and response.status_code >= 400 else None
    return Answer(response.status_code, request_id, error)


def chat(proxy_url: str, session: str, body: dict[str, Any], **kwargs: Any):
    return exchange(proxy_url, "/v1/chat/completions", body, headers={"X-Session-Id": session}, **kwargs)


def assert_clean(answer: Answer, *, forbidden: tuple[str, ...] = ()) -> str:
    """The error names nothing internal and carries the header's request id; returns that id."""
    assert answer.error is not None, answer
    assert answer.request_id is not None and REQUEST_ID.fullmatch(answer.request_id), answer
    assert answer.error["request_id"] == answer.request_id
    text = json.dumps({key: value for key, value in answer.error.items() if key != "request_id"}, ensure_ascii=False)
    assert not INTERNALS.search(text), text
    for word in forbidden:
        assert word not in text, (word, text)
    return answer.request_id


def assert_logged(caplog: pytest.LogCaptureFixture, request_id: str, *details: str) -> None:
    """A log line names the request id, and the lines with that id hold every detail."""
    lines = []
    for record in caplog.records:
        message = record.getMessage()
        if request_id in message:
            trace = caplog.handler.formatter.formatException(record.exc_info) if record.exc_info else ""
            lines.append(message + trace)
    assert lines, f"no log line names {request_id}"
    for detail in details:
        assert any(detail in line for line in lines), (detail, lines)


def port_of(url: str) -> str:
    return url.rsplit(":", 1)[1].strip("/")


# -- the upstream down ---------------------------------------------------------------------------------------------


async def test_an_unreachable_upstream_leaks_neither_its_address_nor_the_exception(nursery, qwen3_path: Path,
                                                                                     caplog) -> None:
    caplog.set_level(logging.INFO)
    with trio.socket.socket() as sock:  # a port that was free a moment ago: connection refused
        await sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    dead = f"http://127.0.0.1:{port}"
    config = ProxyConfig(port=0, tokenizer_path=qwen3_path, sglang_router_url=dead, context_window=4096,
                         tool_call_parse_backend="local", reasoning_parse_backend="local")
    handle = await nursery.start(run_proxy, config)
    answers = [
        await chat(handle.url, "down", {"messages": MESSAGES}),
        await chat(handle.url, "down", {"messages": MESSAGES, "stream": True}),
        await exchange(handle.url, "/v1/models", method="GET"),
    ]
    ids = set()
    for answer in answers:
        assert (answer.status, answer.error["code"], answer.sse) == (502, "upstream_unavailable", False), answer
        request_id = assert_clean(answer, forbidden=(port,))
        assert_logged(caplog, request_id, f"127.0.0.1:{port}", "UpstreamUnavailable")
        ids.add(request_id)
    assert len(ids) == len(answers)


# -- upstream error statuses -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("upstream_status", "expected"),
    [(500, (502, "upstream_error")), (502, (502, "upstream_error")), (504, (502, "upstream_error")),
     (503, (503, "upstream_overloaded")), (429, (503, "upstream_overloaded")), (408, (503, "upstream_overloaded"))],
)
async def test_an_upstream_error_status_is_a_clean_error_with_the_tables_status(start_proxy, caplog, upstream_status,
                                                                               expected) -> None:
    proxy = await start_proxy(engine={"fault_error_every": 1, "fault_error_status": upstream_status})
    port = port_of(proxy.engine_handle.url)
    for stream in (False, True):
        answer = await chat(proxy.url, f"fault-{upstream_status}", {"messages": MESSAGES, "stream": stream})
        assert (answer.status, answer.error["code"]) == expected, answer
        assert answer.error["type"] == "upstream_error" and str(upstream_status) in answer.error["message"]
        request_id = assert_clean(answer, forbidden=(port, "Injected fault"))
        # The log has what the client does not: SGLang's own message and the URL it came from.
        assert_logged(caplog, request_id, "Injected fault", f"127.0.0.1:{port}/generate")


# -- stream cuts ---------------------------------------------------------------------------------------------------


async def test_a_stream_cut_is_a_clean_error_before_and_after_the_first_bytes(start_proxy, caplog) -> None:
    output = "A long enough answer to be cut in the middle of it."
    proxy = await start_proxy(
        script=[{"session": "*", "output": output}] * 4,
        engine={"fault_drop_stream_after": 3, "fault_drop_stream_every": 1},
        worker_urls=False,  # a non-streaming client's request streams upstream too (and is cut)
    )
    port = port_of(proxy.engine_handle.url)
    plain = await chat(proxy.url, "cut-plain", {"messages": MESSAGES})
    streamed = await chat(proxy.url, "cut-stream", {"messages": MESSAGES, "stream": True})
    assert (plain.status, plain.error["code"], plain.sse) == (502, "upstream_unavailable", False)
    assert (streamed.status, streamed.error["code"], streamed.sse) == (200, "upstream_unavailable", True)
    for answer in (plain, streamed):
        assert "stream cut" in answer.error["message"]
        request_id = assert_clean(answer, forbidden=(port,))
        assert_logged(caplog, request_id, "UpstreamStreamCut", f"127.0.0.1:{port}")


# -- SGLang refuses the request --------------------------------------------------------------------------------------


async def test_sglangs_refusal_is_400_upstream_rejected_quoting_its_reason_and_nothing_else(start_proxy,
                                                                                         caplog) -> None:
    # Without dynamic max_tokens the budget is sent as asked: more than the engine's context, which it refuses.
    proxy = await start_proxy(dynamic_max_tokens=False)
    port = port_of(proxy.engine_handle.url)
    for stream in (False, True):
        answer = await chat(proxy.url, "too-long", {"messages": MESSAGES, "max_tokens": 10**6, "stream": stream})
        assert (answer.status, answer.error["code"], answer.error["type"]) == (
            400, "upstream_rejected", "invalid_request_error"), answer
        assert "maximum context length" in answer.error["message"]  # SGLang's reason, quoted
        request_id = assert_clean(answer, forbidden=(port,))
        assert_logged(caplog, request_id, "maximum context length", f"127.0.0.1:{port}")
    view = await Proxy(proxy.handle, proxy.tokenizer_path, proxy.model).debug("too-long")
    assert view is None or view["steps"] == 0


# -- a bug ---------------------------------------------------------------------------------------------------------


async def test_a_bug_is_a_500_internal_error_whose_detail_is_only_in_the_log(start_proxy, caplog,
                                                                            monkeypatch) -> None:
    proxy = await start_proxy()

    async def broken_prepare(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("secret detail from http://10.9.8.7:30000")

    monkeypatch.setattr(type(proxy.handle.services.sessions), "prepare", broken_prepare)
    for stream in (False, True):
        answer = await chat(proxy.url, "bug", {"messages": MESSAGES, "stream": stream})
        assert (answer.status, answer.error["code"], answer.error["message"]) == (500, "internal_error",
                                                                                   "internal error")
        request_id = assert_clean(answer, forbidden=("secret", "10.9.8.7"))
        assert_logged(caplog, request_id, "KeyError", "secret detail from http://10.9.8.7:30000")


# -- bad input -----------------------------------------------------------------------------------------------------

BAD_INPUT = [
    ("POST", "/v1/chat/completions", b"{not json", {}, 400, "invalid_request"),
    ("POST", "/v1/chat/completions", b"\xff\xfe", {}, 400, "invalid_request"),
    ("POST", "/v1/chat/completions", b"[1, 2]", {"X-Session-Id": "s"}, 400, "invalid_request"),
    ("POST", "/v1/chat/completions", {"messages": MESSAGES}, {}, 400, "missing_session_id"),
    ("POST", "/v1/chat/completions", {"messages": MESSAGES, "temperature": "hot"}, {"X-Session-Id": "s"}, 400,
     "invalid_request"),
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\ud800"}]}', {"X-Session-Id": "s"},
     400, "invalid_request"),
    ("POST", "/v1/chat/completions", {"messages": MESSAGES, "n": 17}, {"X-Session-Id": "s"}, 400,
     "unsupported_parameter"),
    ("POST", "/v1/chat/completions", {"messages": "hi"}, {"X-Session-Id": "s"}, 400, "invalid_request"),
    ("POST", "/v1/chat/completions", {"messages": MESSAGES}, {"X-Session-Id": "x" * 300}, 400, "invalid_request"),
    ("POST", "/session/finalize", {"session_id": 3.5}, {}, 400, "invalid_request"),
    ("POST", "/trajectory/read", {"session_id": "nobody"}, {}, 404, "not_found"),
    ("GET", "/v1/nothing-here", None, {}, 404, "not_found"),
    ("POST", "/v1/models", {}, {}, 405, "method_not_allowed"),
    ("POST", "/v1/rollout/resume", {"weight_version": [7]}, {}, 400, "invalid_request"),
    ("POST", "/v1/rollout/resume", {"weight_version": "v2"}, {}, 409, "resume_refused"),
]


async def test_bad_input_gets_clean_4xx_errors_with_the_request_id(start_proxy) -> None:
    proxy = await start_proxy()
    for method, path, body, headers, status, code in BAD_INPUT:
        answer = await exchange(proxy.url, path, body, method=method, headers=headers)
        assert (answer.status, answer.error["code"] if answer.error else None) == (status, code), (path, body, answer)
        assert_clean(answer)


async def test_a_template_refusal_is_a_clean_400_with_the_templates_message_in_the_log(start_proxy, caplog) -> None:
    caplog.set_level(logging.INFO)
    proxy = await start_proxy(model="qwen3_5")
    # Qwen3.5's template raises on a system message that is not the first one.
    messages = [{"role": "user", "content": "hi"}, SYSTEM]
    answer = await chat(proxy.url, "template", {"messages": messages})
    assert (answer.status, answer.error["code"], answer.error["param"]) == (400, "invalid_request", "messages")
    assert "chat template cannot render" in answer.error["message"]
    request_id = assert_clean(answer)
    assert_logged(caplog, request_id, "template_error", "System message")


# -- success too -----------------------------------------------------------------------------------------------------


async def test_every_response_carries_its_own_request_id(start_proxy) -> None:
    proxy = await start_proxy(script=[{"session": "*", "output": "Hi."}] * 2)
    answers = [
        await chat(proxy.url, "ok", {"messages": MESSAGES}),
        await chat(proxy.url, "ok-stream", {"messages": MESSAGES, "stream": True}),
        await exchange(proxy.url, "/health", method="GET"),
        await exchange(proxy.url, "/v1/models", method="GET"),
        await exchange(proxy.url, "/trajectory/stats", method="GET"),
    ]
    for answer in answers:
        assert answer.status == 200 and answer.error is None, answer
        assert answer.request_id is not None and REQUEST_ID.fullmatch(answer.request_id)
    assert len({answer.request_id for answer in answers}) == len(answers)
