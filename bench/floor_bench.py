"""``./dev bench``: the proxy's CPU against a floor and a reference gateway, in one interleaved run (issue 21 item 6).

- **the floor**: ``bench/fixed_upstream.py``, a fixed-answer SGLang upstream replaying bodies captured from the
  embedded engine at the start of the run (one process per stream mode: cumulative, incremental);
- **the proxy** (``dressage-proxy``, local parsers, in-memory store: TITO, the trie and recording on) in front of
  each floor, ``--upstream-stream-mode auto``;
- **the gateway**: ``bench/gateway.py``, FastAPI + httpx re-rendering the chat template each turn (the ``bench``
  extra), in front of each floor; LiteLLM side by side when it is installed (it is not a dependency);
- phases (target x shape) in ``--rounds`` interleaved rounds, shuffled: non-streaming 4-turn sessions with 8-token
  answers (``--clients`` clients), and 128- and 1,024-token streams in both modes. Each phase reads the target
  process's CPU (utime + stime, ``/proc``) before and after: CPU per request, and per streamed token;
- then the per-turn growth (sessions of 100 turns, ~290-token user turns, ~31.6k tokens at the end: turns 91-100
  against 1-10) and memory (RSS growth over 2,000 live 10-turn sessions, then over 2,000 more with the first still
  live, once the bounded caches the first filled are full; over 200 live sessions of ~20k tokens, half of them
  generated; the turns' text is real text, ``real_text.py``), measured on a proxy of its own with the default store
  (SQLite, in the run's temporary directory): ``--store memory`` would keep every step's journal record in the process too, which is the store's
  memory, not the sessions'. It returns freed memory to the OS every :data:`MEMORY_TRIM_SECONDS` (the proxy's
  ``--malloc-trim-interval``, 60 s by default), so both readings of a phase come after a trim (the first: the grid
  ran minutes before it; the last: two intervals after the last answer): with the default interval a trim of the
  start-up's freed memory inside a phase made its growth negative.

Every phase is bounded in count and in seconds; everything talks to 127.0.0.1. ``--smoke`` runs a tiny version
(seconds) for the test suite; ``--json FILE`` writes the figures.

    ./dev bench [--rounds 3] [--clients 16] [--skip-memory] [--profile] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import floor_report  # noqa: E402
import floor_sessions  # noqa: E402
from fixed_upstream import MODES, PROMPT, capture  # noqa: E402
from loadgen import run_load  # noqa: E402
from servers import cpu_seconds, free_port, start_server, stop_servers, wait_listening  # noqa: E402
from stream_modes import streamed_tokens  # noqa: E402

BENCH = Path(__file__).resolve().parent
HAVE_GATEWAY = all(importlib.util.find_spec(m) is not None for m in ("fastapi", "uvicorn", "httpx"))
HAVE_LITELLM = importlib.util.find_spec("litellm") is not None
#: seconds between the memory phases' proxy's trims of freed memory (see the module docstring)
MEMORY_TRIM_SECONDS = 1.0


@attrs.frozen
class Shape:
    key: str
    stream: bool
    tokens: int
    mode: str  # which floor (non-streaming answers are the same in both)


def shapes() -> list[Shape]:
    return [Shape("ns", False, 8, "cumulative")] + [
        Shape(f"s{tokens}-{mode}", True, tokens, mode) for mode in MODES for tokens in (128, 1024)]


def targets() -> list[str]:
    return ["floor", "proxy"] + (["gateway"] if HAVE_GATEWAY else [])


@attrs.frozen
class Phase:
    shape: str
    target: str
    requests: int
    tokens: int
    errors: int
    cpu: float  # the target process, seconds
    floor_cpu: float  # the floor behind it (the target itself for "floor")


# ---- processes ----------------------------------------------------------------------------------------------


def floor_command(answers: Path, mode: str) -> list[str]:
    """The floor (``bench/fixed_upstream.py``) replaying ``answers`` in stream ``mode``; add ``--port``."""
    return [sys.executable, str(BENCH / "fixed_upstream.py"), "--answers", str(answers), "--mode", mode]


def proxy_command(url: str, store: str = "memory") -> list[str]:
    """``dressage-proxy`` in front of the upstream at ``url`` as the bench runs it: local parsers, the stream mode
    read from the upstream, ``store``; add ``--port``."""
    return [str(Path(sys.executable).parent / "dressage-proxy"), "--sglang-router-url", url, "--sglang-worker-urls",
            url, "--tool-call-parse-backend", "local", "--reasoning-parse-backend", "local", "--store", store,
            "--upstream-stream-mode", "auto"]


def gateway_command(url: str) -> list[str]:
    """The reference gateway (``bench/gateway.py``) in front of ``url``; add ``--port``."""
    return [sys.executable, str(BENCH / "gateway.py"), "--upstream", url]


def start_all(procs: dict[str, subprocess.Popen], tmp: Path, answers: Path, profile: bool, memory: bool
              ) -> dict[str, int]:
    ports: dict[str, int] = {}
    for mode in MODES:
        ports[f"floor-{mode}"] = port = free_port()
        procs[f"floor-{mode}"] = start_server([*floor_command(answers, mode), "--port", str(port)],
                                              tmp / f"floor-{mode}.log")
    for mode in MODES:
        wait_listening(ports[f"floor-{mode}"], procs[f"floor-{mode}"], 60)
    for mode in MODES:
        url = f"http://127.0.0.1:{ports[f'floor-{mode}']}"
        ports[f"proxy-{mode}"] = port = free_port()
        proxy = proxy_command(url)
        procs[f"proxy-{mode}"] = start_server([*proxy, "--port", str(port)], tmp / f"proxy-{mode}.log")
        if profile and mode == "cumulative":  # a third proxy, under py-spy (it cannot attach here: it spawns)
            ports["proxyprofile-cumulative"] = port = free_port()
            procs["proxyprofile-cumulative"] = start_server(
                [floor_report.py_spy(), "record", "--format", "raw", "--nonblocking", "--rate", "200", "--output",
                 str(tmp / "profile.txt"), "--", *proxy, "--port", str(port)], tmp / "proxyprofile.log")
        if memory and mode == "incremental":  # the memory phases' proxy, on the store users run (run_sessions)
            ports["proxymem-incremental"] = port = free_port()
            procs["proxymem-incremental"] = start_server(
                [*proxy_command(url, f"sqlite:///{tmp / 'memory-phases.db'}"), "--malloc-trim-interval",
                 str(MEMORY_TRIM_SECONDS), "--port", str(port)], tmp / "proxymem.log")
        if HAVE_GATEWAY:
            ports[f"gateway-{mode}"] = port = free_port()
            procs[f"gateway-{mode}"] = start_server([*gateway_command(url), "--port", str(port)],
                                                    tmp / f"gateway-{mode}.log")
    for name, proc in procs.items():
        wait_listening(ports[name], proc, 180)
    return ports


# ---- the interleaved grid ---------------------------------------------------------------------------------


def _floor_body(shape: Shape) -> dict[str, Any]:
    return {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": shape.tokens}, "stream": shape.stream,
            "return_logprob": True}


async def run_phase(shape: Shape, target: str, ports: dict[str, int], pids: dict[str, int], *, clients: int,
                    ns_requests: int, streams: int, seconds: float) -> Phase:
    name = f"{target}-{shape.mode}"
    floor = f"floor-{shape.mode}"
    counter = iter(range(10**9))
    sessions: dict[int, floor_sessions.ChatSession] = {}
    turns = 4

    def chat_body(worker: int, _n: int) -> dict[str, Any]:
        if shape.stream:  # one stream per session: the answer is not echoed back
            n = next(counter)
            return {"model": "bench", "session_id": f"{shape.key}.{target}.{n}", "stream": True,
                    "max_tokens": shape.tokens, "stream_options": {"include_usage": True},
                    "messages": [{"role": "user", "content": floor_sessions.user_text(n, 0, 20)}]}
        chat = sessions.get(worker)
        if chat is None or len(chat.messages) >= 2 * turns:
            n = next(counter)
            chat = sessions[worker] = floor_sessions.ChatSession(f"ns.{target}.{n}", n, 20)
        return chat.body()

    def on_response(worker: int, status: int, payload: bytes) -> None:
        if not shape.stream:
            sessions[worker].answered(status, payload)

    def count(payload: bytes) -> int:
        if target == "floor":
            return shape.tokens
        return streamed_tokens(payload) if shape.stream else 1

    per_worker = max(1, (streams if shape.stream else ns_requests) // clients)
    watched = name if target != "floor" else floor
    before, floor_before = cpu_seconds(pids[watched]), cpu_seconds(pids[floor])
    result = await run_load(
        "127.0.0.1", ports[watched], "/generate" if target == "floor" else "/v1/chat/completions",
        (lambda w, n: _floor_body(shape)) if target == "floor" else chat_body,
        concurrency=clients, requests_per_worker=per_worker, deadline=seconds, count=count,
        on_response=None if target == "floor" else on_response)
    cpu, floor_cpu = cpu_seconds(pids[watched]) - before, cpu_seconds(pids[floor]) - floor_before
    bad = result.errors + sum(c.failures for c in sessions.values())
    return Phase(shape.key, target, result.requests, result.units if shape.stream else result.requests, bad, cpu,
                 floor_cpu)


async def run_grid(args: argparse.Namespace, ports: dict[str, int], pids: dict[str, int]) -> list[Phase]:
    phases: list[Phase] = []
    kwargs = dict(clients=args.clients, ns_requests=args.ns_requests, streams=args.streams, seconds=args.seconds)
    for shape in shapes():  # warm-up: tokenizer caches, first connections, first-use imports
        for target in targets():
            await run_phase(shape, target, ports, pids, **{**kwargs, "ns_requests": args.clients,
                                                          "streams": args.clients})
    for round_index in range(args.rounds):
        order = [(shape, target) for shape in shapes() for target in targets()]
        random.Random(round_index).shuffle(order)
        for shape, target in order:
            phase = await run_phase(shape, target, ports, pids, **kwargs)
            phases.append(phase)
            unit = phase.cpu / max(phase.tokens, 1)
            print(f"  round {round_index + 1} {shape.key:17} {target:8} {phase.requests:5} requests "
                  f"{phase.errors} errors  {1e6 * unit:8.1f} us/{'token' if shape.stream else 'request'}",
                  file=sys.stderr, flush=True)
    return phases


# ---- the session phases ------------------------------------------------------------------------------------


async def run_sessions(args: argparse.Namespace, ports: dict[str, int], pids: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {"growth": {}, "memory": {}}
    for target in [t for t in targets() if t != "floor" and args.growth_turns > 0]:
        name = f"{target}-cumulative"
        per_turn, chats, fresh = await floor_sessions.growth(
            ports[name], pids[name], name=target, sessions=args.growth_sessions, turns=args.growth_turns,
            user_tokens=args.growth_user_tokens, window=args.growth_window)
        out["growth"][target] = {"per_turn_cpu": per_turn, "sessions": len(chats),
                                 "final_prompt_tokens": statistics.mean(c.prompt_tokens for c in chats),
                                 "failures": sum(c.failures for c in chats + fresh),
                                 "last_failure": next((c.last_failure for c in chats + fresh if c.last_failure), "")}
        print(f"  growth {target}: done", file=sys.stderr, flush=True)
    if args.skip_memory:
        return out
    for target in args.memory_targets:
        if target not in targets():
            continue
        # A process the growth phase did not fill; the proxy's with the default (SQLite) store: ``--store memory``
        # keeps every step's journal record in the process too, which is the store's memory, not the sessions'.
        name = "proxymem-incremental" if target == "proxy" else f"{target}-incremental"
        session_growth, session_tokens, session_failures = await floor_sessions.memory(
            ports[name], pids[name], name=f"{target}.mem", sessions=args.memory_sessions, turns=10,
            user_words=20, concurrency=args.clients, settle=2 * MEMORY_TRIM_SECONDS)
        # As many again, the first still live: what a further session costs once the bounded caches that the first
        # batch filled (SQLite's page cache, the tokenizer's word cache, the shared tables) are full.
        next_growth, _, next_failures = await floor_sessions.memory(
            ports[name], pids[name], name=f"{target}.mem2", sessions=args.memory_sessions, turns=10,
            user_words=20, concurrency=args.clients, settle=2 * MEMORY_TRIM_SECONDS)
        session_failures += next_failures
        token_growth, tokens, token_failures = await floor_sessions.memory(
            ports[name], pids[name], name=f"{target}.tok", sessions=args.token_sessions, turns=10,
            user_words=args.token_user_words, concurrency=args.clients, extra={"max_tokens": 1024},
            settle=2 * MEMORY_TRIM_SECONDS)
        out["memory"][target] = {
            "sessions": args.memory_sessions, "session_rss_growth": session_growth, "session_tokens": session_tokens,
            "next_session_rss_growth": next_growth,
            "token_sessions": args.token_sessions, "token_rss_growth": token_growth, "tokens": tokens,
            "failures": session_failures + token_failures}
        print(f"  memory {target}: done", file=sys.stderr, flush=True)
    return out


# ---- main ---------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--ns-requests", type=int, default=640, help="non-streaming requests per phase")
    parser.add_argument("--streams", type=int, default=32, help="streams per phase")
    parser.add_argument("--seconds", type=float, default=60.0, help="bound of each phase")
    parser.add_argument("--growth-sessions", type=int, default=4)
    parser.add_argument("--growth-turns", type=int, default=100, help="0: no growth phase")
    parser.add_argument("--growth-window", type=int, default=10, help="turns compared at each end")
    # ~31.6k tokens at turn 100: at 300 the longest of 16 sessions passed the floor's 32,768-token window and its
    # last turns were refused (context_overflow), as they should be
    parser.add_argument("--growth-user-tokens", type=int, default=290)
    parser.add_argument("--memory-targets", type=lambda s: s.split(","), default=["proxy"])
    parser.add_argument("--memory-sessions", type=int, default=2000)
    parser.add_argument("--token-sessions", type=int, default=200)
    parser.add_argument("--token-user-words", type=int, default=1000)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--profile", type=float, default=0.0, metavar="SECONDS",
                        help="py-spy the proxy over a non-streaming phase of this many seconds (needs py-spy)")
    parser.add_argument("--smoke", action="store_true", help="a tiny run (seconds), for the test suite")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.clients, args.ns_requests, args.streams, args.seconds = 1, 2, 4, 2, 30.0
        args.growth_sessions, args.growth_turns, args.growth_window, args.growth_user_tokens = 1, 4, 2, 30
        args.memory_sessions, args.token_sessions, args.token_user_words = 4, 2, 50
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    procs: dict[str, subprocess.Popen] = {}
    tmp = Path(tempfile.mkdtemp(prefix="dressage-floor-"))
    try:
        answers = tmp / "answers.json"
        started = time.monotonic()

        def stage(what: str) -> None:
            print(f"[{time.monotonic() - started:6.1f} s] {what}", file=sys.stderr, flush=True)

        capture(answers)
        stage("floor bodies captured from the embedded engine")
        profiling = bool(args.profile) and floor_report.py_spy() is not None
        ports = start_all(procs, tmp, answers, profiling, not args.skip_memory)
        pids = {name: proc.pid for name, proc in procs.items()}
        stage(f"servers listening: {', '.join(procs)}")

        async def run_all() -> tuple[list[Phase], dict[str, Any], Any]:
            phases = await run_grid(args, ports, pids)
            stage("interleaved grid done")
            sessions = await run_sessions(args, ports, pids)
            stage("session phases done")
            profile = None
            if profiling:
                profile = await floor_report.profile(args, ports, pids, run_phase, shapes()[0], tmp,
                                                     procs["proxyprofile-cumulative"])
            elif args.profile:
                print("**py-spy: not installed, no profile** (pip install -e '.[bench]')", file=sys.stderr)
            return phases, sessions, profile

        phases, sessions, profile = trio.run(run_all)
        for name, proc in procs.items():
            if proc.poll() is not None and name != "proxyprofile-cumulative":  # that one was stopped on purpose
                raise SystemExit(f"{name} exited with {proc.returncode} during the run (log {tmp}/{name}.log)")
    finally:
        spy = procs.get("proxyprofile-cumulative")
        if spy is not None and spy.poll() is None:  # py-spy ignores SIGTERM; SIGINT stops it and its proxy
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        stop_servers(procs, tmp, keep_logs=args.keep_logs)
    figures = floor_report.report(args, phases, sessions, profile, have_gateway=HAVE_GATEWAY,
                                  have_litellm=HAVE_LITELLM)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
