"""Benchmark: does one large request block the proxy's event loop? A ``pause_state`` probe, idle and under 10 MB prompts.

One run, one proxy process (``dressage-proxy`` on its embedded engine, as ``./dev serve`` starts it), two phases
compared in the same run (the machines are shared and noisy):

- **idle**: a probe client sends ``GET /v1/rollout/pause_state`` on one keep-alive connection every
  ``--probe-interval`` seconds for ``--idle-seconds``, and records each answer's latency;
- **loaded**: the same probe while ``--prompts`` chat completions of ``--prompt-mb`` MB of user text each arrive,
  ``--concurrency`` at a time. Every one of them is a first step, so the proxy parses and validates the whole
  body, renders the chat template and encodes the whole prompt (~2.5M tokens for 10 MB, far beyond the engine's
  context window: each is answered 400 ``context_overflow`` after that work, as a real deployment would answer it).
  Only probes sent while at least one large request is in flight count.

Printed: p50, p99 and max probe latency of each phase and **loaded p99 / idle p99** (issue 15 asks for at most 3x),
and the status and duration of every large request. The probe is the cheapest request there is, answered on the
event loop: its latency is the loop's responsiveness. ``--proxy-src DIR`` runs the proxy from another checkout
(``PYTHONPATH``), to measure a before/after pair with the same load generator.

Bounded: ``--prompts`` requests, every wait has a deadline (``--bound`` seconds for the loaded phase); talks to
127.0.0.1 only.

    .venv/bin/python bench/blocking.py [--prompt-mb 10] [--prompts 3] [--concurrency 2] [--idle-seconds 10]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import attrs
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import free_port, start_server, stop_servers, wait_listening  # noqa: E402
from loadgen import Connection  # noqa: E402

PROBE_PATH = "/v1/rollout/pause_state"
WORDS = ("check", "results", "plan", "value", "step", "data", "summary", "carefully", "report", "clearly")


def large_body(megabytes: float, salt: int) -> bytes:
    """A chat completion whose one user message holds ``megabytes`` MB of plain words (a first step: full encode)."""
    size = int(megabytes * 1_000_000)
    sentence = " ".join(WORDS[(i * 7 + salt) % len(WORDS)] for i in range(60)) + ". "
    text = (sentence * (size // len(sentence) + 1))[:size]
    return json.dumps({"model": "default", "messages": [{"role": "user", "content": text}],
                       "max_tokens": 8}).encode()


@attrs.define
class Probes:
    """Probe latencies (seconds) of one phase."""

    latencies: list[float] = attrs.field(factory=list)
    errors: int = 0

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


async def probe_until(port: int, interval: float, stop: trio.Event, counts: Probes, in_window: callable) -> None:
    """Probe ``pause_state`` every ``interval`` seconds until ``stop``; keep the latencies ``in_window()`` says."""
    conn = Connection("127.0.0.1", port)
    try:
        while not stop.is_set():
            counted = in_window()
            start = time.perf_counter()
            status, _ = await conn.request("GET", PROBE_PATH, b"")
            elapsed = time.perf_counter() - start
            if status != 200:
                counts.errors += 1
            elif counted and in_window():
                counts.latencies.append(elapsed)
            with trio.move_on_after(interval):
                await stop.wait()
    finally:
        await conn.aclose()


def post_blocking(port: int, body: bytes, session_id: str, timeout: float) -> tuple[int, bytes]:
    """One large POST with the stdlib's blocking client (run in a thread: sending 10 MB releases the GIL)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json",
                                                                                   "X-Session-Id": session_id})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


async def run(args: argparse.Namespace, port: int) -> tuple[Probes, Probes, list[tuple[int, float, str]]]:
    idle, loaded = Probes(), Probes()
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(probe_until, port, args.probe_interval, stop, idle, lambda: True)
        await trio.sleep(args.idle_seconds)
        stop.set()

    bodies = [large_body(args.prompt_mb, salt) for salt in range(args.prompts)]
    in_flight = 0
    results: list[tuple[int, float, str]] = []
    limiter = trio.CapacityLimiter(args.concurrency)
    stop = trio.Event()

    async def send(index: int, body: bytes) -> None:
        nonlocal in_flight
        async with limiter:
            in_flight += 1
            start = time.perf_counter()
            try:
                status, payload = await trio.to_thread.run_sync(post_blocking, port, body, f"blocking-{index}",
                                                                args.bound)
                code = json.loads(payload).get("error", {}).get("code", "") if status != 200 else "ok"
            except OSError as exc:
                status, code = 0, type(exc).__name__
            finally:
                in_flight -= 1
            results.append((status, time.perf_counter() - start, code))

    with trio.fail_after(args.bound):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(probe_until, port, args.probe_interval, stop, loaded, lambda: in_flight > 0)
            async with trio.open_nursery() as senders:
                for index, body in enumerate(bodies):
                    senders.start_soon(send, index, body)
            stop.set()
    return idle, loaded, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt-mb", type=float, default=10.0, help="size of each large prompt's text (MB)")
    parser.add_argument("--prompts", type=int, default=3, help="large requests in the loaded phase")
    parser.add_argument("--concurrency", type=int, default=2, help="large requests in flight at once")
    parser.add_argument("--probe-interval", type=float, default=0.02, help="seconds between two probes")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="length of the idle phase")
    parser.add_argument("--bound", type=float, default=900.0, help="deadline of the loaded phase (seconds)")
    parser.add_argument("--proxy-src", type=Path, default=None, help="run the proxy from this checkout")
    parser.add_argument("--proxy-arg", action="append", default=[], help="extra dressage-proxy flag (repeatable)")
    args = parser.parse_args()

    if args.proxy_src is not None:
        os.environ["PYTHONPATH"] = str(args.proxy_src.resolve())
    logs = Path(tempfile.mkdtemp(prefix="dressage-bench-blocking-"))
    port = free_port()
    procs = {"proxy": start_server([sys.executable, "-m", "proxy.cli", "--port", str(port), *args.proxy_arg],
                                   logs / "proxy.log")}
    try:
        wait_listening(port, procs["proxy"], seconds=120)
        idle, loaded, results = trio.run(run, args, port)
    finally:
        stop_servers(procs, logs)

    def ms(seconds: float) -> str:
        return f"{seconds * 1000:.1f}"

    source = args.proxy_src or Path(__file__).resolve().parent.parent
    print(f"proxy from {source}; {args.prompts} prompts of {args.prompt_mb} MB, {args.concurrency} at a time; "
          f"a probe every {args.probe_interval * 1000:.0f} ms\n")
    print("| phase | probes | p50 (ms) | p99 (ms) | max (ms) |")
    print("|---|---:|---:|---:|---:|")
    for name, probes in (("idle", idle), ("large prompts arriving", loaded)):
        print(f"| {name} | {len(probes.latencies)} | {ms(probes.percentile(50))} | {ms(probes.percentile(99))} | "
              f"{ms(max(probes.latencies, default=float('nan')))} |")
    ratio = loaded.percentile(99) / idle.percentile(99)
    print(f"\nloaded p99 / idle p99: **{ratio:.2f}x** (target: within 3x: {'met' if ratio <= 3 else 'NOT met'})")
    if idle.errors or loaded.errors:
        print(f"probe errors: idle {idle.errors}, loaded {loaded.errors}")
    print("large requests (status, seconds, code): " + ", ".join(f"{s} {t:.1f}s {c}" for s, t, c in results))


if __name__ == "__main__":
    main()
