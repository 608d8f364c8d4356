"""A reference gateway for the bench: what RL frameworks write by hand in front of SGLang (issue 21's baseline).

FastAPI (served by uvicorn, one process) + httpx to the upstream, the chat template re-rendered from the whole
conversation on every turn (``transformers``' ``apply_chat_template``, tokenized), ``/generate`` with logprobs,
and each turn's ``(prompt ids, output ids, logprobs)`` kept per session in memory: the trajectory such a gateway
records. It is honest, not tuned and not crippled: the usual libraries used the usual way. Streams are streamed
(one chat chunk per upstream chunk, text deltas computed from SGLang's cumulative or incremental chunks, the mode
read from the upstream's ``/server_info`` at start). It does not parse reasoning or tool calls (the proxy does).

    .venv/bin/python bench/gateway.py --upstream http://127.0.0.1:PORT --port N

Needs the ``bench`` extra (``pip install -e '.[bench]'``: fastapi, uvicorn); ``./dev bench`` installs it.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from array import array
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from transformers import AutoTokenizer


def create_app(upstream: str, tokenizer_path: str) -> FastAPI:
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    info = httpx.get(upstream + "/server_info").json()
    incremental = bool(info.get("incremental_streaming_output"))
    client = httpx.AsyncClient(base_url=upstream, timeout=None,
                               limits=httpx.Limits(max_connections=1024, max_keepalive_connections=1024))
    sessions: dict[str, list[tuple[array, array, array]]] = {}
    app = FastAPI()

    def prompt_ids(body: dict[str, Any]) -> list[int]:
        rendered = tokenizer.apply_chat_template(body["messages"], tokenize=True, add_generation_prompt=True,
                                                 **(body.get("chat_template_kwargs") or {}))
        return list(rendered["input_ids"] if isinstance(rendered, dict) or hasattr(rendered, "keys") else rendered)

    def record(session: str, prompt: list[int], output: list[int], logprobs: list[float]) -> None:
        sessions.setdefault(session, []).append((array("i", prompt), array("i", output), array("f", logprobs)))

    def generate_body(body: dict[str, Any], prompt: list[int], stream: bool) -> dict[str, Any]:
        params: dict[str, Any] = {"temperature": body.get("temperature", 1.0)}
        if body.get("max_tokens") is not None:
            params["max_new_tokens"] = body["max_tokens"]
        return {"input_ids": prompt, "sampling_params": params, "return_logprob": True, "stream": stream}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        session = request.headers.get("x-session-id") or body.get("session_id") or uuid.uuid4().hex
        prompt = prompt_ids(body)
        ident, created, model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), body.get("model", "model")
        if body.get("stream"):
            return StreamingResponse(stream(body, session, prompt, ident, created, model),
                                     media_type="text/event-stream")
        reply = await client.post("/generate", json=generate_body(body, prompt, False))
        reply.raise_for_status()
        out = reply.json()
        meta = out["meta_info"]
        ids = out["output_ids"]
        record(session, prompt, ids, [lp[0] for lp in meta["output_token_logprobs"]])
        text = tokenizer.decode(ids, skip_special_tokens=True)
        return JSONResponse({
            "id": ident, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": (meta.get("finish_reason") or {}).get("type", "stop")}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                      "total_tokens": len(prompt) + len(ids)},
        })

    async def stream(body: dict[str, Any], session: str, prompt: list[int], ident: str, created: int,
                     model: str) -> AsyncIterator[bytes]:
        ids: list[int] = []
        logprobs: list[float] = []
        text = ""
        finish = None

        def event(delta: dict[str, Any], reason: str | None = None) -> bytes:
            chunk = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}
            return b"data: " + json.dumps(chunk).encode() + b"\n\n"

        yield event({"role": "assistant", "content": ""})
        async with client.stream("POST", "/generate", json=generate_body(body, prompt, True)) as reply:
            async for line in reply.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                meta = chunk["meta_info"]
                triples = meta["output_token_logprobs"]  # (logprob, token id, text) of the output so far
                if incremental:  # each chunk carries only what is new
                    ids.extend(t[1] for t in triples)
                    logprobs.extend(t[0] for t in triples)
                    delta = chunk["text"]
                    text += delta
                else:  # each chunk repeats everything so far
                    ids[:] = [t[1] for t in triples]
                    logprobs[:] = [t[0] for t in triples]
                    delta, text = chunk["text"][len(text):], chunk["text"]
                finish = (meta.get("finish_reason") or {}).get("type") or finish
                if delta:
                    yield event({"content": delta})
        record(session, prompt, ids, logprobs)
        yield event({}, finish or "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": len(prompt), "completion_tokens": len(logprobs),
                     "total_tokens": len(prompt) + len(logprobs)}
            yield b"data: " + json.dumps({"id": ident, "object": "chat.completion.chunk", "created": created,
                                          "model": model, "choices": [], "usage": usage}).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokenizer-path", default=None, help="default: the verified Qwen3 tokenizer files")
    args = parser.parse_args()
    path = args.tokenizer_path
    if path is None:
        from serving.tokenizer_files import model_tokenizer_path

        path = str(model_tokenizer_path("qwen3"))
    uvicorn.run(create_app(args.upstream.rstrip("/"), path), host="127.0.0.1", port=args.port, log_level="warning",
                access_log=False)


if __name__ == "__main__":
    main()
