"""The store back ends on their own: ``append_step`` throughput at 64 concurrent sessions, with and without group
commit, as a ratio to the memory store measured in the same run.

    .venv/bin/python bench/store_backends.py [--sessions 64] [--steps 40] [--record-bytes 2048] [--rounds 3]
                                             [--no-postgresql]

Each configuration opens a fresh store (a SQLite file in a temporary folder; a fresh database on a throwaway
PostgreSQL server started by ``tests/postgres_server.py`` with fsync ON, so its commits cost what they cost in
production), then ``--sessions`` trio tasks each append ``--steps`` journal records of ``--record-bytes`` random
bytes one after another, as the registry does for a session (each call durable on return), and finally finalize
their session with one ``write`` of 4 segments. Printed per configuration: steps/s (best of ``--rounds``), the ratio
to memory, the mean number of calls per transaction (group commit's effect), and finalize writes/s.

This measures the store alone, so the memory store's ~µs calls make every durable ratio small; the proxy-level
figure (a whole commit, HTTP included, against a memory store) is the crash/fleet bench's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.trajectory.memory_store import InMemoryTrajectoryStore  # noqa: E402
from proxy.trajectory.stores.postgres_store import open_postgres_store  # noqa: E402
from proxy.trajectory.stores.sqlite_store import open_sqlite_store  # noqa: E402

Opener = Callable[[], Any]


def segment(session: str, index: int) -> dict[str, Any]:
    return {"trajectory_id": f"{session}:{index}", "parent_traj_id": session, "token_ids": list(range(600)),
            "logprobs": [-0.5] * 300, "loss_mask": [0] * 300 + [1] * 300,
            "messages": [{"role": "user", "content": "word " * 200}]}


async def workload(store: Any, sessions: int, steps: int, record_bytes: int) -> tuple[float, float]:
    """(steps/s, finalize writes/s) of one run on ``store``."""
    record = os.urandom(record_bytes)

    async def session(name: str) -> None:
        for step in range(steps):
            await store.append_step(name, step, record)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(sessions):
            nursery.start_soon(session, f"s{index}")
    appended = time.perf_counter() - started

    async def finalize(name: str) -> None:
        await store.write(name, [segment(name, i) for i in range(4)], result={"segments": 4})

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(sessions):
            nursery.start_soon(finalize, f"s{index}")
    finalized = time.perf_counter() - started
    return sessions * steps / appended, sessions / finalized


@contextlib.asynccontextmanager
async def opened(kind: str, options: dict[str, Any], folder: Path, pg: Any) -> AsyncIterator[Any]:
    if kind == "memory":
        yield InMemoryTrajectoryStore()
        return
    if kind == "sqlite":
        store = await open_sqlite_store(Path(tempfile.mkdtemp(dir=folder)) / "bench.sqlite3", **options)
    else:
        store = await open_postgres_store(pg.fresh_database("bench"), "postgresql://bench", **options)
    try:
        yield store
    finally:
        await store.flush()
        await store.aclose()


CONFIGURATIONS: list[tuple[str, str, dict[str, Any]]] = [
    ("memory", "memory", {}),
    ("sqlite FULL, grouped", "sqlite", {"synchronous": "FULL", "group_commit": True}),
    ("sqlite FULL, one transaction per call", "sqlite", {"synchronous": "FULL", "group_commit": False}),
    ("sqlite NORMAL, grouped", "sqlite", {"synchronous": "NORMAL", "group_commit": True}),
    ("sqlite NORMAL, one transaction per call", "sqlite", {"synchronous": "NORMAL", "group_commit": False}),
    ("postgresql, grouped", "postgresql", {"group_commit": True}),
    ("postgresql, one transaction per call", "postgresql", {"group_commit": False}),
]


async def run(args: argparse.Namespace, pg: Any) -> None:
    folder = Path(tempfile.mkdtemp(prefix="dressage-store-bench-"))
    results: dict[str, tuple[float, float, float]] = {}
    for _ in range(args.rounds):
        for label, kind, options in CONFIGURATIONS:
            if kind == "postgresql" and pg is None:
                continue
            async with opened(kind, options, folder, pg) as store:
                steps, writes = await workload(store, args.sessions, args.steps, args.record_bytes)
                writer = getattr(store, "writer", None)
                group = writer.operations / writer.transactions if writer and writer.transactions else 1.0
            best = results.get(label)
            if best is None or steps > best[0]:
                results[label] = (steps, writes, group)
    memory = results["memory"][0]
    print(f"{args.sessions} sessions x {args.steps} steps of {args.record_bytes} bytes, best of {args.rounds} rounds")
    print(f"| configuration | steps/s | ratio to memory | calls per transaction | finalize writes/s |")
    print("|---|---:|---:|---:|---:|")
    for label, (steps, writes, group) in results.items():
        print(f"| {label} | {steps:,.0f} | {steps / memory:.4f} | {group:.1f} | {writes:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--record-bytes", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-postgresql", action="store_true")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        pg = None
        if not args.no_postgresql:
            from tests.postgres_server import running_postgres

            pg = stack.enter_context(running_postgres(fsync=True, say=lambda line: print(line, file=sys.stderr)))
        trio.run(run, args, pg)


if __name__ == "__main__":
    main()
