"""HTTP-level behaviour: the keep-alive regression, info endpoints, and junk input never causing a 5xx."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import h11
import httpx
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import EngineConfig, EngineHandle, serve_engine
from engine.generate_request import KNOWN_SAMPLING_KEYS
from serving.tokenizer_files import ensure_tokenizers, model_tokenizer_path

from .conftest import client_for


async def _receive_response(stream: trio.SocketStream, conn: h11.Connection) -> tuple[int, bytes]:
    status = 0
    body = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(65536))
            continue
        if isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.Data):
            body += bytes(event.data)
        elif isinstance(event, h11.EndOfMessage):
            return status, body


async def test_keep_alive_after_slow_body(engine: EngineHandle) -> None:
    """stack-notes pitfall 1: headers sent, a pause, then the body; a second request on the same connection must
    be answered (also after an early 400 for a bad body)."""
    stream = await trio.open_tcp_stream(engine.host, engine.port)
    conn = h11.Connection(h11.CLIENT)
    for body in (b'{"text": "Hi", "sampling_params": {"max_new_tokens": 3}}', b"{not json", b'{"text": "Hi"}'):
        headers = [("Host", "engine"), ("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        await stream.send_all(conn.send(h11.Request(method="POST", target="/generate", headers=headers)))
        await trio.sleep(0.05)
        await stream.send_all(conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
        status, payload = await _receive_response(stream, conn)
        assert status == (400 if body == b"{not json" else 200), payload
        conn.start_next_cycle()
    await stream.aclose()


async def test_info_endpoints(client: httpx.AsyncClient, engine: EngineHandle) -> None:
    """§3.5: /health 200 with an empty body; /model_info keys; /v1/models OpenAI list; /server_info dumps the
    server args incl. weight_version; /flush_cache plain text; §3.4 /get_weight_version is 404."""
    r = await client.get("/health")
    assert r.status_code == 200 and r.content == b""
    info = (await client.get("/model_info")).json()
    assert set(info) == {"model_path", "tokenizer_path", "is_generation", "preferred_sampling_params",
                         "weight_version", "has_image_understanding", "has_audio_understanding", "model_type",
                         "architectures"}
    assert info["weight_version"] == "default"
    models = (await client.get("/v1/models")).json()
    assert models["object"] == "list"
    (model,) = models["data"]
    assert model["object"] == "model" and model["owned_by"] == "sglang"
    assert model["max_model_len"] == engine.engine.config.context_length and model["id"] == model["root"]
    server = (await client.get("/server_info")).json()
    assert server["weight_version"] == "default" and server["context_length"] == 32768
    r = await client.post("/flush_cache")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert (await client.get("/get_weight_version")).status_code == 404
    loads = (await client.get("/v1/loads")).json()
    assert loads["loads"][0]["num_running_reqs"] == 0


def _json_values() -> st.SearchStrategy[Any]:
    leaves = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.integers(-3, 300)
              | st.floats(allow_nan=True) | st.text(max_size=12))
    return st.recursive(leaves, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
        st.text(max_size=6), kids, max_size=3), max_leaves=8)


FIELDS = ["text", "input_ids", "rid", "sampling_params", "stream", "return_logprob", "logprob_start_len",
          "top_logprobs_num", "token_ids_logprob", "return_text_in_logprobs", "return_routed_experts",
          "routed_experts_start_len", "return_prompt_token_ids", "routing_key", "input_embeds", "junk"]
_values = _json_values()
_sampling = st.dictionaries(st.sampled_from(sorted(KNOWN_SAMPLING_KEYS) + ["bogus"]), _values, max_size=4)
_bodies = st.one_of(
    st.binary(max_size=40),
    _values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {"text": st.text(max_size=30) | st.just("Hello")},
        optional={k: _values for k in FIELDS if k != "text"} | {"sampling_params": _sampling},
    ).map(lambda d: json.dumps(d).encode()),
    st.fixed_dictionaries(
        {"input_ids": st.lists(st.integers(-5, 160_000), max_size=6)},
        optional={"sampling_params": _sampling, "return_logprob": st.booleans(),
                  "logprob_start_len": st.integers(-2, 8), "routed_experts_start_len": st.integers(-2, 8),
                  "return_routed_experts": st.booleans(), "stream": st.booleans(),
                  "top_logprobs_num": st.integers(-1, 3), "token_ids_logprob": st.lists(st.integers(-1, 5))},
    ).map(lambda d: json.dumps(d).encode()),
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(bodies=st.lists(_bodies, min_size=1, max_size=4))
async def test_junk_generate_bodies_never_5xx(bodies: list[bytes]) -> None:
    """§1.5: bad input gets 400 ``{"error": {"message": ...}}`` (FastAPI/pydantic validation and ValueErrors), valid
    input 200; never a 5xx."""
    config = EngineConfig(port=0, tokenizer_path=_qwen3_path(), context_length=256)
    async with trio.open_nursery() as nursery:
        handle = await nursery.start(serve_engine, config)
        async with client_for(handle) as client:
            for body in bodies:
                r = await client.post("/generate", content=body, headers={"Content-Type": "application/json"})
                assert r.status_code in (200, 400), (body, r.status_code, r.text)
                if r.status_code == 400:
                    assert isinstance(r.json()["error"]["message"], str)
                elif r.headers["content-type"].startswith("text/event-stream"):
                    assert r.text.endswith("data: [DONE]\n\n")
                else:
                    assert "meta_info" in r.json()
        nursery.cancel_scope.cancel()


@functools.cache
def _qwen3_path() -> Path:
    # Hypothesis examples cannot use function-scoped fixtures; verify the tokenizer files once.
    return model_tokenizer_path("qwen3", ensure_tokenizers())
