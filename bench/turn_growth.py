"""Benchmark: the proxy's per-turn CPU as a session grows, and what live sessions hold (issue 21 items 4 and 5).

Servers in their own processes: the embedded engine (``dressage-engine``, a script of fixed answers ending with
the end-of-turn token, so every turn extends the chain by TITO) and one ``dressage-proxy`` in front of it (local
parsers, ``--store`` as given, default sqlite in a temporary folder). A fresh pair per phase, so each memory phase
starts from the same process state. Phases:

- ``growth``: ``--growth-sessions`` sessions grow to ``--turns`` turns (user turns of about ``--user-tokens``
  tokens, answers of about 16): every turn sends the whole conversation, with each answer echoed exactly as the
  proxy returned it. One request at a time (``--lockstep``: each turn of all sessions at once), each timed by the
  scheduler's exact count of the proxy's CPU (``servers.cpu_since``): the figure is CPU per request over
  turns 1-10 against 91-100 (target: at most 1.5x; the history reaches ~30k tokens at 300-token user turns);
- ``sessions``: ``--sessions`` live 10-turn sessions of short turns (~40 tokens a turn, about 400 a session):
  the proxy's RSS growth (``VmRSS``) over the second half of the sessions divided by them is the fixed cost per
  live session (target 12 KiB; the first half absorbs what the allocator keeps from transient peaks);
- ``repeat``: where the growth goes, per thread: a session of 5 turns and one of ``--turns - 5`` each repeat their
  last request ``--repeats`` times, one at a time (each a best-of-N sibling); every thread's CPU per request;
- ``paired``: the ``repeat`` requests of every ``--trees`` tree at once, alternating request by request (each
  tree its own engine and proxy): a before/after comparison in the same minutes;
- ``encode``: in-process, the ways to write 30k ``input_ids`` into a ``/generate`` body (issue 21 item 4);
- ``tokens``: ``--token-sessions`` live sessions of ``--token-turns`` turns of ~1,000-token user turns and
  ~1,000-token answers (half the stored tokens generated, with logprobs): RSS growth over the second half per
  stored token in it (target 12
  bytes; the floor is 4 bytes of id per token and 4 of float32 logprob per generated token, 6 on average here).

Nothing is finalized during a phase (every session stays live). The RSS figures include allocator slack, as a
deployment sees it.

    .venv/bin/python bench/turn_growth.py [--phases growth,sessions,tokens] [--sessions 2000] [--token-sessions 200]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
import floor_sessions  # noqa: E402
from loadgen import Connection  # noqa: E402
from real_text import real_text  # noqa: E402
from servers import (  # noqa: E402
    cpu_since, free_port, source_trees, start_server, stop_servers, thread_cpu_seconds, wait_listening,
)

def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def start_pair(procs: dict, tmp: Path, answers: list[str], store: str, tree: str | None) -> int:
    """The engine (answering ``answers`` in order, then its default policy) and a proxy (its code from ``tree``,
    a source checkout put first on PYTHONPATH, when given); the proxy's port."""
    bin_dir = Path(sys.executable).parent
    script = tmp / "script.jsonl"
    script.write_text("".join(json.dumps({"session": "*", "output": text}) + "\n" for text in answers))
    engine_port, proxy_port = free_port(), free_port()
    procs["engine"] = start_server([str(bin_dir / "dressage-engine"), "--port", str(engine_port), "--script",
                                    str(script)], tmp / "engine.log")
    wait_listening(engine_port, procs["engine"], 120)
    url = f"http://127.0.0.1:{engine_port}"
    store_url = f"sqlite:///{tmp / 'store.db'}" if store == "sqlite" else store
    procs["proxy"] = start_server(
        [str(bin_dir / "dressage-proxy"), "--port", str(proxy_port), "--sglang-router-url", url,
         "--sglang-worker-urls", url, "--tool-call-parse-backend", "local", "--reasoning-parse-backend", "local",
         "--store", store_url], tmp / "proxy.log", source_tree=tree)
    wait_listening(proxy_port, procs["proxy"], 120)
    return proxy_port


class Conversation:
    """One session: sends the whole history each turn and echoes every answer as returned."""

    def __init__(self, port: int, session_id: str, user_tokens: int) -> None:
        self.connection = Connection("127.0.0.1", port)
        self.session_id = session_id
        self.user_tokens = user_tokens
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful assistant."}]
        self.prompt_tokens = 0
        self.completion_tokens = 0

    async def turn(self, index: int, max_tokens: int = 64) -> None:
        salt = hash(self.session_id) % 1000 + index
        self.messages.append({"role": "user", "content": f"Turn {index}: " + real_text(self.user_tokens, salt)})
        body = {"model": "m", "messages": self.messages, "max_tokens": max_tokens,
                "chat_template_kwargs": {"enable_thinking": False}}
        status, payload = await self.connection.request(
            "POST", "/v1/chat/completions", json.dumps(body).encode(), extra_headers=[("x-session-id",
                                                                                     self.session_id)])
        if status != 200:
            raise SystemExit(f"{self.session_id} turn {index}: HTTP {status} {payload[:300]!r}")
        answer = json.loads(payload)
        message = answer["choices"][0]["message"]
        self.messages.append({key: value for key, value in message.items() if value is not None})
        self.prompt_tokens = answer["usage"]["prompt_tokens"]
        self.completion_tokens = answer["usage"]["completion_tokens"]

    async def next_turn(self) -> None:
        """The turn after the last one sent."""
        await self.turn(len(self.messages) // 2 + 1)

    @property
    def stored_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


async def growth(port: int, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    """``--growth-sessions`` sessions advance turn by turn to ``--turns``. By default one request at a time, each
    timed alone by the scheduler's exact count (``servers.cpu_since``), turns 1-10 from as many fresh
    sessions alternating with the last ten (``floor_sessions.timed_growth``: both ends in the same minutes): the
    issue's figure is one session's CPU per request, and with sessions in flight together the engine's growing work
    shares the two cores (and the caches) with the proxy, which the proxy's CPU then shows. ``--lockstep`` sends
    each turn of all sessions at once, in order (the figure this bench gave first) for comparison."""
    sessions = [Conversation(port, f"grow-{k}", args.user_tokens) for k in range(args.growth_sessions)]
    profiler: subprocess.Popen | None = None

    def on_turn(turn: int) -> None:
        nonlocal profiler
        if profiler is not None and turn == args.profile_to:
            _stop_profile(profiler)
            profiler = None
        if args.profile and turn == args.profile_from:
            # The profiler samples the proxy from this turn to the end: where the per-turn growth goes.
            profiler = _start_profile(pid, args.profile, args.profile_rate)

    window = min(10, args.turns // 2)
    if args.lockstep:
        per_turn: list[float] = []
        for turn in range(1, args.turns + 1):
            on_turn(turn)
            before = thread_cpu_seconds(pid)
            async with trio.open_nursery() as nursery:
                for conversation in sessions:
                    nursery.start_soon(conversation.turn, turn)
            per_turn.append(cpu_since(pid, before) / len(sessions))
    else:
        fresh = [Conversation(port, f"fresh-{k}", args.user_tokens) for k in range(args.growth_sessions)]
        per_turn = [spent / len(sessions) for spent in await floor_sessions.timed_growth(
            pid, [c.next_turn for c in sessions], [c.next_turn for c in fresh], turns=args.turns, window=window,
            on_turn=on_turn)]
    if profiler is not None:
        _stop_profile(profiler)
    tokens = statistics.mean(c.stored_tokens for c in sessions)
    first, last = statistics.mean(per_turn[:window]), statistics.mean(per_turn[-window:])
    return {"first_ms": 1e3 * first, "last_ms": 1e3 * last, "ratio": last / first, "tokens": tokens,
            "by_decade": [1e3 * statistics.mean(per_turn[k:k + 10]) for k in range(0, len(per_turn), 10)],
            "per_turn_ms": [1e3 * value for value in per_turn]}


async def repeated_request(port: int, session_id: str, turns: int, user_tokens: int) -> tuple[Conversation, bytes]:
    """A session grown to ``turns`` turns, and the body of its next request (a new user turn), which the caller
    sends again and again: each a best-of-N sibling of the last."""
    conversation = Conversation(port, session_id, user_tokens)
    for turn in range(1, turns + 1):
        await conversation.turn(turn)
    conversation.messages.append({"role": "user", "content": "Once more: " + real_text(user_tokens, 77)})
    body = json.dumps({"model": "m", "messages": conversation.messages, "max_tokens": 64,
                       "chat_template_kwargs": {"enable_thinking": False}}).encode()
    return conversation, body


async def repeat(port: int, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    """Where the growth goes, per thread: a session of 5 turns and one of ``--turns - 5``, each then repeating its
    last request (a new user turn: a best-of-N sibling each time) ``--repeats`` times, one request at a time; the
    CPU of each of the proxy's threads per request, for each length."""
    out: dict[str, Any] = {}
    for turns in (5, args.turns - 5):
        conversation, body = await repeated_request(port, f"repeat-{turns}", turns, args.user_tokens)
        headers = [("x-session-id", conversation.session_id)]
        for _ in range(10):  # warm: the sibling structure and caches exist before the count
            await conversation.connection.request("POST", "/v1/chat/completions", body, extra_headers=headers)
        profiler = None
        if args.profile:  # over the timed requests only: where each length's CPU goes
            profiler = _start_profile(pid, f"{args.profile}.{turns}", args.profile_rate)
            await trio.sleep(1.0)
        before = thread_cpu_seconds(pid)
        for _ in range(args.repeats):
            status, payload = await conversation.connection.request("POST", "/v1/chat/completions", body,
                                                                    extra_headers=headers)
            if status != 200:
                raise SystemExit(f"repeat: HTTP {status} {payload[:300]!r}")
        after = thread_cpu_seconds(pid)
        if profiler is not None:
            _stop_profile(profiler)
        threads = {name: 1e3 * (after[name] - before.get(name, 0.0)) / args.repeats for name in after}
        out[turns] = {"body_bytes": len(body), "threads_ms": {k: v for k, v in threads.items() if v > 0.0005}}
    return out


async def paired(targets: list[tuple[str, int, int]], args: argparse.Namespace) -> dict[str, dict[int, float]]:
    """The ``repeat`` requests of every tree at once, request by request: ``targets`` are (label, proxy port, proxy
    pid); each round sends one request of each length to each proxy (the trees' order alternating), each timed alone
    by ``servers.cpu_since``. Trees compared this way meet the same minutes of the machine, which the phases run in
    turn do not (their figures moved by +-15 % between runs of the same code)."""
    lengths = (5, args.turns - 5)
    requests: dict[tuple[str, int], tuple[Conversation, bytes]] = {}
    for label, port, _ in targets:
        for turns in lengths:
            requests[label, turns] = await repeated_request(port, f"paired-{turns}", turns, args.user_tokens)
    spent: dict[tuple[str, int], float] = dict.fromkeys(requests, 0.0)
    for round_index in range(args.repeats + 10):  # the first 10 rounds warm up, uncounted
        order = targets if round_index % 2 == 0 else targets[::-1]
        for label, _, pid in order:
            for turns in lengths:
                conversation, body = requests[label, turns]
                before = thread_cpu_seconds(pid)
                status, payload = await conversation.connection.request(
                    "POST", "/v1/chat/completions", body, extra_headers=[("x-session-id", conversation.session_id)])
                if status != 200:
                    raise SystemExit(f"paired: HTTP {status} {payload[:300]!r}")
                await trio.sleep(floor_sessions.SETTLE_SECONDS)
                if round_index >= 10:
                    spent[label, turns] += cpu_since(pid, before)
    return {label: {turns: 1e3 * spent[label, turns] / args.repeats for turns in lengths} for label, _, _ in targets}


def run_paired(args: argparse.Namespace, trees: list[tuple[str, str | None]]) -> None:
    procs_by_tree: dict[str, dict] = {}
    tmp = Path(tempfile.mkdtemp(prefix="turn-growth-paired-"))
    answers = [real_text(12, k) + "." for k in range(2 * (args.turns + args.repeats + 16))]
    try:
        targets = []
        for label, tree in trees:
            procs_by_tree[label] = {}
            (tmp / label).mkdir()
            port = start_pair(procs_by_tree[label], tmp / label, answers, args.store, tree)
            targets.append((label, port, procs_by_tree[label]["proxy"].pid))
        result = trio.run(paired, targets, args)
    finally:
        for label, procs in procs_by_tree.items():
            stop_servers(procs, tmp / label, keep_logs=args.keep_logs)
    for label, figures in result.items():
        (short, first), (long, last) = sorted(figures.items())
        print(f"[{label}] paired: {first:.3f} ms a request at {short} turns, {last:.3f} ms at {long}: "
              f"x{last / first:.3f}", flush=True)
    base = trees[0][0]
    for label, figures in result.items():
        if label != base:
            print(f"[{label}] / [{base}]: " + ", ".join(f"{turns} turns {ms / result[base][turns]:.3f}"
                                                      for turns, ms in sorted(figures.items())), flush=True)


def _start_profile(pid: int, path: str, rate: int) -> subprocess.Popen:
    """py-spy (raw stacks) recording process ``pid`` into ``path``; ``perf record -g`` when ``path`` ends in
    ``.perf`` (C-level: the interpreter loop, orjson, the kernel)."""
    if path.endswith(".perf"):
        command = ["perf", "record", "-F", str(rate), "-g", "-p", str(pid), "-o", path]
    else:
        command = [str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(pid), "-o", path, "--format",
                   "raw", "--rate", str(rate)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop_profile(profiler: subprocess.Popen) -> None:
    profiler.send_signal(signal.SIGINT)
    profiler.wait(timeout=60)


async def live_sessions(port: int, pid: int, count: int, turns: int, user_tokens: int, concurrency: int,
                        max_tokens: int) -> dict[str, Any]:
    """``count`` sessions of ``turns`` turns, ``concurrency`` at a time; RSS growth per session and per token."""
    # Warm-up: first-use allocations (tokenizer caches, pools, connections) must not count against the sessions.
    warm = [Conversation(port, f"warm-{k}", user_tokens) for k in range(concurrency)]
    for turn in range(1, turns + 1):
        async with trio.open_nursery() as nursery:
            for conversation in warm:
                nursery.start_soon(conversation.turn, turn, max_tokens)
    # Two halves: the second half's RSS growth is the figure. The first absorbs what any run allocates once and
    # frees (request bodies, reply buffers, a tokenizer's caches: the allocator keeps those pages, and the sessions
    # stored after them reuse them without growing the RSS), so the second grows by what live sessions hold.
    half = count // 2
    results = []
    for first, last in ((0, half), (half, count)):
        before = rss_bytes(pid)
        stored: list[int] = []
        next_id = iter(range(first, last))

        async def worker() -> None:
            for index in next_id:
                conversation = Conversation(port, f"live-{index}", user_tokens)
                for turn in range(1, turns + 1):
                    await conversation.turn(turn, max_tokens)
                stored.append(conversation.stored_tokens)
                await conversation.connection.aclose()

        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(worker)
        results.append((rss_bytes(pid) - before, sum(stored)))
    grown, tokens = results[1]
    sessions = count - half
    return {"sessions": sessions, "rss_growth": grown, "per_session": grown / sessions, "tokens": tokens,
            "per_token": grown / tokens, "first_half": results[0][0]}


def encode_options(ids_count: int = 30_000, repeat: int = 200) -> dict[str, float]:
    """The ways to write a /generate body's input_ids, in-process, µs per body of ``ids_count`` ids (best of 5)."""
    import timeit
    from array import array

    import numpy
    import orjson

    from proxy.upstream.wire_json import dumps_body

    ids = array("i", [(k * 7919) % 151_000 for k in range(ids_count)])
    rest = {"sampling_params": {"max_new_tokens": 64}, "rid": "r" * 32, "stream": False, "return_logprob": True}
    cached = orjson.dumps(ids.tolist())[:-1]  # a JSON prefix kept per checkpoint, extended by a 300-id fragment
    fragment = array("i", range(300))
    options = {
        "json.dumps of a list (before)": lambda: json.dumps({"input_ids": ids.tolist(), **rest}, ensure_ascii=False,
                                                            separators=(",", ":"), allow_nan=False).encode(),
        "orjson.dumps(ids.tolist())": lambda: orjson.dumps({"input_ids": ids.tolist(), **rest}),
        "orjson of a numpy view (dumps_body)": lambda: dumps_body({"input_ids": ids, **rest}),
        "numpy view alone": lambda: orjson.dumps(numpy.frombuffer(ids, dtype=numpy.int32),
                                                 option=orjson.OPT_SERIALIZE_NUMPY),
        "cached prefix + fragment": lambda: b"".join((b'{"input_ids":', cached, b",",
                                                      orjson.dumps(fragment.tolist())[1:], b"}")),
    }
    return {name: 1e6 * min(timeit.repeat(call, number=repeat, repeat=5)) / repeat for name, call in options.items()}


def run_phase(name: str, args: argparse.Namespace, tree: str | None) -> dict[str, Any]:
    if name == "encode":
        return encode_options()
    procs: dict = {}
    tmp = Path(tempfile.mkdtemp(prefix=f"turn-growth-{name}-"))
    try:
        if name == "growth":
            answers = [real_text(12, k) + "." for k in range(args.growth_sessions * args.turns + 64)]
        elif name == "repeat":
            answers = [real_text(12, k) + "." for k in range(2 * (args.turns + args.repeats + 16))]
        elif name == "sessions":
            answers = [real_text(14, k) + "." for k in range((args.sessions + 16) * 10)]
        else:
            answers = [real_text(args.answer_tokens, k) + "."
                       for k in range((args.token_sessions + 16) * args.token_turns)]
        port = start_pair(procs, tmp, answers, args.store, tree)
        pid = procs["proxy"].pid
        if name == "growth":
            return trio.run(growth, port, pid, args)
        if name == "repeat":
            return trio.run(repeat, port, pid, args)
        if name == "sessions":
            return trio.run(live_sessions, port, pid, args.sessions, 10, 24, args.concurrency, 64)
        return trio.run(live_sessions, port, pid, args.token_sessions, args.token_turns, args.answer_tokens,
                        args.concurrency, args.answer_tokens + 64)
    finally:
        stop_servers(procs, tmp, keep_logs=args.keep_logs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phases", default="growth,sessions,tokens")
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--user-tokens", type=int, default=300, help="tokens per user turn (about)")
    parser.add_argument("--growth-sessions", type=int, default=8)
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--token-sessions", type=int, default=200)
    parser.add_argument("--token-turns", type=int, default=10)
    parser.add_argument("--answer-tokens", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--store", default="sqlite", help="sqlite (a temporary file), memory, or a store URL")
    parser.add_argument("--trees", default="",
                        help="label=path,... source checkouts to compare in one run (each phase runs once per tree, "
                             "in turn); default: this checkout")
    parser.add_argument("--profile", default="",
                        help="growth and repeat: write a py-spy raw profile of the proxy here (repeat: one per "
                             "length, FILE.5 and FILE.95; a name ending in .perf records with perf instead)")
    parser.add_argument("--profile-from", type=int, default=60, help="growth: the turn the profile starts at")
    parser.add_argument("--profile-to", type=int, default=0, help="growth: the turn the profile stops at (0: the end)")
    parser.add_argument("--lockstep", action="store_true",
                        help="growth: each turn of all sessions at once (the default: one request at a time)")
    parser.add_argument("--profile-rate", type=int, default=200, help="py-spy (or perf) samples per second")
    parser.add_argument("--repeats", type=int, default=300, help="repeat: requests timed at each length")
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args()
    trees = source_trees(args.trees)
    phases = args.phases.split(",")
    if {"paired", "repeat"} & set(phases) and args.turns < 11:
        # both compare a session of 5 turns with one of --turns - 5: the two lengths must differ
        parser.error(f"--turns {args.turns}: the paired and repeat phases need at least 11 (5 against turns - 5)")
    for name in phases:
        if name == "paired":
            run_paired(args, trees)
            continue
        for label, tree in trees if name != "encode" else [("this", None)]:
            report(name, label, run_phase(name, args, tree), args)


def report(name: str, label: str, result: dict[str, Any], args: argparse.Namespace) -> None:
    if name == "encode":
        for option, micros in result.items():
            print(f"encode 30k input_ids: {option:38} {micros:8.1f} us", flush=True)
    elif name == "growth":
        print(f"[{label}] growth: {args.growth_sessions} sessions x {args.turns} turns (~{result['tokens']:.0f} "
              f"tokens at the end): CPU per request turns 1-10 {result['first_ms']:.2f} ms, last 10 "
              f"{result['last_ms']:.2f} ms: x{result['ratio']:.2f}", flush=True)
        print("  by decade (ms): " + " ".join(f"{value:.2f}" for value in result["by_decade"]), flush=True)
        if os.environ.get("GROWTH_PER_TURN"):
            print("  per turn (ms): " + " ".join(f"{value:.1f}" for value in result["per_turn_ms"]), flush=True)
    elif name == "repeat":
        for turns, figures in result.items():
            threads = ", ".join(f"{thread} {ms:.2f}" for thread, ms in sorted(figures["threads_ms"].items()))
            total = sum(figures["threads_ms"].values())
            print(f"[{label}] repeat at {turns} turns ({figures['body_bytes'] // 1024} KiB body): {total:.2f} ms a "
                  f"request ({threads})", flush=True)
    elif name == "sessions":
        print(f"[{label}] sessions: {result['sessions']} more live 10-turn sessions "
              f"({result['tokens'] / result['sessions']:.0f} tokens each): RSS +{result['rss_growth'] / 2**20:.1f} "
              f"MiB, {result['per_session'] / 1024:.1f} KiB per session", flush=True)
    else:
        print(f"[{label}] tokens: {result['sessions']} more live sessions, {result['tokens']} stored tokens: RSS "
              f"+{result['rss_growth'] / 2**20:.1f} MiB, {result['per_token']:.1f} bytes per token", flush=True)


if __name__ == "__main__":
    main()
