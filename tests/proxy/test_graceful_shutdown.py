"""Graceful shutdown of the real process (issue 15, item 4): SIGTERM and SIGINT with generations in flight.

The proxy runs as a subprocess (``python -m proxy.cli``) on its embedded engine, whose script makes every generation
slow (a token rate, no end token, so it runs to ``max_tokens``). Eight generations, half streaming, are in flight
(the gate counts them) when the signal is sent. Every client must get either its full answer or a clean error (a
stream: an SSE error event with code ``shutting_down`` then ``data: [DONE]``; non-streaming: 503 with an
OpenAI-shaped ``shutting_down`` body), and the process must exit 0 with no traceback on stderr. Everything is bounded
by timeouts; nothing asserts on wall-clock durations.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import attrs
import httpx
import pytest
import trio

GENERATIONS = 8
#: tokens per second of every scripted answer (the engine's --token-rate)
TOKEN_RATE = 20
#: bounds (seconds) on each wait of the test, never asserted on
START_BOUND = 120
IN_FLIGHT_BOUND = 60
EXIT_BOUND = 120


@attrs.frozen
class Outcome:
    """What one client got."""

    streaming: bool
    status: int
    #: a streaming answer's data lines, in order ("[DONE]" included); a non-streaming answer's body as one item
    items: tuple[object, ...]

    @property
    def finished(self) -> bool:
        """The full answer: a completion whose finish reason is ``length`` (the script never ends on its own)."""
        if self.status != 200:
            return False
        if self.streaming:
            chunks = [item for item in self.items if isinstance(item, dict)]
            reasons = [c["choices"][0].get("finish_reason") for c in chunks if c.get("choices")]
            return self.items[-1:] == ("[DONE]",) and "length" in reasons and not any("error" in c for c in chunks)
        (body,) = self.items
        return body["choices"][0]["finish_reason"] == "length"

    @property
    def cut_cleanly(self) -> bool:
        """The shutdown's clean error: an SSE error event then ``[DONE]``, or a 503 OpenAI-shaped body."""
        if self.streaming:
            return (self.status == 200 and self.items[-1:] == ("[DONE]",) and len(self.items) >= 2
                    and isinstance(self.items[-2], dict) and self.items[-2].get("error", {}).get("code")
                    == "shutting_down")
        (body,) = self.items
        error = body.get("error", {}) if isinstance(body, dict) else {}
        return self.status == 503 and error.get("code") == "shutting_down" and error.get("type") == "server_error"


def _script(path: Path) -> Path:
    # One wildcard entry per generation: no end token, so each runs to its max_tokens at TOKEN_RATE.
    lines = [json.dumps({"session": "*", "output": "Still thinking about it.", "eos": False})] * GENERATIONS
    path.write_text("\n".join(lines) + "\n")
    return path


async def _start_proxy(tmp_path: Path, qwen3_path: Path, *flags: str) -> tuple[trio.Process, str, Path]:
    """The proxy process on its slow embedded engine: (process, base URL, its stderr file)."""
    stderr = tmp_path / "stderr.txt"
    command = [
        sys.executable, "-m", "proxy.cli", "--port", "0", "--tokenizer-path", str(qwen3_path),
        "--script", str(_script(tmp_path / "script.jsonl")), "--token-rate", str(TOKEN_RATE), *flags,
    ]
    with stderr.open("w") as sink:
        process = await trio.lowlevel.open_process(command, stderr=sink, stdout=subprocess.DEVNULL)
    with trio.fail_after(START_BOUND):
        while "listening on " not in stderr.read_text():
            if process.poll() is not None:
                pytest.fail(f"the proxy exited at start-up:\n{stderr.read_text()}")
            await trio.sleep(0.1)
    url = stderr.read_text().split("listening on ")[1].split()[0]
    return process, url, stderr


async def _generate(client: httpx.AsyncClient, url: str, index: int, streaming: bool, max_tokens: int) -> Outcome:
    body = {
        "model": "m", "messages": [{"role": "user", "content": f"question {index}"}], "max_tokens": max_tokens,
        "stream": streaming, "session_id": f"shutdown-{index}",
    }
    if not streaming:
        response = await client.post(url + "/v1/chat/completions", json=body)
        return Outcome(False, response.status_code, (response.json(),))
    items: list[object] = []
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            await response.aread()
            return Outcome(True, response.status_code, (response.json(),))
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                data = line[len("data: "):]
                items.append(data if data == "[DONE]" else json.loads(data))
    return Outcome(True, response.status_code, tuple(items))


async def _in_flight(client: httpx.AsyncClient, url: str) -> int:
    return (await client.get(url + "/health")).json()["gate"]["in_flight"]


async def _shut_down_with_generations_in_flight(
    tmp_path: Path, qwen3_path: Path, *, grace: float, max_tokens: int, signum: int = signal.SIGTERM
) -> tuple[list[Outcome], int, str, str]:
    """Start the proxy, put GENERATIONS in flight, send ``signum``; (outcomes, exit code, stderr, late answer)."""
    process, url, stderr = await _start_proxy(tmp_path, qwen3_path, "--shutdown-grace", str(grace))
    outcomes: list[Outcome] = []
    late: list[str] = []
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(EXIT_BOUND)) as client:
            async with trio.open_nursery() as nursery:

                async def one(index: int) -> None:
                    outcomes.append(await _generate(client, url, index, index % 2 == 0, max_tokens))

                for index in range(GENERATIONS):
                    nursery.start_soon(one, index)
                with trio.fail_after(IN_FLIGHT_BOUND):
                    while await _in_flight(client, url) < GENERATIONS:
                        await trio.sleep(0.05)
                process.send_signal(signum)
                # A request that arrives after the stop began is not started (or cannot even connect).
                with trio.fail_after(EXIT_BOUND):
                    while "stopping" not in stderr.read_text():
                        await trio.sleep(0.05)
                    try:
                        async with httpx.AsyncClient(timeout=httpx.Timeout(EXIT_BOUND)) as fresh:
                            refused = await fresh.post(url + "/v1/chat/completions", json={
                                "model": "m", "messages": [{"role": "user", "content": "late"}], "max_tokens": 4})
                        late.append(f"{refused.status_code} {refused.json()['error']['code']}")
                    except httpx.TransportError:
                        late.append("not accepted")
        with trio.fail_after(EXIT_BOUND):
            code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return outcomes, code, stderr.read_text(), late[0]


async def test_sigterm_lets_generations_in_flight_finish_within_the_grace(tmp_path: Path, qwen3_path: Path) -> None:
    # A long grace: every generation finishes (300 tokens at 20 per second: long enough that all eight are in
    # flight together even on a loaded machine), then the process exits 0.
    outcomes, code, stderr, late = await _shut_down_with_generations_in_flight(
        tmp_path, qwen3_path, grace=600, max_tokens=300)
    assert len(outcomes) == GENERATIONS
    assert all(o.finished for o in outcomes), outcomes
    assert code == 0, stderr
    assert "Traceback" not in stderr, stderr
    assert late in ("503 shutting_down", "not accepted"), late


async def test_sigterm_cuts_generations_still_running_when_the_grace_runs_out(tmp_path: Path,
                                                                               qwen3_path: Path) -> None:
    # A short grace and generations of minutes (4000 tokens at 20 per second): every client gets the clean error.
    outcomes, code, stderr, late = await _shut_down_with_generations_in_flight(
        tmp_path, qwen3_path, grace=0.5, max_tokens=4000)
    assert len(outcomes) == GENERATIONS
    assert all(o.cut_cleanly for o in outcomes), outcomes
    assert {o.streaming for o in outcomes} == {True, False}
    assert code == 0, stderr
    assert "Traceback" not in stderr, stderr
    assert late in ("503 shutting_down", "not accepted"), late


async def test_sigint_stops_the_same_way_and_exits_0_without_a_traceback(tmp_path: Path, qwen3_path: Path) -> None:
    outcomes, code, stderr, _ = await _shut_down_with_generations_in_flight(
        tmp_path, qwen3_path, grace=0.5, max_tokens=4000, signum=signal.SIGINT)
    assert len(outcomes) == GENERATIONS
    assert all(o.cut_cleanly for o in outcomes), outcomes
    assert code == 0, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert "stopped" in stderr.splitlines()[-1]
