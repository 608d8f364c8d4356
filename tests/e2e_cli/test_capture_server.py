"""The capture server that recorded the CLIs' requests (``capture_server.py``) answers streams the official SDKs
accept (so a CLI goes on to its next turn), and writes each request it got, headers and body, to its folder."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import anthropic
import openai
import pytest

from tests.e2e_cli.capture_server import CaptureHandler

CALL = {"name": "Write", "arguments": {"file_path": "/tmp/x", "content": "y"}}


@pytest.fixture
def capture(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    handler = type("Handler", (CaptureHandler,), {"out": tmp_path, "tool_call": CALL})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", tmp_path
    server.shutdown()
    server.server_close()


def test_the_sdks_accept_its_streams_and_it_records_the_requests(capture: tuple[str, Path]) -> None:
    url, folder = capture
    with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0) as client:
        with client.messages.stream(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}],
                                    extra_headers={"X-Session-Id": "cap"}) as stream:
            first = stream.get_final_message()
    assert [block.type for block in first.content] == ["thinking", "tool_use"]  # the --tool-call answer comes first
    assert first.content[1].input == CALL["arguments"] and first.stop_reason == "tool_use"
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as client:
        with client.responses.stream(model="m", input="hi") as stream:
            second = stream.get_final_response()
    assert second.output_text == "Captured."
    files = sorted(folder.glob("*.json"))
    assert [path.name for path in files] == ["001-POST-v1_messages.json", "002-POST-v1_responses.json"]
    recorded = json.loads(files[0].read_text())
    assert recorded["body"]["messages"] == [{"role": "user", "content": "hi"}]
    assert {name.lower(): value for name, value in recorded["headers"].items()}["x-session-id"] == "cap"
