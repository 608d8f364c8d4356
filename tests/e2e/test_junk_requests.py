"""Hypothesis-generated request bodies (valid, mutated, junk JSON, raw bytes) never produce a 5xx and never corrupt
a session: after the junk, a valid request continues the session's chain exactly.

The proxy runs in a background thread with its own trio loop (one proxy for every example: hypothesis drives a
sync test, each example is one HTTP request)."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import EngineConfig
from proxy.cli import ProxyHandle, run_proxy
from proxy.config import ProxyConfig
from proxy.families import load_tito_tokenizer
from tests.api.strategies import json_values, mutated_bodies, valid_bodies

SESSION = "junk-target"
#: the statuses the examples got (the mix is checked: some must generate, some must be refused)
STATUSES: list[int] = []
HISTORY = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]


@pytest.fixture(scope="module")
def threaded_proxy(qwen3_path: Path) -> Iterator[ProxyHandle]:
    """A proxy (default engine policy, local parsers) on a trio loop in a background thread."""
    ready: queue.Queue = queue.Queue()
    control: dict[str, Any] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            control["token"] = trio.lowlevel.current_trio_token()
            control["scope"] = nursery.cancel_scope
            config = ProxyConfig(port=0, tokenizer_path=qwen3_path, tool_call_parse_backend="local",
                                 reasoning_parse_backend="local", context_window=4096)
            ready.put(await nursery.start(run_proxy, config, EngineConfig(tokenizer_path=qwen3_path)))

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True, name="junk-proxy")
    thread.start()
    handle = ready.get(timeout=60)
    try:
        yield handle
    finally:
        trio.from_thread.run_sync(control["scope"].cancel, trio_token=control["token"])
        thread.join(timeout=30)


raw_bodies = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=64).map(lambda t: t.encode("utf-8", "surrogatepass")),
    json_values.map(lambda v: json.dumps(v, allow_nan=True).encode()),
)
bodies = st.one_of(
    valid_bodies().map(lambda b: json.dumps(b, allow_nan=True).encode()),
    mutated_bodies().map(lambda b: json.dumps(b, allow_nan=True, default=repr).encode()),
    raw_bodies,
)
header_sets = st.sampled_from([
    {"X-Session-Id": SESSION}, {"X-SMG-Routing-Key": SESSION}, {}, {"X-Session-Id": SESSION, "X-Turn-Id": "t"},
])


def post(client: httpx.Client, content: bytes, headers: dict[str, str]) -> httpx.Response:
    return client.post("/v1/chat/completions", content=content,
                       headers={"content-type": "application/json", **headers})


def test_junk_bodies_never_5xx_and_never_corrupt_the_session(threaded_proxy: ProxyHandle, qwen3_path: Path) -> None:
    tito = load_tito_tokenizer("qwen3", qwen3_path)
    with httpx.Client(base_url=threaded_proxy.url, timeout=60) as client:
        first = post(client, json.dumps({"messages": HISTORY, "return_token_ids": True, "max_tokens": 64}).encode(),
                     {"X-Session-Id": SESSION})
        assert first.status_code == 200, first.text
        step1 = first.json()

        @settings(max_examples=80, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(content=bodies, headers=header_sets)
        def junk(content: bytes, headers: dict[str, str]) -> None:
            response = post(client, content, headers)
            STATUSES.append(response.status_code)
            assert response.status_code < 500, response.text
            if response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream"):
                assert response.content.endswith(b"data: [DONE]\n\n")
            elif response.status_code >= 400:
                error = response.json()["error"]
                assert set(error) >= {"message", "type", "param", "code"}

        junk()
        # The examples exercised both paths: generations that committed, and refusals.
        assert 200 in STATUSES and any(400 <= status < 500 for status in STATUSES)
        # Nothing the junk did disturbs the chain: the next step extends step 1 exactly by its TITO fragment.
        answer = step1["choices"][0]["message"]
        history = HISTORY + [answer, {"role": "user", "content": "Again."}]
        second = post(client, json.dumps({"messages": history, "return_token_ids": True, "max_tokens": 64}).encode(),
                      {"X-Session-Id": SESSION})
        assert second.status_code == 200, second.text
        step2 = second.json()
        checkpoint = step1["prompt_token_ids"] + step1["token_ids"]
        fragment = tito.encode_incremental(checkpoint, history[-1:], prior_messages=history[:-1], tools=None,
                                           chat_template_kwargs={})
        assert step2["prompt_token_ids"] == checkpoint + list(fragment.ids)
        client.post("/session/finalize", json={"session_id": SESSION}).raise_for_status()
        segments = client.post("/trajectory/read", json={"session_id": SESSION}).json()["data"]
    chain = [s for s in segments if s["token_ids"] == step2["prompt_token_ids"] + step2["token_ids"]]
    assert len(chain) == 1
    mask = chain[0]["loss_mask"]
    generated1 = range(len(step1["prompt_token_ids"]), len(checkpoint))
    generated2 = range(len(step2["prompt_token_ids"]), len(chain[0]["token_ids"]))
    assert [i for i, bit in enumerate(mask) if bit] == [*generated1, *generated2]
