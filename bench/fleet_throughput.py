"""Benchmark: fleet throughput with 1, 2 and 3 proxies behind a load balancer over one PostgreSQL (issue 16).

One run:

- a real PostgreSQL server (``tests/postgres_server.py``, fsync on, one database: the fleet's store), the embedded
  engine (``dressage-engine``, own process, default policy, short answers) and three ``dressage-proxy`` processes on
  that store (``--store postgresql://...``, ``--proxy-id p0..p2``), each routed to the engine;
- HAProxy (Debian's package, installed on demand through ``tests/debian_packages.py``) in front of the first N of
  them, hashing the session header with consistent hashing (``balance hdr(X-Session-Id)``, ``hash-type
  consistent``, health checks on ``/health``: the configuration of the fleet test, ``tests/fleet/
  test_fleet_balancer.py:haproxy_config``), restarted with a new configuration for each N;
- the sessions of ``bench/store_throughput.py`` (``--concurrency`` clients, whole sessions: chat steps, finalize,
  two-phase read), every request carrying ``X-Session-Id``, through HAProxy;
- phases N = 1, 2, 3, then 3, 2, 1 (``--rounds``), each a fixed amount of work (every client runs ``--sessions``
  sessions; the first phase is preceded by a warm-up of one session per client).

**On two cores this shows overhead, not scaling**: every proxy, the engine, PostgreSQL, HAProxy and the load
generator share the same two cores, so more proxies cannot add CPU; the steps/s per N show what a fleet costs
(session leases, the shared store, the balancer's hop), not what it gains. The scaling is projected instead from
per-request CPU: each proxy process's CPU seconds per step (utime + stime from /proc), PostgreSQL's (postmaster and
backends) and HAProxy's. With one core per proxy, N proxies serve about N / (proxy CPU per step) steps/s until
PostgreSQL's CPU per step (times the steps) or the upstream's fills the cores given to it; the report prints both.

Bounded: a phase stops after ``--bound`` seconds (reported, and the run fails); 127.0.0.1 only. ``--smoke``: N = 1
and 2, 4 clients, one session each, one round.

    .venv/bin/python bench/fleet_throughput.py [--rounds 2] [--sessions 2] [--concurrency 64] [--turns 3] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.servers import cpu_seconds, free_port, start_server, stop_servers, wait_listening  # noqa: E402
from bench.store_throughput import LOCAL_PARSERS, Tally, client_sessions, process_tree_cpu  # noqa: E402
# The fleet test's balancer configuration (session-header hashing, consistent, health-checked), reused as is.
from tests.fleet.test_fleet_balancer import haproxy_config  # noqa: E402

HAPROXY = Path("/usr/sbin/haproxy")
FLEET_SIZES = (1, 2, 3)


def ensure_haproxy() -> Path:
    from tests.debian_packages import ensure_installed

    return ensure_installed("haproxy", HAPROXY, lambda line: print(line, file=sys.stderr))


@attrs.frozen
class Phase:
    size: int
    seconds: float
    tally: Tally
    #: CPU seconds during the phase: "proxies" (the N in use), "postgresql", "haproxy", "engine", "p0".."pN-1"
    cpu: dict[str, float]
    #: True when the phase hit --bound before every client finished its sessions
    cut: bool = False

    @property
    def rate(self) -> float:
        return self.tally.steps / self.seconds

    @property
    def shares(self) -> str:
        """Each proxy's share of the proxies' CPU (how evenly the balancer spread the sessions)."""
        total = max(self.cpu["proxies"], 1e-9)
        return "/".join(f"{100 * self.cpu[f'p{i}'] / total:.0f}" for i in range(self.size))

    def ms_per_step(self, who: str) -> float:
        return 1000 * self.cpu[who] / max(self.tally.steps, 1)


async def run_phase(size: int, name: str, balancer_port: int, pids: dict[str, int], args: argparse.Namespace) -> Phase:
    watched = {"proxies": [pids[f"p{i}"] for i in range(size)], "engine": [pids["engine"]],
               "haproxy": [pids["haproxy"]]}

    def cpu() -> dict[str, float]:
        out = {who: sum(cpu_seconds(pid) for pid in ps) for who, ps in watched.items()}
        out.update({f"p{i}": cpu_seconds(pids[f"p{i}"]) for i in range(size)})
        out["postgresql"] = process_tree_cpu(pids["postgresql"])
        return out

    tally = Tally()
    before, start = cpu(), time.perf_counter()
    with trio.move_on_after(args.bound) as bound:
        async with trio.open_nursery() as nursery:
            for client in range(args.concurrency):
                nursery.start_soon(client_sessions, balancer_port, name, client, args, tally)
    seconds = time.perf_counter() - start
    after = cpu()
    await trio.sleep(0.5)
    return Phase(size, seconds, tally, {who: after[who] - before[who] for who in after}, bound.cancelled_caught)


def start_haproxy(tmp: Path, size: int, proxy_ports: list[int], procs: dict[str, subprocess.Popen]) -> int:
    if "haproxy" in procs:
        procs.pop("haproxy").terminate()
    port = free_port()
    config = tmp / f"haproxy-{size}.cfg"
    config.write_text(haproxy_config(port, proxy_ports[:size]))
    procs["haproxy"] = start_server([str(HAPROXY), "-db", "-f", str(config)], tmp / f"haproxy-{size}.log")
    wait_listening(port, procs["haproxy"], 30)
    return port


def report(phases: list[Phase], args: argparse.Namespace) -> None:
    sizes = sorted({p.size for p in phases})
    base = statistics.mean(p.rate for p in phases if p.size == sizes[0])
    print(f"\n## Fleet of N proxies behind HAProxy over one PostgreSQL: {args.concurrency} concurrent sessions, "
          f"{args.turns} steps each then finalize + read + ack, {args.sessions} per client and phase; {args.rounds} "
          "round(s)\n")
    print("| N | steps/s (phases) | steps/s mean | / N=1 | proxy CPU ms/step (all N) | PostgreSQL ms/step | "
          "HAProxy ms/step | engine ms/step | proxy CPU shares % | errors |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|---:|")
    per_step: dict[int, dict[str, float]] = {}
    for size in sizes:
        runs = [p for p in phases if p.size == size]
        rate = statistics.mean(p.rate for p in runs)
        per_step[size] = {who: statistics.mean(p.ms_per_step(who) for p in runs)
                          for who in ("proxies", "postgresql", "haproxy", "engine")}
        row = per_step[size]
        print(f"| {size} | {', '.join(f'{p.rate:.0f}' for p in runs)} | {rate:.0f} | **{rate / base:.2f}** | "
              f"{row['proxies']:.2f} | {row['postgresql']:.2f} | {row['haproxy']:.2f} | {row['engine']:.2f} | "
              f"{', '.join(p.shares for p in runs)} | {sum(p.tally.errors for p in runs)} |")
    one = per_step[sizes[0]]
    print("\nProjection from per-step CPU (one core per proxy; the engine stands in for SGLang and is not counted):")
    for size in (1, 2, 3, 8, 16):
        proxy_bound = size / (per_step.get(size, per_step[sizes[-1]])["proxies"] / 1000)
        print(f"- {size} proxies: about {proxy_bound:.0f} steps/s proxy-bound")
    for who, label in (("postgresql", "PostgreSQL"), ("haproxy", "HAProxy")):
        ceiling = f"about {1000 / one[who]:.0f} steps/s per core it gets" if one[who] else "not measurable (0 CPU ticks)"
        print(f"- {label}'s ceiling: {ceiling} ({one[who]:.2f} ms/step)")
    samples = [s for p in phases for s in p.tally.error_samples]
    if samples:
        print("\nErrors (samples):\n" + "\n".join(f"- {s}" for s in samples[:6]))


async def main_async(args: argparse.Namespace) -> int:
    from tests.postgres_server import running_postgres

    sizes = [size for size in FLEET_SIZES if size <= args.max_proxies]
    ensure_haproxy()
    procs: dict[str, subprocess.Popen] = {}
    tmp = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    phases: list[Phase] = []
    bin_dir = Path(sys.executable).parent
    with running_postgres(fsync=True, say=lambda line: print(line, file=sys.stderr)) as server:
        try:
            store = server.fresh_database("fleet_bench")
            engine_port = free_port()
            procs["engine"] = start_server([str(bin_dir / "dressage-engine"), "--port", str(engine_port)],
                                           tmp / "engine.log")
            wait_listening(engine_port, procs["engine"], 120)
            engine_url = f"http://127.0.0.1:{engine_port}"
            ports = [free_port() for _ in sizes]
            for i, port in enumerate(ports):
                procs[f"p{i}"] = start_server(
                    [str(bin_dir / "dressage-proxy"), "--port", str(port), "--sglang-router-url", engine_url,
                     "--sglang-worker-urls", engine_url, "--store", store, "--proxy-id", f"p{i}",
                     "--log-level", "warning", *LOCAL_PARSERS], tmp / f"proxy-p{i}.log")
            for i, port in enumerate(ports):
                wait_listening(port, procs[f"p{i}"], 120)
            print(f"fleet throughput: {len(ports)} proxies on one PostgreSQL, HAProxy in front (logs in {tmp})",
                  flush=True)
            for round_ in range(args.rounds):
                for size in sizes if round_ % 2 == 0 else list(reversed(sizes)):
                    balancer = start_haproxy(tmp, size, ports, procs)
                    pids = {name: proc.pid for name, proc in procs.items()}
                    pids["postgresql"] = server.process.pid
                    if round_ == 0 and size == sizes[0]:
                        await run_phase(size, f"warm-{size}", balancer, pids, argparse.Namespace(**{**vars(args),
                                                                                                   "sessions": 1}))
                    phase = await run_phase(size, f"r{round_}-n{size}", balancer, pids, args)
                    phases.append(phase)
                    print(f"- round {round_} N={size}: {phase.tally.steps} steps in {phase.seconds:.1f} s "
                          f"({phase.rate:.0f}/s), {phase.tally.sessions} sessions, {phase.tally.errors} errors"
                          + (f", CUT by --bound {args.bound:g} s" if phase.cut else ""), flush=True)
            report(phases, args)
        finally:
            stop_servers(procs, tmp, keep_logs=args.keep_logs)
    return 1 if any(p.tally.errors or p.cut or not p.tally.steps for p in phases) else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=2, help="sessions per client and phase")
    parser.add_argument("--bound", type=float, default=300.0, help="seconds a phase may take at most")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--max-proxies", type=int, default=3, choices=FLEET_SIZES)
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="N = 1 and 2, 4 clients, one short round")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.sessions, args.concurrency, args.max_proxies = 1, 1, 4, 2
    raise SystemExit(trio.run(main_async, args))


if __name__ == "__main__":
    main()
