"""Benchmark: how much of the proxy's CPU per non-streaming request is the HTTP stack's (issue 21 item 2).

Four processes in front of one fixed-answer floor (``bench/fixed_upstream.py``, bodies captured from the embedded
engine), interleaved round by round, CPU per request from ``/proc`` (utime + stime over a phase):

- ``bare``: ``bench/bare_server.py``, an ASGI app on hypercorn-trio answering a fixed body (the server alone);
- ``bare+client``: the same, calling the floor once per request through the proxy's upstream client;
- ``proxy``: ``dressage-proxy`` (TITO, trie, recording; ``--store memory``), 4-turn sessions as ``./dev bench``'s;
- ``gateway`` (when the ``bench`` extra is installed): ``bench/gateway.py``, FastAPI + httpx re-rendering the chat
  template each turn, the reference of item 2.

``--trees base=/path/a,this=/path/b`` runs one proxy per source checkout instead (``proxy-base``, ``proxy-this``;
``servers.start_server(source_tree=)``), each round in turn with the others (the order reversed every other round),
and prints each tree's CPU over the first's round by round: a before/after of a change under this load in the same
minutes (the machine's drift between separate runs is larger than most changes).

    .venv/bin/python bench/server_floor.py [--rounds 3] [--requests 1600] [--trees label=path,...] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import floor_bench  # noqa: E402
from fixed_upstream import capture  # noqa: E402
from servers import free_port, source_trees, start_server, stop_servers, wait_listening  # noqa: E402

BENCH = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=1600, help="requests per phase")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=15.0, help="bound of each phase")
    parser.add_argument("--trees", default="", help="label=path,...: one proxy per source checkout, compared")
    parser.add_argument("--smoke", action="store_true", help="a tiny run (seconds), for the test suite")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.requests, args.clients = 1, 32, 4
    py, tmp = sys.executable, Path(tempfile.mkdtemp(prefix="dressage-server-floor-"))
    procs = {}
    try:
        capture(tmp / "answers.json")
        ports = {"floor-cumulative": free_port()}
        procs["floor-cumulative"] = start_server(
            [*floor_bench.floor_command(tmp / "answers.json", "cumulative"), "--port", str(ports["floor-cumulative"])],
            tmp / "floor.log")
        wait_listening(ports["floor-cumulative"], procs["floor-cumulative"], 60)
        url = f"http://127.0.0.1:{ports['floor-cumulative']}"
        commands = {
            "bare": [py, str(BENCH / "bare_server.py")],
            "bare+client": [py, str(BENCH / "bare_server.py"), "--upstream", url],
        }
        trees = {("proxy" if label == "this" and path is None else f"proxy-{label}"): path
                 for label, path in source_trees(args.trees)}
        commands.update(dict.fromkeys(trees, floor_bench.proxy_command(url)))
        if floor_bench.HAVE_GATEWAY:
            commands["gateway"] = floor_bench.gateway_command(url)
        for name, argv in commands.items():
            ports[f"{name}-cumulative"] = port = free_port()
            procs[f"{name}-cumulative"] = start_server([*argv, "--port", str(port)], tmp / f"{name}.log",
                                                       source_tree=trees.get(name))
        for name, proc in procs.items():
            wait_listening(ports[name], proc, 180)
        pids = {name: proc.pid for name, proc in procs.items()}
        shape = floor_bench.shapes()[0]  # non-streaming 4-turn sessions, 8-token answers
        per_request: dict[str, list[float]] = {name: [] for name in commands}

        async def run() -> None:
            for round_index in range(args.rounds + 1):  # round 0 warms up
                for name in list(commands)[::-1 if round_index % 2 else 1]:
                    phase = await floor_bench.run_phase(
                        shape, name, ports, pids, clients=args.clients, streams=0, seconds=args.seconds,
                        ns_requests=args.clients * 4 if round_index == 0 else args.requests)
                    if phase.errors:
                        raise SystemExit(f"{name}: {phase.errors} failed requests (log {tmp}/{name}.log)")
                    if round_index:
                        per_request[name].append(1e3 * phase.cpu / max(phase.requests, 1))

        trio.run(run)
    finally:
        stop_servers(procs)
    print(f"\n## CPU per non-streaming request (ms, /proc), {args.rounds} interleaved rounds, {args.clients} clients\n")
    print("| process | rounds | median | / proxy |\n|---|---|---:|---:|")
    first, *others = trees
    proxy = statistics.median(per_request[first])
    for name, values in per_request.items():
        median = statistics.median(values)
        print(f"| {name} | {' '.join(f'{v:.3f}' for v in values)} | **{median:.3f}** | {median / proxy:.2f} |")
    for name in others:  # round by round: both met the same minutes of the machine
        ratios = [mine / theirs for mine, theirs in zip(per_request[name], per_request[first])]
        print(f"\n{name} / {first}, round by round: {' '.join(f'{r:.3f}' for r in ratios)}; "
              f"median **{statistics.median(ratios):.3f}**")


if __name__ == "__main__":
    main()
