"""A capture server: what a blackbox CLI sends, written to disk, one JSON file per request.

``python -m tests.e2e_cli.capture_server OUT_DIR [--port N]`` listens on 127.0.0.1 (port 0 = any free one, printed
on the first line), accepts any request, writes ``OUT_DIR/NNN-METHOD-path.json`` with the method, path, headers and
the body (parsed when it is JSON), and answers a minimal valid reply so the CLI goes on: a Responses API stream for
``POST .../responses``, an Anthropic Messages stream or message for ``POST .../messages``, ``{"input_tokens": 1}``
for ``.../count_tokens``, an empty model list for ``GET .../models``, else 404. It is how docs/agents.md's request
notes were taken; re-run it when a CLI version changes (the tests pin the versions, tests/npm_packages.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_counter = itertools.count(1)
_lock = threading.Lock()


def sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


def responses_stream(text: str, call: dict[str, Any] | None = None) -> bytes:
    """A text answer, or (``call``: ``{"name", "arguments"}``) a reasoning item and a function call."""
    response = {"id": "resp_capture", "object": "response", "created_at": 0, "status": "in_progress",
                "model": "capture", "output": []}
    if call is None:
        items = [{"type": "message", "id": "msg_capture", "role": "assistant", "status": "completed",
                  "content": [{"type": "output_text", "text": text, "annotations": []}]}]
    else:
        items = [{"type": "reasoning", "id": "rs_capture", "summary": [],
                  "content": [{"type": "reasoning_text", "text": "I will run it."}]},
                 {"type": "function_call", "id": "fc_capture", "call_id": "call_capture", "status": "completed",
                  "name": call["name"], "arguments": json.dumps(call["arguments"])}]
    done = {**response, "status": "completed", "output": items,
            "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"type": "response.created", "response": response})]
    for index, item in enumerate(items):
        events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": index,
                                                      "item": item}))
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": index,
                                                     "item": item}))
    events.append(("response.completed", {"type": "response.completed", "response": done}))
    return sse([(name, {**data, "sequence_number": number}) for number, (name, data) in enumerate(events)])


def anthropic_blocks(text: str, call: dict[str, Any] | None) -> list[dict[str, Any]]:
    if call is None:
        return [{"type": "text", "text": text}]
    return [{"type": "thinking", "thinking": "I will write it.", "signature": "capture-signature"},
            {"type": "tool_use", "id": "toolu_capture", "name": call["name"], "input": call["arguments"]}]


def anthropic_message(text: str, call: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"id": "msg_capture", "type": "message", "role": "assistant", "model": "capture",
            "content": anthropic_blocks(text, call), "stop_reason": "end_turn" if call is None else "tool_use",
            "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}


def anthropic_stream(text: str, call: dict[str, Any] | None = None) -> bytes:
    message = anthropic_message(text, call)
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}})]
    for index, block in enumerate(message["content"]):
        # each block whole in its start event, then a stop: the smallest stream the SDK accepts
        empty = {"thinking": {**block, "thinking": "", "signature": ""}, "tool_use": {**block, "input": {}},
                 "text": {**block, "text": ""}}[block["type"]]
        delta = {"thinking": {"type": "thinking_delta", "thinking": block.get("thinking")},
                 "tool_use": {"type": "input_json_delta", "partial_json": json.dumps(block.get("input"))},
                 "text": {"type": "text_delta", "text": block.get("text")}}[block["type"]]
        events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": empty}))
        events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        if block["type"] == "thinking":
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                "type": "signature_delta", "signature": block["signature"]}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": message["stop_reason"], "stop_sequence": None}, "usage": {"output_tokens": 1}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return sse(events)


class CaptureHandler(BaseHTTPRequestHandler):
    out: Path
    #: the tool call the first model request is answered with (``--tool-call``), then text
    tool_call: dict[str, Any] | None = None
    _calls_made = 0

    def _next_call(self) -> dict[str, Any] | None:
        with _lock:
            if self.tool_call is None or type(self)._calls_made:
                return None
            type(self)._calls_made += 1
            return self.tool_call
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        sys.stderr.write("capture: " + format % args + "\n")

    def _record(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with _lock:
            number = next(_counter)
        name = f"{number:03d}-{self.command}-{self.path.strip('/').replace('/', '_').split('?')[0] or 'root'}.json"
        (self.out / name).write_text(json.dumps(
            {"method": self.command, "path": self.path, "headers": dict(self.headers.items()), "body": body},
            indent=2, ensure_ascii=False))
        return body

    def _answer(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self._record()
        if self.path.split("?")[0].endswith("/models"):
            self._answer(200, json.dumps({"object": "list", "data": []}).encode(), "application/json")
        else:
            self._answer(404, b'{"error": {"message": "not captured"}}', "application/json")

    def do_POST(self) -> None:  # noqa: N802
        body = self._record()
        path = self.path.split("?")[0]
        streaming = isinstance(body, dict) and body.get("stream")
        if path.endswith("/responses"):
            self._answer(200, responses_stream("Captured.", self._next_call()), "text/event-stream")
        elif path.endswith("/count_tokens"):
            self._answer(200, b'{"input_tokens": 1}', "application/json")
        elif path.endswith("/messages"):
            if streaming:
                self._answer(200, anthropic_stream("Captured.", self._next_call()), "text/event-stream")
            else:
                self._answer(200, json.dumps(anthropic_message("Captured.")).encode(), "application/json")
        else:
            self._answer(404, b'{"error": {"message": "not captured"}}', "application/json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tool-call", type=json.loads, default=None,
                        help='answer the first model request with this call: {"name": ..., "arguments": {...}}')
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    handler = type("Handler", (CaptureHandler,), {"out": args.out, "tool_call": args.tool_call})
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
