"""Structured logs of the real ``dressage-proxy`` process (issue 19, item 2): ``--log-format``, ``--log-level``,
the ids on every line, the access line.

Each test runs the console script on its embedded engine with stderr going where an operator's would (a file, a
pipe, a terminal), makes real chat requests with the openai SDK under a session header, stops the process with
SIGTERM, and reads everything it wrote. docs/observability.md ("Logs") describes the lines.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.cli import YOUNG_COLLECTION_THRESHOLD

EXE = Path(sys.executable).parent / "dressage-proxy"
#: a hang guard, not a performance bound: loading the tokenizer and the engine takes seconds, more under load
START_BOUND = 180.0
STOP_BOUND = 60.0
SESSIONS = ("logs-a", "logs-b")
FAILING_SESSION = "logs-upstream-fails"
#: the embedded engine's script: plain answers, and an upstream error for FAILING_SESSION (a warning line)
SCRIPT = [
    {"session": FAILING_SESSION, "output": "never sent", "error_status": 500},
    *[{"session": "*", "output": f"Answer {index}."} for index in range(8)],
]
ACCESS_LOGGER = "dressage_proxy.requests"
CHAT = "/v1/chat/completions"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def without_log_settings() -> dict[str, str]:
    """The environment without DRESSAGE_PROXY_LOG_* variables: the flags under test decide."""
    return {key: value for key, value in os.environ.items() if not key.startswith("DRESSAGE_PROXY_LOG")}


def start(tmp_path: Path, *flags: str, stderr: Any) -> tuple[subprocess.Popen, str]:
    """The proxy process, once /health answers: (process, base URL)."""
    script = tmp_path / "script.jsonl"
    script.write_text("".join(json.dumps(entry) + "\n" for entry in SCRIPT))
    port = free_port()
    proc = subprocess.Popen(
        [str(EXE), "--port", str(port), "--script", str(script), *flags],
        stdout=subprocess.DEVNULL, stderr=stderr, env=without_log_settings(),
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_BOUND
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the proxy exited at start-up with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the proxy did not answer /health")
        time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=STOP_BOUND) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def chat_requests(url: str) -> dict[str, str]:
    """Real chat requests through the openai SDK, one plain and one streaming per session, and one the upstream
    fails: {X-Request-Id of each answer: the session it was sent under}."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    sent: dict[str, str] = {}
    messages = [{"role": "user", "content": "Say something."}]
    for session in SESSIONS:
        headers = {"X-Session-Id": session}
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=messages, max_tokens=8, extra_headers=headers,
        )
        assert raw.parse().choices[0].message is not None
        sent[raw.headers["x-request-id"]] = session
        with client.chat.completions.with_streaming_response.create(
            model="m", messages=messages, max_tokens=8, stream=True, extra_headers=headers,
        ) as stream:
            assert list(stream.iter_lines())
            sent[stream.headers["x-request-id"]] = session
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(
            model="m", messages=messages, max_tokens=8, extra_headers={"X-Session-Id": FAILING_SESSION},
        )
    sent[failed.value.response.headers["x-request-id"]] = FAILING_SESSION
    return sent


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line as a JSON object (fails on the first line that is not one)."""
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            parsed = json.loads(line)
        except ValueError:
            pytest.fail(f"stderr line {number} is not JSON: {line!r}")
        assert isinstance(parsed, dict), line
        lines.append(parsed)
    return lines


def test_json_lines_carry_the_request_and_session_ids_of_every_exchange(tmp_path: Path) -> None:
    stderr = tmp_path / "stderr.log"
    with stderr.open("w") as sink:
        proc, url = start(tmp_path, "--log-format", "json", stderr=sink)
        try:
            sent = chat_requests(url)
            finalized = httpx.post(url + "/session/finalize", json={"session_id": SESSIONS[0]})
            assert finalized.status_code == 200
            missing = httpx.get(url + "/no/such/path")
        finally:
            stop(proc)
    lines = json_lines(stderr.read_text())

    for line in lines:
        assert {"level", "logger", "message", "timestamp"} <= line.keys(), line
    assert any(line["message"].startswith("listening on ") and line["url"] == url for line in lines)

    # One access line per exchange, with the id its answer's X-Request-Id header had and the session it was for.
    access = {line["request_id"]: line for line in lines if line["logger"] == ACCESS_LOGGER}
    for request_id, session in sent.items():
        line = access[request_id]
        assert line["session_id"] == session
        assert (line["level"], line["method"], line["endpoint"], line["path"]) == ("INFO", "POST", CHAT, CHAT)
        assert isinstance(line["duration_ms"], float) and line["response_bytes"] > 0 and line["complete"] is True
    statuses = sorted(access[request_id]["status"] for request_id in sent)
    assert statuses[:-1] == [200] * (len(sent) - 1) and statuses[-1] >= 500
    assert access[finalized.headers["x-request-id"]]["session_id"] == SESSIONS[0]
    assert access[finalized.headers["x-request-id"]]["endpoint"] == "/session/finalize"
    unmatched = access[missing.headers["x-request-id"]]
    assert (unmatched["status"], unmatched["endpoint"], unmatched["path"]) == (404, "other", "/no/such/path")
    assert "session_id" not in unmatched  # no session: no key, rather than a null

    # Lines written deeper in the exchange carry the ids too: the upstream failure's warning, the finalize's export.
    failing_id = next(request_id for request_id, session in sent.items() if session == FAILING_SESSION)
    warnings = [line for line in lines if line["level"] == "WARNING" and line.get("request_id") == failing_id]
    assert warnings and all(line["session_id"] == FAILING_SESSION for line in warnings)
    (export,) = [line for line in lines if line["logger"] == "dressage_proxy.sessions" and "segments" in line]
    assert export["session_id"] == SESSIONS[0] and export["steps"] == 2 and export["reason"] == "requested"
    assert export["request_id"] == finalized.headers["x-request-id"]


def test_text_format_writes_no_json_and_shows_the_ids(tmp_path: Path) -> None:
    stderr = tmp_path / "stderr.log"
    with stderr.open("w") as sink:  # a file: auto would pick JSON, the flag says text
        proc, url = start(tmp_path, "--log-format", "text", stderr=sink)
        try:
            sent = chat_requests(url)
        finally:
            stop(proc)
    text = stderr.read_text()
    for line in text.splitlines():
        assert not line.lstrip().startswith("{"), line
    assert re.search(r" INFO dressage_proxy\.main: listening on http://127\.0\.0\.1:\d+ ", text)
    for request_id, session in sent.items():
        assert re.search(rf" POST {CHAT} \d+ [\d.]+ ms \[request_id={request_id} session_id={session}\]$", text,
                         re.MULTILINE), request_id


def test_auto_format_is_json_on_a_pipe(tmp_path: Path) -> None:
    proc, url = start(tmp_path, stderr=subprocess.PIPE)
    try:
        sent = chat_requests(url)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=STOP_BOUND)
    lines = json_lines(err.decode())
    logged = {line.get("request_id") for line in lines if line["logger"] == ACCESS_LOGGER}
    assert set(sent) <= logged


def test_auto_format_is_text_on_a_terminal(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    try:
        proc, url = start(tmp_path, stderr=follower)
        os.close(follower)
        follower = -1
        try:
            sent = chat_requests(url)
        finally:
            proc.send_signal(signal.SIGTERM)
            text = _read_until_closed(leader)
            proc.wait(timeout=STOP_BOUND)
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    lines = text.replace("\r\n", "\n").splitlines()
    assert lines and not [line for line in lines if line.lstrip().startswith("{")]
    assert any(" INFO dressage_proxy.main: listening on " in line for line in lines)
    for request_id in sent:
        assert any(f"request_id={request_id}" in line for line in lines), request_id


def _read_until_closed(fd: int) -> str:
    """What the terminal shows until the process closes it (reading a pty whose other end closed raises EIO)."""
    chunks = []
    deadline = time.monotonic() + STOP_BOUND
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def json_lines_of_chats(tmp_path: Path, level: str) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The process at ``--log-level level`` (JSON lines) through :func:`chat_requests`, stopped: what it sent, and
    every line it wrote."""
    stderr = tmp_path / "stderr.log"
    with stderr.open("w") as sink:
        proc, url = start(tmp_path, "--log-format", "json", "--log-level", level, stderr=sink)
        try:
            sent = chat_requests(url)
        finally:
            stop(proc)
    return sent, json_lines(stderr.read_text())


def test_log_level_warning_drops_the_info_lines(tmp_path: Path) -> None:
    sent, lines = json_lines_of_chats(tmp_path, "warning")
    # Not silent: the upstream failure still logs its warning, with its ids; but no access line, no start-up line.
    failing_id = next(request_id for request_id, session in sent.items() if session == FAILING_SESSION)
    assert [line for line in lines if line.get("request_id") == failing_id and line["level"] == "WARNING"]
    assert {line["level"] for line in lines} <= {"WARNING", "ERROR", "CRITICAL"}
    assert not [line for line in lines if line["logger"] == ACCESS_LOGGER or "listening on" in line["message"]]


def test_a_start_up_failure_is_one_json_line_with_its_cause(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [str(EXE), "--port", str(port), "--log-format", "json"], capture_output=True, text=True,
            timeout=START_BOUND, env=without_log_settings(),
        )
    assert done.returncode == 1
    *_, last = json_lines(done.stderr)
    assert last["level"] == "CRITICAL" and last["logger"] == "dressage_proxy.main"
    assert last["message"].startswith("the proxy stopped on an error: OSError: ")
    assert "Address already in use" in last["message"] and "Traceback" in last["exc_info"]


def test_the_start_up_heap_is_frozen_once_the_process_serves(tmp_path: Path) -> None:
    """``proxy/cli.py:freeze_startup_heap``: the tokenizer, templates and app the process loaded are out of the
    garbage collector's sight (its debug line counts them), so no full collection walks them again; and the
    process still answers after it, sessions and all."""
    sent, lines = json_lines_of_chats(tmp_path, "debug")
    (frozen,) = [line for line in lines if line["message"].startswith("froze the start-up heap")]
    # transformers, the tokenizer's Python side and jinja alone are over a hundred thousand tracked objects
    assert frozen["frozen_objects"] > 100_000
    # and the youngest generation is collected less often than CPython's default (700); the older ones as before
    assert frozen["gc_threshold"] == [YOUNG_COLLECTION_THRESHOLD, 10, 10]
    listening = next(index for index, line in enumerate(lines) if "listening on" in line["message"])
    assert lines.index(frozen) > listening
    assert len(sent) == 2 * len(SESSIONS) + 1
