"""Benchmark: proxy steps/s with the ``memory``, ``sqlite`` and ``postgresql`` stores (issue 16; target: SQLite at
least 0.8x memory), as ratios to memory measured in the same run.

One run:

- the embedded engine (``dressage-engine``, own process, its default policy: short answers, thinking off, at most
  ``--max-tokens``) and one ``dressage-proxy`` process per store routed to it, identical but for ``--store``
  (memory; SQLite on a file in a temporary folder; PostgreSQL on a real server from ``tests/postgres_server.py``
  with fsync on, a fresh database);
- ``--concurrency`` (64) clients on ``bench/loadgen.py`` connections, each running whole sessions: ``--turns`` chat
  steps (each echoes the proxy's answer and adds a user turn), then ``/session/finalize``, then the trainer's
  two-phase read (``/trajectory/read`` with drain, then ``/trajectory/ack`` of its lease), so every store write of
  a session's life is on the path: a journal record per step, finalize's transaction, the lease and its deletion;
- phases interleaved per round (memory, sqlite, postgresql, then the reverse order), so the machine's drift hits
  every store alike; the memory phases against each other (A/A) show the run's noise.

Reported per store: steps/s (committed chat steps; finalizes and reads are part of each session's cost but not
counted as steps), the ratio to the mean of the memory phases, the proxy's CPU ms per step (utime + stime from
/proc, the SQLite store's worker threads included), and for PostgreSQL the server's CPU ms per step (the postmaster
and its backends).

A phase is a fixed amount of work (every client runs ``--sessions`` sessions), so every store gets the same sessions
to write; bounded by ``--bound`` seconds per phase (a phase cut there is reported and fails the run); 127.0.0.1
only. Before the rounds, each proxy gets one session per client (warm-up, not reported). ``--smoke``: one round of
one session per client over memory and SQLite with 4 clients (the suite's check that the script runs).

    .venv/bin/python bench/store_throughput.py [--rounds 2] [--sessions 2] [--concurrency 64] [--turns 3]
                                               [--stores memory,sqlite,postgresql] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import trio

# The repository root, not bench/ (bench/engine.py would shadow the engine package).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.loadgen import Connection  # noqa: E402
from bench.servers import cpu_seconds, free_port, start_server, stop_servers, wait_listening  # noqa: E402

LOCAL_PARSERS = ["--tool-call-parse-backend", "local", "--reasoning-parse-backend", "local"]
NO_THINKING = {"enable_thinking": False}
STORES = ("memory", "sqlite", "postgresql")


def process_tree_cpu(root_pid: int) -> float:
    """CPU seconds of a process and its live children (PostgreSQL: the postmaster and its backends)."""
    total = cpu_seconds(root_pid)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == root_pid:
            with contextlib.suppress(OSError):
                total += cpu_seconds(int(entry.name))
    return total


@attrs.define
class Tally:
    steps: int = 0
    sessions: int = 0
    segments: int = 0
    errors: int = 0
    error_samples: list[str] = attrs.field(factory=list)

    def error(self, what: str, status: int, body: bytes) -> None:
        self.errors += 1
        if len(self.error_samples) < 3:
            self.error_samples.append(f"{what}: {status} {body[:200]!r}")


async def client_sessions(port: int, phase: str, client: int, args: argparse.Namespace, tally: Tally) -> None:
    """``args.sessions`` whole sessions of ``args.turns`` steps, one after another. Every request of a session
    carries its ``X-Session-Id`` (a load balancer in front of a fleet hashes it, ``bench/fleet_throughput.py``)."""
    conn = Connection("127.0.0.1", port)

    async def post(path: str, body: dict[str, Any], session_id: str) -> tuple[int, bytes]:
        return await conn.request("POST", path, json.dumps(body).encode(), extra_headers=[("x-session-id", session_id)])

    try:
        for number in range(args.sessions):
            session_id = f"{phase}-{client}-{number}"
            messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
            for turn in range(args.turns):
                messages.append({"role": "user", "content": f"Question {client}.{number}.{turn}: one fact, please."})
                status, payload = await post("/v1/chat/completions", {
                    "model": "m", "messages": messages, "max_tokens": args.max_tokens, "chat_template_kwargs": NO_THINKING,
                }, session_id)
                if status != 200:
                    tally.error("chat", status, payload)
                    break
                tally.steps += 1
                message = json.loads(payload)["choices"][0]["message"]
                messages.append({"role": "assistant", "content": message["content"]})
            status, payload = await post("/session/finalize", {"session_id": session_id}, session_id)
            if status != 200:
                tally.error("finalize", status, payload)
                continue
            status, payload = await post("/trajectory/read", {"session_id": session_id, "drain": True}, session_id)
            if status != 200:
                tally.error("read", status, payload)
                continue
            read = json.loads(payload)
            tally.segments += len(read["data"])
            if read.get("lease_id"):
                status, payload = await post("/trajectory/ack", {"lease_id": read["lease_id"]}, session_id)
                if status != 200:
                    tally.error("ack", status, payload)
            tally.sessions += 1
    finally:
        await conn.aclose()


@attrs.frozen
class Phase:
    store: str
    seconds: float
    tally: Tally
    proxy_cpu: float
    server_cpu: float | None
    #: True when the phase hit --bound before every client finished its sessions
    cut: bool = False

    @property
    def rate(self) -> float:
        return self.tally.steps / self.seconds

    def cpu_ms(self, seconds: float) -> float:
        return 1000 * seconds / max(self.tally.steps, 1)


async def run_phase(store: str, name: str, port: int, proxy_pid: int, server_pid: int | None,
                    args: argparse.Namespace) -> Phase:
    tally = Tally()
    before = cpu_seconds(proxy_pid), (process_tree_cpu(server_pid) if server_pid else None)
    start = time.perf_counter()
    with trio.move_on_after(args.bound) as bound:
        async with trio.open_nursery() as nursery:
            for client in range(args.concurrency):
                nursery.start_soon(client_sessions, port, name, client, args, tally)
    seconds = time.perf_counter() - start
    proxy_cpu = cpu_seconds(proxy_pid) - before[0]
    server_cpu = process_tree_cpu(server_pid) - before[1] if server_pid else None
    await trio.sleep(0.5)  # cut requests wind down before the next phase
    return Phase(store, seconds, tally, proxy_cpu, server_cpu, bound.cancelled_caught)


@contextlib.contextmanager
def postgres_if_wanted(stores: list[str]) -> Iterator[Any]:
    if "postgresql" not in stores:
        yield None
        return
    from tests.postgres_server import running_postgres

    with running_postgres(fsync=True, say=lambda line: print(line, file=sys.stderr)) as server:
        yield server


def start_proxies(tmp: Path, stores: list[str], server: Any, procs: dict[str, subprocess.Popen],
                  ports: dict[str, int]) -> None:
    bin_dir = Path(sys.executable).parent
    ports["engine"] = free_port()
    procs["engine"] = start_server([str(bin_dir / "dressage-engine"), "--port", str(ports["engine"])],
                                   tmp / "engine.log")
    wait_listening(ports["engine"], procs["engine"], 120)
    engine_url = f"http://127.0.0.1:{ports['engine']}"
    urls = {"memory": "memory", "sqlite": f"sqlite:///{tmp / 'bench.sqlite3'}"}
    if server is not None:
        urls["postgresql"] = server.fresh_database("bench")
    for store in stores:
        ports[store] = free_port()
        procs[store] = start_server(
            [str(bin_dir / "dressage-proxy"), "--port", str(ports[store]), "--sglang-router-url", engine_url,
             "--sglang-worker-urls", engine_url, "--store", urls[store], "--log-level", "warning", *LOCAL_PARSERS],
            tmp / f"proxy-{store}.log")
    for store in stores:
        wait_listening(ports[store], procs[store], 120)


def report(phases: list[Phase], args: argparse.Namespace, stores: list[str], server_pid: int | None) -> None:
    by_store = {store: [p for p in phases if p.store == store] for store in stores}
    memory_rate = statistics.mean(p.rate for p in by_store["memory"])
    print(f"\n## {args.concurrency} concurrent sessions, {args.turns} steps each then finalize + read + ack, "
          f"{args.sessions} per client and phase; {args.rounds} round(s)\n")
    print("| store | steps/s (phases) | steps/s mean | / memory | proxy CPU ms/step | server CPU ms/step | "
          "sessions | errors |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for store, runs in by_store.items():
        rate = statistics.mean(p.rate for p in runs)
        cpu = statistics.mean(p.cpu_ms(p.proxy_cpu) for p in runs)
        server = (f"{statistics.mean(p.cpu_ms(p.server_cpu) for p in runs):.2f}"
                  if runs[0].server_cpu is not None else "-")
        print(f"| {store} | {', '.join(f'{p.rate:.0f}' for p in runs)} | {rate:.0f} | **{rate / memory_rate:.2f}** | "
              f"{cpu:.2f} | {server} | {sum(p.tally.sessions for p in runs)} | "
              f"{sum(p.tally.errors for p in runs)} |")
    memory = [p.rate for p in by_store["memory"]]
    if len(memory) > 1:
        print(f"\nNoise (memory phases against each other, A/A): {min(memory) / max(memory):.2f} "
              f"(min / max of {len(memory)} phases)")
    samples = [s for p in phases for s in p.tally.error_samples]
    if samples:
        print("\nErrors (samples):\n" + "\n".join(f"- {s}" for s in samples[:6]))
    print(f"\nload average: {os.getloadavg()[0]:.2f} (1 min) at the end")


async def main_async(args: argparse.Namespace) -> int:
    stores = [s for s in args.stores.split(",") if s]
    if stores[0] != "memory" or not set(stores) <= set(STORES):
        raise SystemExit(f"--stores: memory first, then any of {STORES}")
    procs: dict[str, subprocess.Popen] = {}
    ports: dict[str, int] = {}
    tmp = Path(tempfile.mkdtemp(prefix="store-bench-"))
    phases: list[Phase] = []
    with postgres_if_wanted(stores) as server:
        try:
            start_proxies(tmp, stores, server, procs, ports)
            server_pid = server.process.pid if server is not None else None
            print(f"store throughput: stores {', '.join(stores)}; engine and proxies up (logs in {tmp})", flush=True)
            # Warm-up: each proxy's first requests pay one-time costs (imports, connection pools, schema).
            for store in stores:
                await run_phase(store, f"warm-{store}", ports[store], procs[store].pid, None, _short(args))
            for round_ in range(args.rounds):
                order = stores if round_ % 2 == 0 else list(reversed(stores))
                for store in order:
                    pid = server_pid if store == "postgresql" else None
                    phase = await run_phase(store, f"r{round_}-{store}", ports[store], procs[store].pid, pid, args)
                    phases.append(phase)
                    print(f"- round {round_} {store}: {phase.tally.steps} steps in {phase.seconds:.1f} s "
                          f"({phase.rate:.0f}/s), {phase.tally.sessions} sessions, {phase.tally.errors} errors"
                          + (f", CUT by --bound {args.bound:g} s" if phase.cut else ""), flush=True)
            report(phases, args, stores, server_pid)
        finally:
            stop_servers(procs, tmp, keep_logs=args.keep_logs)
    return 1 if any(p.tally.errors or p.cut or not p.tally.steps for p in phases) else 0


def _short(args: argparse.Namespace) -> argparse.Namespace:
    """The warm-up's shape: one session per client."""
    return argparse.Namespace(**{**vars(args), "sessions": 1})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default=",".join(STORES), help="comma-separated, memory first")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=2, help="sessions per client and phase")
    parser.add_argument("--bound", type=float, default=300.0, help="seconds a phase may take at most")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--turns", type=int, default=3, help="chat steps per session before its finalize")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="one short round, memory and sqlite, 4 clients")
    args = parser.parse_args()
    if args.smoke:
        args.stores, args.rounds, args.sessions, args.concurrency = "memory,sqlite", 1, 1, 4
    raise SystemExit(trio.run(main_async, args))


if __name__ == "__main__":
    main()
