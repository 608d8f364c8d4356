"""The event loop never blocks on one request (issue 15 item 1), end to end on a real proxy and its embedded engine.

Before: a large body was parsed (``json.loads``) and validated (``ChatCompletionRequest.from_http``) on the event
loop, and the full encode ran in a worker thread through the tokenizer's ``encode``, which holds the GIL for the
whole Rust call: a 10 MB prompt froze every other request, ``pause_state`` included, for tens of seconds
(``bench/blocking.py`` measures it, docs/benchmarks.md). These tests observe the real components (the stdlib's
``json.loads``, the real request parser, the proxy's real tokenizer wrapped to note where and when it runs), with
no clock:

- where: for a large body, the parse, the validation, the template render and the encode each run in a thread that
  is not the event loop's (the test runs on the proxy's own trio loop, so its thread *is* the loop's thread);
- when: while the encode of a large prompt is inside the Rust tokenizer, ``pause_state`` probes are answered (the
  test's probes run on the same loop as the proxy: a probe answered while the encode is inside Rust proves the loop
  ran meanwhile; with the GIL held, the loop cannot run at all until the encode returns).

Behaviour is unchanged for large bodies: errors raised off the loop are the same 400s, and an Idempotency-Key's
fingerprint (computed off the loop too) replays the same answer.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import orjson
import trio

from proxy.api import ChatCompletionRequest
from proxy.controllers.off_loop import INLINE_BODY_BYTES
from tests.e2e.harness import Proxy, session_headers

#: user text above the inline thresholds (body and encode), within the context window of ENGINE (~40k tokens)
LARGE_TEXT_CHARS = 200_000
assert LARGE_TEXT_CHARS > INLINE_BODY_BYTES
#: the embedded engine with a window that holds a LARGE_TEXT_CHARS prompt
ENGINE = {"context_length": 131_072}
WORDS = ("check", "results", "plan", "value", "step", "data", "summary", "carefully", "report", "clearly")


def user_text(chars: int) -> str:
    sentence = " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(60)) + ". "
    return (sentence * (chars // len(sentence) + 1))[:chars]


def chat_body(chars: int, **more: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": user_text(chars)}], "max_tokens": 8, **more}


class RecordingTokenizer:
    """The proxy's real HF tokenizer, noting the thread of every encode of a large text and how many such encodes
    are inside the Rust call right now (``inside``); everything else is delegated unchanged."""

    def __init__(self, real: Any, threshold: int):
        self._real, self._threshold = real, threshold
        self.threads: list[threading.Thread] = []
        self.inside = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def _watched(self, method: str, text_of: Any, *args: Any, **kwargs: Any) -> Any:
        if len(text_of(args)) < self._threshold:
            return getattr(self._real, method)(*args, **kwargs)
        self.threads.append(threading.current_thread())
        self.inside += 1
        try:
            return getattr(self._real, method)(*args, **kwargs)
        finally:
            self.inside -= 1

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        return self._watched("encode", lambda a: a[0], *args, **kwargs)

    def encode_batch(self, *args: Any, **kwargs: Any) -> Any:
        return self._watched("encode_batch", lambda a: max(a[0], key=len), *args, **kwargs)

    def encode_batch_fast(self, *args: Any, **kwargs: Any) -> Any:
        return self._watched("encode_batch_fast", lambda a: max(a[0], key=len), *args, **kwargs)


def watch_tokenizer(proxy: Proxy, monkeypatch: Any, threshold: int) -> RecordingTokenizer:
    tito = proxy.handle.services.sessions.tokenizer
    recorder = RecordingTokenizer(tito._tokenizer, threshold)
    monkeypatch.setattr(tito, "_tokenizer", recorder)
    return recorder


async def test_a_large_body_is_parsed_validated_rendered_and_encoded_off_the_event_loop(start_proxy, monkeypatch):
    proxy = await start_proxy(engine=ENGINE)
    loop_thread = threading.current_thread()
    seen: dict[str, list[threading.Thread]] = {"json parse": [], "from_http": [], "render": []}

    def watched_parse(real: Any) -> Any:
        """The body parse (orjson first, the stdlib's json.loads for what orjson reads differently)."""

        def loads(text: Any, *args: Any, **kwargs: Any) -> Any:
            if len(text) >= LARGE_TEXT_CHARS:
                seen["json parse"].append(threading.current_thread())
            return real(text, *args, **kwargs)

        return loads

    real_from_http = ChatCompletionRequest.from_http

    def from_http(cls: type, *args: Any, **kwargs: Any) -> Any:
        seen["from_http"].append(threading.current_thread())
        return real_from_http(*args, **kwargs)

    tito = proxy.handle.services.sessions.tokenizer
    real_render = tito._render

    def render(messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> str:
        if any(len(str(message.get("content"))) >= LARGE_TEXT_CHARS for message in messages):
            seen["render"].append(threading.current_thread())
        return real_render(messages, *args, **kwargs)

    monkeypatch.setattr(json, "loads", watched_parse(json.loads))
    monkeypatch.setattr(orjson, "loads", watched_parse(orjson.loads))
    monkeypatch.setattr(ChatCompletionRequest, "from_http", classmethod(from_http))
    monkeypatch.setattr(tito, "_render", render)
    encodes = watch_tokenizer(proxy, monkeypatch, LARGE_TEXT_CHARS)

    response = await proxy.chat("off-loop-where", chat_body(LARGE_TEXT_CHARS))
    assert response.status_code == 200, response.text
    seen["encode"] = encodes.threads
    for step, threads in seen.items():
        assert threads, f"{step} never ran for the large request"
        assert loop_thread not in threads, f"{step} ran on the event loop's thread"


async def test_pause_state_is_answered_while_a_large_prompt_is_inside_the_tokenizer(start_proxy, monkeypatch):
    proxy = await start_proxy(engine=ENGINE)
    encodes = watch_tokenizer(proxy, monkeypatch, LARGE_TEXT_CHARS)
    big = 5 * LARGE_TEXT_CHARS  # 1 MB: an encode of a second or more here, far longer than a probe
    answered_during_encode = 0
    done = trio.Event()

    async def large_request() -> None:
        response = await proxy.chat("off-loop-when", chat_body(big))
        # ~250k tokens: beyond the engine's window, refused after the whole encode
        assert response.status_code == 400 and response.json()["error"]["code"] == "context_overflow"
        done.set()

    async with httpx.AsyncClient(timeout=None) as client, trio.open_nursery() as nursery:
        nursery.start_soon(large_request)
        while not done.is_set():
            probe = await client.get(proxy.url + "/v1/rollout/pause_state")
            assert probe.status_code == 200
            answered_during_encode += encodes.inside > 0
            await trio.sleep(0)
    assert encodes.threads, "the large prompt was never encoded"
    # With the GIL held through the encode, the loop (proxy and probe alike) cannot run until it returns: 0.
    assert answered_during_encode >= 3


async def test_errors_of_a_large_body_are_the_same_400s(start_proxy):
    proxy = await start_proxy(engine=ENGINE)
    text = user_text(LARGE_TEXT_CHARS)
    lone_surrogate = json.dumps({"model": "m", "messages": [
        {"role": "system", "content": text}, {"role": "user", "content": "\ud800"}]})
    response = await proxy.post("/v1/chat/completions", lone_surrogate, session_headers("off-loop-errors"))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert response.json()["error"]["param"] == "messages[1].content"

    truncated = json.dumps(chat_body(LARGE_TEXT_CHARS))[:-1]
    response = await proxy.post("/v1/chat/completions", truncated, session_headers("off-loop-errors"))
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["error"]["message"]

    response = await proxy.post("/session/finalize", {"session_id": "off-loop-errors", "reward_info": {"t": text},
                                                       "instance_id": "\udfff"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "instance_id"


async def test_a_large_body_under_an_idempotency_key_replays_its_answer(start_proxy):
    proxy = await start_proxy(engine=ENGINE, script=[{"session": "off-loop-key", "output": "First."},
                                                     {"session": "off-loop-key", "output": "Second."}])
    body = chat_body(LARGE_TEXT_CHARS)
    first = await proxy.chat("off-loop-key", body, **{"Idempotency-Key": "big-1"})
    assert first.status_code == 200, first.text
    again = await proxy.chat("off-loop-key", body, **{"Idempotency-Key": "big-1"})
    assert again.status_code == 200
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert again.content == first.content
    other = dict(body, max_tokens=9)
    reused = await proxy.chat("off-loop-key", other, **{"Idempotency-Key": "big-1"})
    assert reused.status_code == 422
