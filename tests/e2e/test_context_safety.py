"""Context safety through the HTTP API (spec 8): ``context_overflow``, dynamic ``max_tokens`` clamping and
``--no-dynamic-max-tokens``, the budget without ``max_tokens``, and the ``return_token_ids`` server flag."""

from __future__ import annotations

from typing import Any

from proxy.families import load_tito_tokenizer

LONG = " ".join(f"token{i}" for i in range(120))  # ~240 tokens: more than the 128 SGLang defaults to
MESSAGES = [{"role": "user", "content": "Tell me a long story."}]
NO_THINKING = {"enable_thinking": False}


def prompt_length(tokenizer_path: Any) -> int:
    return len(load_tito_tokenizer("qwen3", tokenizer_path).encode_full(MESSAGES, None, NO_THINKING))


async def test_a_prompt_that_fills_the_window_is_refused_with_context_overflow(start_proxy) -> None:
    proxy = await start_proxy(context_window=64)
    prompt = [{"role": "user", "content": "word " * 100}]
    response = await proxy.chat("overflow", {"messages": prompt})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_overflow" and error["context_window"] == 64
    assert error["prompt_tokens"] == len(proxy.tito.encode_full(prompt, None, {})) > 64
    view = await proxy.debug("overflow")
    assert (view["steps"], view["in_flight"]) == (0, 0)
    assert proxy.requests_of("overflow") == []  # nothing was sent upstream


async def test_max_tokens_is_clamped_to_the_remaining_window(start_proxy, qwen3_path) -> None:
    window = prompt_length(qwen3_path) + 7
    proxy = await start_proxy(context_window=window, script=[{"session": "*", "output": LONG}] * 3)
    clamped = await proxy.chat("clamp", {"messages": MESSAGES, "max_tokens": 500, "chat_template_kwargs": NO_THINKING})
    body = clamped.json()
    assert clamped.status_code == 200, body
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 7
    # Without max_tokens the budget is the rest of the window.
    rest = await proxy.chat("rest", {"messages": MESSAGES, "chat_template_kwargs": NO_THINKING})
    assert rest.json()["usage"]["completion_tokens"] == 7
    # A smaller max_tokens stays as asked.
    small = await proxy.chat("small", {"messages": MESSAGES, "max_tokens": 3, "chat_template_kwargs": NO_THINKING})
    assert small.json()["usage"]["completion_tokens"] == 3


async def test_without_dynamic_max_tokens_the_request_goes_as_asked_and_sglang_refuses_it(start_proxy) -> None:
    proxy = await start_proxy(context_window=100, dynamic_max_tokens=False, engine={"context_length": 100})
    response = await proxy.chat("raw", {"messages": MESSAGES, "max_tokens": 500, "chat_template_kwargs": NO_THINKING})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "upstream_rejected"
    assert (await proxy.debug("raw"))["steps"] == 0


async def test_without_max_tokens_generation_runs_to_its_end_not_sglangs_128(start_proxy) -> None:
    proxy = await start_proxy(script=[{"session": "*", "output": LONG}], return_token_ids=True)
    response = await proxy.chat("unbounded", {"messages": MESSAGES, "chat_template_kwargs": NO_THINKING})
    body = response.json()
    assert body["choices"][0]["message"]["content"] == LONG
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] > 128
    # The server flag adds the token fields; the request field overrides it.
    assert len(body["token_ids"]) == body["usage"]["completion_tokens"]
    quiet = await proxy.chat("quiet", {"messages": MESSAGES, "return_token_ids": False, "max_tokens": 4,
                                       "chat_template_kwargs": NO_THINKING})
    assert "token_ids" not in quiet.json() and "prompt_token_ids" not in quiet.json()


async def test_the_window_is_the_upstreams_by_default_a_large_max_tokens_is_clamped_not_refused(
    start_proxy, qwen3_path
) -> None:
    """opencode sends max_tokens 32000 with 25,000 tokens left: clamped to what is left, never an upstream 400."""
    window = prompt_length(qwen3_path) + 9
    proxy = await start_proxy(engine={"context_length": window}, script=[{"session": "*", "output": LONG}] * 2)
    response = await proxy.chat("big", {"messages": MESSAGES, "max_tokens": 32000, "chat_template_kwargs": NO_THINKING})
    body = response.json()
    assert response.status_code == 200, body
    assert (body["usage"]["completion_tokens"], body["choices"][0]["finish_reason"]) == (9, "length")
    (record,) = proxy.requests_of("big")
    assert (len(record.output_ids), record.finish_reason["type"]) == (9, "length")  # asked for exactly 9
    # A prompt longer than the upstream's window: context_overflow before any upstream call.
    long_prompt = [{"role": "user", "content": "word " * 100}]
    refused = await proxy.chat("long", {"messages": long_prompt})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_overflow"
    assert refused.json()["error"]["context_window"] == window
    assert proxy.requests_of("long") == []


async def test_context_window_flag_overrides_the_upstream(start_proxy, qwen3_path) -> None:
    window = prompt_length(qwen3_path) + 5
    proxy = await start_proxy(context_window=window, engine={"context_length": 32768},
                              script=[{"session": "*", "output": LONG}])
    body = (await proxy.chat("flag", {"messages": MESSAGES, "chat_template_kwargs": NO_THINKING})).json()
    assert body["usage"]["completion_tokens"] == 5
