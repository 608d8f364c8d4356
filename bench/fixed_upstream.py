"""The bench's floor: a fixed-answer SGLang upstream that replays precomputed bodies with no per-request work.

Two steps (issue 21 item 6):

- :func:`capture` runs the embedded engine (in this process, both stream modes: SGLang's default cumulative chunks
  and ``--incremental-streaming-output``) and records the exact HTTP bodies it answers: ``/generate`` non-streaming
  and streaming for each answer length of :data:`ANSWERS`, and the information routes a client asks at start
  (``/server_info``, ``/model_info``, ``/v1/models``...). Written to one JSON file.
- ``python bench/fixed_upstream.py --answers FILE --mode {cumulative,incremental} --port N`` serves them: raw trio
  sockets, one keep-alive loop per connection, the response bytes (head included, SSE events as HTTP chunks)
  built once at start. Per request it reads the head and the body, looks at the body's last bytes for
  ``"stream"`` and ``"max_new_tokens"`` (the proxy and the gateway both put ``input_ids`` first), and writes the
  prebuilt bytes: no JSON, no tokenizer, no generation. Every streamed answer goes out in one write (an engine
  far ahead of its client: the chunks arrive coalesced).

Which answer: ``(stream, max_new_tokens)`` from the table; a ``max_new_tokens`` not in the table (or none) gets the
shortest answer of that kind. Other POSTs (abort, pause, flush...) get ``{}``; unknown GETs a 404.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import trio

#: (stream, tokens) of the captured ``/generate`` answers: 8-token non-streaming turns, long non-streaming answers
#: (memory phases), 128- and 1,024-token streams.
ANSWERS = ((False, 8), (False, 1024), (True, 128), (True, 1024))
MODES = ("cumulative", "incremental")
INFO_PATHS = ("/server_info", "/get_server_info", "/model_info", "/get_model_info", "/v1/models", "/health")
#: ids of "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" (Qwen3): the captured prompt
PROMPT = [151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198]
#: the 8-token answer: seven text tokens and ``<|im_end|>`` (finish ``stop``)
SHORT_ANSWER = "The value found is forty-two."
#: one Qwen3 token (a long non-streaming answer's words; ``capture`` checks every answer's token count)
LONG_ANSWER_WORD = " more"

_STREAM = re.compile(rb'"stream":\s*(true|false)')
_MAX_NEW = re.compile(rb'"max_new_tokens":\s*(\d+)')


# ---- capture ------------------------------------------------------------------------------------------------


def _script(short_output: str) -> list[dict[str, Any]]:
    """One script entry per captured answer, keyed by its routing key. Streams: "Filler" and the engine's filler text
    to the length. Non-streaming answers end their turn: their last token is ``<|im_end|>`` (SGLang reports
    ``length`` all the same when that token is the ``max_new_tokens``-th), so the memory phases' sessions go on by
    TITO as an agent's conversation does; a long one is "Filler" (two tokens) and one-token words up to the end
    token. (A turn cut short of its end token starts a new segment with a full encode, spec 5.4: with such answers
    every turn of those sessions stored its whole prompt again.)"""
    def output(stream: bool, tokens: int) -> str:
        if tokens == 8:
            return short_output
        return "Filler" if stream else "Filler" + LONG_ANSWER_WORD * (tokens - 3)

    return [{"session": f"{'s' if stream else 'ns'}{tokens}", "output": output(stream, tokens),
             "eos": tokens == 8 or not stream} for stream, tokens in ANSWERS]


async def _capture_mode(incremental: bool, tokenizer_path: Path) -> dict[str, Any]:
    # The engine package, not bench/engine.py (the bench folder is on sys.path too): the repository first.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from engine import EngineConfig, serve_engine  # the bench's own process only; the floor never imports it
    from loadgen import Connection

    config = EngineConfig(port=0, tokenizer_path=tokenizer_path, incremental_streaming_output=incremental,
                          script_lines=tuple(_script(SHORT_ANSWER)))
    out: dict[str, Any] = {"generate": {}, "get": {}}
    async with trio.open_nursery() as nursery:
        handle = await nursery.start(serve_engine, config)
        conn = Connection("127.0.0.1", handle.port)
        try:
            for stream, tokens in ANSWERS:
                key = f"{'s' if stream else 'ns'}{tokens}"
                body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": tokens}, "stream": stream,
                        "return_logprob": True, "routing_key": key}
                status, payload = await conn.request("POST", "/generate", json.dumps(body).encode())
                if status != 200:
                    raise SystemExit(f"capture: /generate {key} answered {status}: {payload[:200]!r}")
                out["generate"][key] = payload.decode("utf-8")
            for path in INFO_PATHS:
                status, payload = await conn.request("GET", path, b"")
                out["get"][path] = [status, payload.decode("utf-8")]
        finally:
            await conn.aclose()
        nursery.cancel_scope.cancel()
    return out


def capture(path: Path) -> dict[str, Any]:
    """Capture both modes' bodies from the embedded engine into ``path`` (JSON); returns what was written."""
    from serving.tokenizer_files import model_tokenizer_path

    tokenizer_path = model_tokenizer_path("qwen3")
    captured = {mode: trio.run(_capture_mode, mode == "incremental", tokenizer_path) for mode in MODES}
    for mode in MODES:  # the tokens each answer really has (the 8-token one: text + end token)
        for key, text in captured[mode]["generate"].items():
            last = text if key.startswith("ns") else text[text.rindex("data: {") + 6:].split("\n\n", 1)[0]
            count = json.loads(last)["meta_info"]["completion_tokens"]
            if count != int(key.lstrip("ns")):
                raise SystemExit(f"capture: {mode} {key} has {count} output tokens, expected {key.lstrip('ns')}")
    path.write_text(json.dumps(captured))
    return captured


# ---- serve --------------------------------------------------------------------------------------------------


def _json_response(status: int, body: str) -> bytes:
    data = body.encode("utf-8")
    reason = {200: b"OK", 404: b"Not Found"}.get(status, b"Status")
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            % (status, reason, len(data)) + data)


def _sse_response(body: str) -> bytes:
    """SGLang's streaming response: one HTTP chunk per SSE event, then the terminating chunk."""
    parts = [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"]
    for event in body.split("\n\n"):
        if event:
            data = (event + "\n\n").encode("utf-8")
            parts.append(b"%x\r\n%s\r\n" % (len(data), data))
    parts.append(b"0\r\n\r\n")
    return b"".join(parts)


class Answers:
    """The prebuilt response bytes of one mode."""

    def __init__(self, captured: dict[str, Any]) -> None:
        self.generate: dict[tuple[bool, int], bytes] = {}
        for key, body in captured["generate"].items():
            stream = key.startswith("s")
            response = _sse_response(body) if stream else _json_response(200, body)
            self.generate[(stream, int(key.lstrip("ns")))] = response
        self.default = {stream: min((t for s, t in self.generate if s is stream)) for stream in (False, True)}
        self.get = {path.encode(): _json_response(status, body) for path, (status, body) in captured["get"].items()}
        self.not_found = _json_response(404, '{"detail":"Not Found"}')
        self.empty = _json_response(200, "{}")

    def answer(self, method: bytes, path: bytes, body: bytes) -> bytes:
        if method == b"GET":
            return self.get.get(path, self.not_found)
        if path != b"/generate":
            return self.empty
        tail = body[-512:]
        stream_match = _STREAM.search(tail) or _STREAM.search(body)
        stream = stream_match is not None and stream_match.group(1) == b"true"
        tokens_match = _MAX_NEW.search(tail) or _MAX_NEW.search(body)
        tokens = int(tokens_match.group(1)) if tokens_match else self.default[stream]
        return self.generate.get((stream, tokens)) or self.generate[(stream, self.default[stream])]


async def _serve_connection(stream: trio.SocketStream, answers: Answers) -> None:
    buffer = b""
    try:
        while True:
            while (end := buffer.find(b"\r\n\r\n")) < 0:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buffer += data
            head, buffer = buffer[:end], buffer[end + 4:]
            request_line, _, headers = head.partition(b"\r\n")
            method, path, _ = request_line.split(b" ", 2)
            lower = headers.lower()
            length, at = 0, lower.find(b"content-length:")
            if at >= 0:
                eol = lower.find(b"\r\n", at)
                length = int(lower[at + 15:eol if eol >= 0 else len(lower)])
            while len(buffer) < length:
                data = await stream.receive_some(max(65536, length - len(buffer)))
                if not data:
                    return
                buffer += data
            body, buffer = buffer[:length], buffer[length:]
            await stream.send_all(answers.answer(method, path.split(b"?", 1)[0], body))
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        return
    finally:
        await stream.aclose()


def serve(answers_path: Path, mode: str, port: int) -> None:
    answers = Answers(json.loads(answers_path.read_text())[mode])

    async def main() -> None:
        await trio.serve_tcp(lambda s: _serve_connection(s, answers), port, host="127.0.0.1")

    trio.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=Path, required=True, help="the JSON file capture() wrote")
    parser.add_argument("--mode", choices=MODES, default="cumulative")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--capture", action="store_true", help="capture into --answers, then exit")
    args = parser.parse_args()
    if args.capture:
        capture(args.answers)
        return
    serve(args.answers, args.mode, args.port)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
