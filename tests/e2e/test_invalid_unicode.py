"""Invalid Unicode never costs data (issue 13): a string UTF-8 cannot encode (a lone UTF-16 surrogate, which JSON
spells ``"\\ud800"``), anywhere in the body of any endpoint, keys included, is a 400 ``invalid_request`` naming the
field, and the session it targets goes on to export exactly what it exports without the bad request.

Two real proxies (embedded engine, real tokenizer, 127.0.0.1:0, each in its own trio run in a background thread):
``baseline`` runs a control session; ``subject`` runs the same control session with hypothesis' bad requests
interleaved. The two exports (``/trajectory/read`` bytes) must be identical. Before issue 13 an unrendered field
(a tool-call id, ``reward_info``...) was accepted with 200 and lost the whole session at finalize (409
``session_aborted``), and rendered text was a 500.

Bodies are sent as raw bytes: ``json.dumps`` (``ensure_ascii``) writes a lone surrogate as its ``\\uXXXX`` escape,
exactly what a client with such a string sends. The expected ``param`` is computed by :func:`first_bad_path` from
what the server parses (``json.loads`` of those bytes: an escaped surrogate pair is a valid character again).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.api.strategies import bad_json, bad_text, first_bad_path, wire
from tests.rollout.harness import TOOLS, ProxyThread

SYSTEM = {"role": "system", "content": "You are a helpful calculator assistant."}
USER = {"role": "user", "content": "Please calculate 5 plus 3."}
FOLLOW_UP = {"role": "user", "content": "Thanks. Now multiply that by 2."}
FINAL = {"reward_info": {"reward": 1.0}, "instance_id": "prompt-17"}


# -- the bodies the bad strings are planted in (each valid as it is) ------------------------------------------------


def rich_chat(session_id: str) -> dict[str, Any]:
    """A chat-completions body with every kind of string field (each is a site for a bad string)."""
    return {
        "model": "dressage/embedded-engine",
        "messages": [
            {"role": "system", "content": "You are a calculator."},
            {"role": "user", "content": [{"type": "text", "text": "Add 5 and 3."}], "name": "alice"},
            {"role": "assistant", "content": "Calling add.", "reasoning_content": "Use the tool.",
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "add", "arguments": "{\"a\": 5, \"b\": 3}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "name": "add", "content": "8"},
            {"role": "user", "content": "Thanks, now double it."},
        ],
        "tools": [{"type": "function", "function": {
            "name": "add", "description": "Add two numbers",
            "parameters": {"type": "object", "required": ["a", "b"], "properties": {
                "a": {"type": "number", "description": "first"},
                "b": {"type": "number", "enum": [1, "two"], "examples": [{"x": "y"}]}}}}}],
        "tool_choice": "auto",
        "stop": ["</stop>", "STOP"],
        "chat_template_kwargs": {"enable_thinking": True, "note": {"k": ["v"]}},
        "user": "agent-7",
        "metadata": {"run": "r1"},
        "session_id": session_id,
        "instance_id": "inst-1",
        "turn_id": "turn-1",
        "max_tokens": 32,
        "temperature": 0.5,
    }


def rich_finalize(session_id: str) -> dict[str, Any]:
    return {"session_id": session_id, "instance_id": "inst-1", "rollout_id": "rollout-1",
            "reward_info": {"reward": 1.0, "judge": {"verdict": "correct", "notes": ["ok", 2, None]}}}


def rich_read(session_id: str) -> dict[str, Any]:
    return {"session_id": session_id, "trajectory_id": f"{session_id}:0", "drain": False}


def rich_resume(session_id: str) -> dict[str, Any]:
    return {"weight_version": "v-1"}


ENDPOINTS = {
    "/v1/chat/completions": rich_chat,
    "/session/finalize": rich_finalize,
    "/trajectory/read": rich_read,
    "/v1/rollout/resume": rich_resume,
}


def sites(value: Any, path: tuple = ()) -> Iterator[tuple[str, tuple]]:
    """Every place of a body a bad string can go: ``("value", path)`` for every value (leaves and containers),
    ``("key", path)`` for every object key."""
    if path:
        yield "value", path
    if isinstance(value, dict):
        for key, child in value.items():
            yield "key", path + (key,)
            yield from sites(child, path + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from sites(child, path + (index,))


SITES = [(endpoint, site) for endpoint, build in ENDPOINTS.items() for site in sites(build("ctrl"))]


def planted(value: Any, kind: str, path: tuple, bad: Any) -> Any:
    """``value`` with the value (or the key) at ``path`` replaced by ``bad``; key order is kept."""
    head, rest = path[0], path[1:]
    if isinstance(value, list):
        return [planted(child, kind, rest, bad) if i == head and rest else (bad if i == head else child)
                for i, child in enumerate(value)]
    out = {}
    for key, child in value.items():
        if key != head:
            out[key] = child
        elif rest:
            out[key] = planted(child, kind, rest, bad)
        elif kind == "key":
            out[bad] = child
        else:
            out[key] = bad
    return out


# -- strategies ------------------------------------------------------------------------------------------------------


@st.composite
def bad_requests(draw: st.DrawFn) -> tuple[str, str, tuple, Any, int]:
    """(endpoint, site kind, site path, the bad value or key, when: 1 = after step 1, 2 = before finalize)."""
    endpoint, (kind, path) = draw(st.sampled_from(SITES))
    bad = draw(bad_text) if kind == "key" else draw(bad_text | bad_json)
    return endpoint, kind, path, bad, draw(st.sampled_from([1, 2]))


# -- the two proxies and the control session -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def baseline(qwen3_path: Path) -> Iterator[httpx.Client]:
    with ProxyThread(qwen3_path) as proxy, httpx.Client(base_url=proxy.stack.url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def subject(qwen3_path: Path) -> Iterator[httpx.Client]:
    with ProxyThread(qwen3_path) as proxy, httpx.Client(base_url=proxy.stack.url, timeout=60) as client:
        yield client


SESSION_NUMBERS = itertools.count()


def chat(client: httpx.Client, session_id: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    response = client.post("/v1/chat/completions", headers={"X-Session-Id": session_id},
                           json={"messages": messages, "tools": TOOLS, "max_tokens": 64})
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]


def tool_results(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "tool", "tool_call_id": call["id"], "content": "8"} for call in answer.get("tool_calls") or ()]


def send_bad(client: httpx.Client, session_id: str, request: tuple) -> None:
    endpoint, kind, path, bad, _ = request
    raw = wire(planted(ENDPOINTS[endpoint](session_id), kind, path, bad))
    expected = first_bad_path(json.loads(raw))
    assert expected is not None
    response = client.post(endpoint, content=raw,
                           headers={"Content-Type": "application/json", "X-Session-Id": session_id})
    assert response.status_code == 400, (endpoint, raw, response.text)
    error = response.json()["error"]
    assert (error["code"], error["type"], error["param"]) == ("invalid_request", "invalid_request_error", expected)
    assert "valid Unicode" in error["message"]


def control_session(client: httpx.Client, session_id: str, bad: list[tuple] = ()) -> bytes:
    """Two steps (a tool call, then the answer), finalize, read: the export's bytes. ``bad`` requests are sent
    after step 1 or before finalize, each at the control session."""
    answer = chat(client, session_id, [SYSTEM, USER])
    for request in bad:
        if request[-1] == 1:
            send_bad(client, session_id, request)
    history = [SYSTEM, USER, answer, *tool_results(answer), FOLLOW_UP]
    chat(client, session_id, history)
    for request in bad:
        if request[-1] == 2:
            send_bad(client, session_id, request)
    finalized = client.post("/session/finalize", json={"session_id": session_id, **FINAL})
    assert finalized.status_code == 200, finalized.text
    read = client.post("/trajectory/read", json={"session_id": session_id})
    assert read.status_code == 200 and read.json()["data"], read.text
    return read.content


# -- tests ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_the_bodies_the_bad_strings_are_planted_in_are_valid_as_they_are(subject: httpx.Client, endpoint) -> None:
    # Without the bad string, no site is a 400: the refusals below are the bad string's alone.
    session_id = "valid-" + endpoint.strip("/").replace("/", "-")
    response = subject.post(endpoint, content=wire(ENDPOINTS[endpoint](session_id)),
                            headers={"Content-Type": "application/json", "X-Session-Id": session_id})
    # Read: the session has no segment (404); resume: a new version while running (409 resume_refused).
    assert response.status_code in (200, 404, 409), response.text


def test_the_control_session_exports_the_same_bytes_on_both_proxies(baseline, subject) -> None:
    assert control_session(baseline, "twin") == control_session(subject, "twin")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(bad=st.lists(bad_requests(), min_size=1, max_size=3))
@example(bad=[("/v1/chat/completions", "value", ("messages", 2, "tool_calls", 0, "function", "arguments"),
               "\ud800", 1)])
@example(bad=[("/v1/chat/completions", "value", ("messages", 1, "content", 0, "text"), "x\udfffx", 1)])
@example(bad=[("/v1/chat/completions", "key", ("tools", 0, "function", "parameters", "properties", "a"),
               "\udbff", 2)])
@example(bad=[("/session/finalize", "value", ("reward_info", "judge", "verdict"), "\ud800", 2)])
@example(bad=[("/session/finalize", "key", ("reward_info", "reward"), "r\udc00", 2)])
def test_a_lone_surrogate_anywhere_is_400_naming_it_and_the_session_exports_as_without_it(
    baseline: httpx.Client, subject: httpx.Client, bad: list[tuple]
) -> None:
    session_id = f"ctrl-{next(SESSION_NUMBERS)}"
    expected = control_session(baseline, session_id)
    assert control_session(subject, session_id, bad) == expected


@pytest.mark.parametrize("header", ["X-Session-Id", "X-SMG-Routing-Key", "X-Instance-Id", "X-Turn-Id"])
def test_id_headers_cannot_carry_a_surrogate(subject: httpx.Client, header: str) -> None:
    # HTTP headers are bytes, read as Latin-1: the UTF-8-style bytes of U+D800 arrive as three Latin-1 characters,
    # and every id must be ASCII. Refused naming the header, and nothing is recorded.
    headers = {"X-Session-Id": "header-session", header: b"id-\xed\xa0\x80"}
    if header == "X-SMG-Routing-Key":
        del headers["X-Session-Id"]
    response = subject.post("/v1/chat/completions", headers=headers,
                            json={"messages": [SYSTEM, USER], "max_tokens": 8})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == header
    assert subject.get("/session/header-session").status_code == 404


def test_arguments_string_whose_json_decodes_to_a_lone_surrogate_is_400_not_500(subject: httpx.Client) -> None:
    # The string itself is valid Unicode (a backslash, "u", "d800"), but the object it encodes, which the chat
    # template renders, holds a lone surrogate: it used to reach the tokenizer and answer 500.
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": "\\ud800"}'}}
    messages = [SYSTEM, USER, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "8"}]
    response = subject.post("/v1/chat/completions", headers={"X-Session-Id": "arguments-escape"},
                            json={"messages": messages, "tools": TOOLS, "max_tokens": 8})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_request", "messages[2].tool_calls[0].function.arguments")
    assert subject.get("/session/arguments-escape").status_code == 404
