"""Soak: sessions created, stepped, finalized (or left idle) and drained in a loop; does memory stay flat?

The proxy runs in this process (``run_proxy`` on its embedded engine, as ``dressage-proxy`` without
``--sglang-router-url``), with a short ``--session-idle-timeout`` and ``--tombstone-ttl`` so that a cycle sees
every eviction. Each cycle, over real HTTP:

1. ``--sessions`` sessions run ``--steps`` chat steps each (the conversation grows by one user turn and the
   proxy's answer per step; ``--concurrency`` sessions at a time);
2. most are finalized (``POST /session/finalize``); every ``--abandon``-th is left alone, as a crashed agent
   would, and the reaper finalizes it once it has been idle for the idle timeout (``finalize_reason:
   idle_timeout``);
3. at the peak (everything finalized, nothing drained) the proxy's ``/trajectory/stats`` and the RSS are read;
4. the trainer drains every session (``POST /trajectory/read`` with ``drain``), checking it got each one's
   segments and why it was finalized;
5. after the tombstone TTL has passed, the figures are read again ("settled").

Reported per cycle: RSS at the peak and settled (``VmRSS`` of this process: proxy, engine and client together),
the proxy's own counts and approximate bytes (``registry_sessions``, ``registry_bytes``, the store's ``bytes``).
Flat means: the settled counts and bytes return to the baseline every cycle (exactly: the store and the registry
keep nothing), and the settled RSS stops growing after the first cycles (the allocator keeps pages it has used,
so it grows during the first cycles and then reuses them).

Bounded: ``--seconds`` (default 60) of cycles, each with ``--sessions`` sessions (default 40); 127.0.0.1 only.

    .venv/bin/python bench/soak.py [--seconds 60] [--sessions 200] [--steps 3] [--abandon 5]

The suite's bounded version (``tests/e2e/test_soak.py``) runs the same :func:`soak` on trio's ``MockClock``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: how long past a timeout a cycle waits for the reaper (in sweep intervals: the reaper sweeps 4 times per timeout)
SETTLE_FACTOR = 1.6
NO_THINKING = {"enable_thinking": False}
#: finished requests the embedded engine remembers (see main_async)
ENGINE_REQUEST_LOG = 16
#: a user turn of about 1 KB, so that a session's messages weigh something next to its tokens
FILLER = " ".join(f"item{i} holds the value {i * 7}" for i in range(40))


def rss_bytes() -> int:
    """This process's resident set size (Linux ``/proc/self/status`` ``VmRSS``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


@attrs.frozen
class Cycle:
    """One cycle's figures."""

    cycle: int
    sessions: int
    idle_finalized: int
    peak_rss: int
    settled_rss: int
    # /trajectory/stats at the peak and settled.
    peak: dict[str, Any]
    settled: dict[str, Any]


@attrs.frozen
class SoakSettings:
    """One soak's shape; ``idle_timeout`` and ``tombstone_ttl`` are the proxy's."""

    sessions: int = 40
    steps: int = 3
    abandon: int = 5
    concurrency: int = 16
    idle_timeout: float = 2.0
    tombstone_ttl: float = 2.0


async def _session(client: httpx.AsyncClient, session_id: str, steps: int) -> None:
    """``steps`` chat steps of one conversation, each sending the whole conversation so far."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for step in range(steps):
        messages.append({"role": "user", "content": f"step {step}: {FILLER}"})
        response = await client.post(
            "/v1/chat/completions", headers={"X-Session-Id": session_id},
            json={"model": "m", "messages": messages, "max_tokens": 16, "chat_template_kwargs": NO_THINKING},
        )
        if response.status_code != 200:
            raise AssertionError(f"{session_id} step {step}: {response.status_code} {response.text}")
        messages.append({"role": "assistant", "content": response.json()["choices"][0]["message"]["content"]})


async def _post(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(path, json=body)
    response.raise_for_status()
    return response.json()


async def _stats(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/trajectory/stats")
    response.raise_for_status()
    return response.json()


async def run_cycle(client: httpx.AsyncClient, cycle: int, settings: SoakSettings) -> Cycle:
    """One cycle (see the module docstring); raises if a session's segments are missing or mislabelled."""
    ids = [f"soak-{cycle}-{i}" for i in range(settings.sessions)]
    abandoned = set(ids[:: settings.abandon]) if settings.abandon else set()
    limiter = trio.CapacityLimiter(settings.concurrency)

    async def one(session_id: str) -> None:
        async with limiter:
            await _session(client, session_id, settings.steps)
            if session_id not in abandoned:
                await _post(client, "/session/finalize", {"session_id": session_id})

    async with trio.open_nursery() as nursery:
        for session_id in ids:
            nursery.start_soon(one, session_id)
    # The abandoned sessions are finalized by the reaper once idle.
    await trio.sleep(settings.idle_timeout * SETTLE_FACTOR)
    peak, peak_rss = await _stats(client), rss_bytes()
    idle = 0
    for session_id in ids:
        drained = await _post(client, "/trajectory/read", {"session_id": session_id, "drain": True})
        segments = drained["data"]
        # Two-phase drain: the segments leave the store (and the session becomes a tombstone) on the ack.
        if drained["lease_id"] is not None:
            await _post(client, "/trajectory/ack", {"lease_id": drained["lease_id"]})
        reasons = {segment["finalize_reason"] for segment in segments}
        expected = "idle_timeout" if session_id in abandoned else "requested"
        if not segments or reasons != {expected}:
            raise AssertionError(f"{session_id}: {len(segments)} segment(s), finalize reasons {reasons}")
        idle += session_id in abandoned
    # The drained sessions' tombstones expire.
    await trio.sleep(settings.tombstone_ttl * SETTLE_FACTOR)
    return Cycle(cycle, len(ids), idle, peak_rss, rss_bytes(), peak, await _stats(client))


async def soak(
    url: str, settings: SoakSettings, more: Callable[[int], bool], report: Callable[[Cycle], Awaitable[None] | None]
) -> list[Cycle]:
    """Cycles while ``more(cycle index)``; ``report`` sees each cycle as it ends."""
    cycles = []
    async with httpx.AsyncClient(base_url=url, timeout=120.0) as client:
        while more(len(cycles)):
            cycles.append(await run_cycle(client, len(cycles), settings))
            await trio.lowlevel.checkpoint()
            report(cycles[-1])
    return cycles


def _mib(value: int) -> str:
    return f"{value / 2**20:.1f}"


def print_cycle(record: Cycle) -> None:
    peak, settled = record.peak, record.settled
    print(
        f"| {record.cycle} | {record.sessions} | {record.idle_finalized} | {_mib(record.peak_rss)} | "
        f"{_mib(record.settled_rss)} | {peak['registry_sessions']} | {_mib(peak['approximate_bytes'])} | "
        f"{settled['registry_sessions']} | {settled['registry_bytes']} | {settled['bytes']} |",
        flush=True,
    )


async def main_async(args: argparse.Namespace) -> None:
    from engine import EngineConfig
    from proxy.cli import run_proxy
    from proxy.config import ProxyConfig
    from serving.tokenizer_files import model_tokenizer_path

    settings = SoakSettings(args.sessions, args.steps, args.abandon, args.concurrency, args.timeout, args.timeout)
    path = model_tokenizer_path("qwen3")
    config = ProxyConfig(
        port=0, tokenizer_path=path, session_idle_timeout=settings.idle_timeout,
        tombstone_ttl=settings.tombstone_ttl, tool_call_parse_backend="local", reasoning_parse_backend="local",
    )
    async with trio.open_nursery() as nursery:
        # The engine's request log (1000 finished requests by default, each with its token ids) would fill during
        # the first cycles and look like the proxy's growth: keep it short.
        engine = EngineConfig(tokenizer_path=path, request_log_size=ENGINE_REQUEST_LOG)
        handle = await nursery.start(run_proxy, config, engine)
        start, baseline = time.monotonic(), rss_bytes()
        print(f"soak: {args.sessions} sessions x {args.steps} steps per cycle, every {args.abandon}th left idle, "
              f"idle timeout = tombstone TTL = {args.timeout} s, for {args.seconds} s; RSS = this process")
        print("| cycle | sessions | idle-finalized | peak RSS MiB | settled RSS MiB | peak registry sessions | "
              "peak approx MiB | settled registry sessions | settled registry bytes | settled store bytes |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        cycles = await soak(handle.url, settings, lambda _: time.monotonic() - start < args.seconds, print_cycle)
        nursery.cancel_scope.cancel()
    settled = [c.settled_rss for c in cycles]
    peak_approx = max(c.peak["approximate_bytes"] for c in cycles)
    warm = min(2, len(settled) - 1)
    later = len(settled) - 1 - warm
    growth = settled[-1] - settled[warm]
    print(f"\nRSS before the first cycle {_mib(baseline)} MiB; settled after cycle 0 {_mib(settled[0])} MiB, after "
          f"cycle {warm} {_mib(settled[warm])} MiB, after the last {_mib(settled[-1])} MiB")
    print(f"one cycle's working set (approximate bytes at its peak): {_mib(peak_approx)} MiB; settled RSS growth "
          f"after cycle {warm}: {_mib(growth)} MiB over {later} cycle(s) = "
          f"{growth / max(1, later) / peak_approx:.3f} working set per cycle")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--abandon", type=int, default=5, help="every Nth session is left to the idle timeout")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=2.0, help="idle timeout and tombstone TTL, seconds")
    trio.run(main_async, parser.parse_args())


if __name__ == "__main__":
    main()
