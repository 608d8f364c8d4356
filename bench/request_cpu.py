"""Benchmark: the proxy's CPU per non-streaming request, this checkout against another (interleaved A/B).

Issue 21 item 2 asks for half the CPU per non-streaming request. CPU per request is read from ``/proc`` (utime +
stime of the proxy process over a phase, divided by the complete answers of that phase), so other work on a shared
machine moves it far less than wall time. Two proxies run side by side in front of ONE embedded engine
(``dressage-engine``, its own process, a script of fixed 8-token replies): ``A`` (by default the ``dressage-proxy``
of ``/work/main/.venv``, i.e. main) and ``B`` (this checkout's). The phases alternate A, B, B, A, A, B, ... so that
drift on the machine hits both alike; each phase is 16 clients (``bench/loadgen.py``) running 4-turn sessions with
the assistant turns echoed (so the trie walk and the TITO fragment encode do real work every turn, as in
``bench/overhead.py``, whose conversation this reuses).

    .venv/bin/python bench/request_cpu.py [--rounds 3] [--seconds 6] [--a /work/main/.venv/bin/dressage-proxy]
        [--b .venv/bin/dressage-proxy] [--profile SECONDS]

``--micro`` instead times, in one process, the pieces changed for item 2 against what they replaced: a Qwen3
fragment render through the shape cache against the template's render, and orjson against the stdlib for a
request body and a ``chat.completion`` body.

``--profile N`` records a py-spy profile (if ``py-spy`` is on PATH) of B for N seconds of load, written as a
speedscope file and a top-of-the-profile summary next to the logs (kept).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from loadgen import run_load  # noqa: E402
from overhead import Conversation, ProxySessions, Tally, load_tokenizer  # noqa: E402
from servers import cpu_seconds, free_port, start_server, stop_servers, wait_listening  # noqa: E402

PATH = "/v1/chat/completions"


async def phase(name: str, port: int, pid: int, conv: Conversation, clients: int, per_client: int,
                seconds: float) -> tuple[float, int, int]:
    """(proxy CPU seconds, complete answers, bad answers) of one loaded phase."""
    tally = Tally()
    sessions = [ProxySessions(conv, name, c, False, tally) for c in range(clients)]
    before = cpu_seconds(pid)
    await run_load("127.0.0.1", port, PATH, lambda w, n: sessions[w].body(), concurrency=clients,
                   requests_per_worker=per_client, deadline=seconds,
                   on_response=lambda w, status, payload: sessions[w].on_response(w, status, payload))
    cpu = cpu_seconds(pid) - before
    await trio.sleep(0.3)
    return cpu, tally.answered, tally.bad


def micro(repeat: int = 2000) -> None:
    """Same-process timings of the replaced pieces (µs per call, best of 5 runs of ``repeat``)."""
    import timeit

    from proxy.api.fields import parse_json_body
    from proxy.api.render import _stdlib_dumps, dumps
    from proxy.families import load_tito_tokenizer
    from proxy.tokenization.tito import ANCHOR, ANCHOR_QUERY
    from serving.tokenizer_files import model_tokenizer_path

    tito = load_tito_tokenizer("qwen3", model_tokenizer_path("qwen3"))
    synthetic = [{"role": "user", "content": ANCHOR_QUERY}, {"role": "assistant", "content": ANCHOR}]
    turn = iter(range(10**9))

    def new() -> list[dict]:
        return [{"role": "user", "content": f"Question 3.{next(turn)}: please check the results and report."}]

    body = json.dumps({"model": "m", "session_id": "s.1", "messages": [
        {"role": "system", "content": "You are careful."}, {"role": "user", "content": "Question 1: check it."},
        {"role": "assistant", "content": "Done.", "reasoning_content": "Check."},
        {"role": "user", "content": "Question 2: report it."}]}).encode()
    answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Done.", "reasoning_content": "Check."},
         "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 80, "completion_tokens": 8, "total_tokens": 88}}
    pairs = {
        "Qwen3 fragment render": (
            lambda: tito._render(synthetic + new(), None, {}, add_generation_prompt=True),
            lambda: tito._render_fragment(list(synthetic), new(), None, {})),
        # a str body takes the stdlib path, as every body did before
        "request body parse": (lambda: parse_json_body(body.decode()), lambda: parse_json_body(body)),
        "chat.completion dumps": (lambda: _stdlib_dumps(answer), lambda: dumps(answer)),
    }
    print("| piece | before µs | after µs | after/before |\n|---|---:|---:|---:|")
    for name, (before, after) in pairs.items():
        n = repeat // 10 if "render" in name else repeat
        b = min(timeit.repeat(before, number=n, repeat=5)) / n * 1e6
        a = min(timeit.repeat(after, number=n, repeat=5)) / n * 1e6
        print(f"| {name} | {b:.1f} | {a:.1f} | {a / b:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", default="/work/main/.venv/bin/dressage-proxy", help="proxy A (the reference)")
    parser.add_argument("--b", default=str(Path(sys.executable).parent / "dressage-proxy"), help="proxy B")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=8, help="tokens per answer (end of turn included)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0, help="bound of each phase")
    parser.add_argument("--per-client", type=int, default=400, help="bound of requests per client and phase")
    parser.add_argument("--profile", type=float, default=0.0, help="py-spy B for this many seconds of load")
    parser.add_argument("--proxy-flag", action="append", default=[], help="extra flag for both proxies")
    parser.add_argument("--micro", action="store_true", help="time the replaced pieces in-process instead")
    args = parser.parse_args()
    if args.micro:
        micro()
        return

    tokenizer = load_tokenizer()
    conv = Conversation.build(tokenizer, args.clients, args.turns, args.tokens, args.tokens)
    tmp = Path(tempfile.mkdtemp(prefix="dressage-request-cpu-"))
    # "*" entries, one per request the run can send (sessions that fail restart; the default policy is the fallback)
    phases = 2 * args.rounds + 2
    line = json.dumps({"session": "*", "output": conv.ns_reply}) + "\n"
    (tmp / "script.jsonl").write_text(line * (phases * args.clients * (args.per_client + 8) + 2000))
    procs: dict[str, subprocess.Popen] = {}
    ports: dict[str, int] = {}
    profile_out = None
    try:
        bin_dir = Path(sys.executable).parent
        ports["engine"] = free_port()
        procs["engine"] = start_server([str(bin_dir / "dressage-engine"), "--port", str(ports["engine"]), "--seed",
                                        "1", "--script", str(tmp / "script.jsonl")], tmp / "engine.log")
        wait_listening(ports["engine"], procs["engine"], 120)
        engine = f"http://127.0.0.1:{ports['engine']}"
        for name, binary in (("A", args.a), ("B", args.b)):
            ports[name] = free_port()
            procs[name] = start_server([binary, "--port", str(ports[name]), "--sglang-router-url", engine,
                                        "--sglang-worker-urls", engine, "--store",
                                        f"sqlite:///{tmp}/{name}.sqlite3", *args.proxy_flag], tmp / f"proxy-{name}.log")
        for name in ("A", "B"):
            wait_listening(ports[name], procs[name], 120)
        totals = {"A": [0.0, 0, 0], "B": [0.0, 0, 0]}
        rows = []

        async def run() -> None:
            for name in ("A", "B"):  # warm-up: tokenizer caches, first connections
                await phase(f"warm-{name}", ports[name], procs[name].pid, conv, args.clients, 8, 3.0)
            for r in range(args.rounds):
                order = ("A", "B") if r % 2 == 0 else ("B", "A")
                got = {}
                for name in order:
                    got[name] = await phase(f"r{r}-{name}", ports[name], procs[name].pid, conv, args.clients,
                                            args.per_client, args.seconds)
                    for i, v in enumerate(got[name]):
                        totals[name][i] += v
                per = {n: 1000 * got[n][0] / max(got[n][1], 1) for n in got}
                rows.append((r, per["A"], got["A"][1], per["B"], got["B"][1], per["B"] / per["A"]))

        trio.run(run)
        if args.profile > 0 and shutil.which("py-spy"):
            profile_out = tmp / "profile-B.txt"
            spy = subprocess.Popen(["py-spy", "record", "--pid", str(procs["B"].pid), "--duration",
                                    str(int(args.profile)), "--format", "raw", "--rate", "200", "--nonblocking",
                                    "-o", str(profile_out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            trio.run(phase, "prof-B", ports["B"], procs["B"].pid, conv, args.clients, 100000, args.profile + 1)
            spy.wait(timeout=60)
        print(f"| round | A ms/request | A answers | B ms/request | B answers | B/A |\n|---|---:|---:|---:|---:|---:|")
        for r, a, an, b, bn, ratio in rows:
            print(f"| {r} | {a:.3f} | {an} | {b:.3f} | {bn} | {ratio:.3f} |")
        a_ms = 1000 * totals["A"][0] / max(totals["A"][1], 1)
        b_ms = 1000 * totals["B"][0] / max(totals["B"][1], 1)
        print(f"| all | {a_ms:.3f} | {totals['A'][1]} | {b_ms:.3f} | {totals['B'][1]} | {b_ms / a_ms:.3f} |")
        print(f"bad answers: A {totals['A'][2]}, B {totals['B'][2]}")
        if profile_out is not None:
            print(f"profile of B (py-spy raw/collapsed): {profile_out}")
    finally:
        stop_servers(procs, tmp, keep_logs=True)


if __name__ == "__main__":
    main()
