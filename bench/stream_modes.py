"""Benchmark: the proxy's CPU per streamed token with a cumulative and an incremental upstream, 128- vs 1,024-token
answers (issue 21 item 1: in incremental mode the 1,024-token rate must be within 1.25x of the 128-token one).

- two embedded engines in their own processes, one streaming SGLang's default cumulative chunks, one with
  ``--incremental-streaming-output``; each answers every request with filler text up to ``max_tokens`` (a script
  of ``"*"`` entries with ``eos: false``: every answer is exactly N tokens, finish ``length``), paced at
  ``--token-rate`` tokens/s per stream so that both modes see about one chunk per token;
- one ``dressage-proxy`` per engine (``--upstream-stream-mode auto``: each detects its engine's mode), local parsers,
  in-memory store;
- phases (mode x answer length) run in interleaved rounds in a shuffled order; each phase streams chat completions
  with ``--concurrency`` clients (``bench/loadgen.py``) and reads the proxy process's CPU from /proc before and
  after: CPU per streamed token = proxy CPU / completion tokens (from the streams' usage);
- ratios are taken within the run (1,024 vs 128 per mode; incremental vs cumulative), since the machine is shared.

    .venv/bin/python bench/stream_modes.py [--rounds 3] [--concurrency 2] [--token-rate 500]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import run_load  # noqa: E402
from servers import cpu_seconds, free_port, start_server, stop_servers, wait_listening  # noqa: E402

MODES = ("cumulative", "incremental")


def streamed_tokens(payload: bytes) -> int:
    """``usage.completion_tokens`` of a streamed chat completion (0 when the stream did not finish)."""
    for event in reversed(payload.split(b"\n\n")):
        if event.startswith(b"data: {") and b'"usage"' in event:
            usage = json.loads(event[6:]).get("usage")
            if usage:
                return int(usage["completion_tokens"])
    return 0


def start_all(procs: dict, tmp: Path, token_rate: float) -> dict[str, int]:
    bin_dir = Path(sys.executable).parent
    script = tmp / "script.jsonl"
    script.write_text("".join(json.dumps({"session": "*", "output": "Filler", "eos": False}) + "\n"
                              for _ in range(20000)))
    ports: dict[str, int] = {}
    for mode in MODES:
        ports[f"engine-{mode}"] = port = free_port()
        flags = ["--incremental-streaming-output"] if mode == "incremental" else []
        procs[f"engine-{mode}"] = start_server(
            [str(bin_dir / "dressage-engine"), "--port", str(port), "--script", str(script), "--token-rate",
             str(token_rate), *flags], tmp / f"engine-{mode}.log")
    for mode in MODES:
        wait_listening(ports[f"engine-{mode}"], procs[f"engine-{mode}"], 120)
        url = f"http://127.0.0.1:{ports[f'engine-{mode}']}"
        ports[mode] = free_port()
        procs[mode] = start_server(
            [str(bin_dir / "dressage-proxy"), "--port", str(ports[mode]), "--sglang-router-url", url,
             "--sglang-worker-urls", url, "--tool-call-parse-backend", "local", "--reasoning-parse-backend", "local",
             "--store", "memory", "--upstream-stream-mode", "auto"], tmp / f"proxy-{mode}.log")
    for mode in MODES:
        wait_listening(ports[mode], procs[mode], 120)
    return ports


async def phase(port: int, pid: int, tokens: int, streams: int, concurrency: int) -> tuple[float, int, int]:
    """Proxy CPU seconds, streamed tokens and failed requests of ``streams`` answers of ``tokens`` tokens."""
    counter = iter(range(10**9))

    def body(_worker: int, _n: int) -> dict:
        n = next(counter)
        return {"model": "m", "session_id": f"s{n}", "messages": [{"role": "user", "content": f"go {n}"}],
                "stream": True,
                "max_tokens": tokens, "stream_options": {"include_usage": True},
                "chat_template_kwargs": {"enable_thinking": False}}

    before = cpu_seconds(pid)
    result = await run_load("127.0.0.1", port, "/v1/chat/completions", body, concurrency=concurrency,
                            requests_per_worker=max(1, streams // concurrency), deadline=300,
                            count=streamed_tokens)
    return cpu_seconds(pid) - before, result.units, result.errors


async def run(args: argparse.Namespace, ports: dict[str, int], pids: dict[str, int]) -> dict:
    figures: dict[tuple[str, int], list[float]] = {}
    # Warm-up: a stream of each length through each proxy (tokenizer caches, first connections).
    for mode in MODES:
        for tokens in (128, 1024):
            await phase(ports[mode], pids[mode], tokens, args.concurrency, args.concurrency)
    for round_index in range(args.rounds):
        order = [(mode, tokens) for mode in MODES for tokens in (128, 1024)]
        random.Random(round_index).shuffle(order)
        for mode, tokens in order:
            streams = args.streams_128 if tokens == 128 else args.streams_1024
            cpu, count, errors = await phase(ports[mode], pids[mode], tokens, streams, args.concurrency)
            if errors or count == 0:
                raise SystemExit(f"{mode} {tokens}: {errors} failed streams, {count} tokens")
            figures.setdefault((mode, tokens), []).append(1e6 * cpu / count)
            print(f"round {round_index + 1} {mode:11} {tokens:5} tokens: {1e6 * cpu / count:7.1f} us/token "
                  f"({count} tokens, proxy CPU {cpu:.2f} s)", flush=True)
    return figures


def report(figures: dict, args: argparse.Namespace) -> None:
    print(f"\n{args.rounds} interleaved rounds, {args.concurrency} concurrent streams, engine paced at "
          f"{args.token_rate:g} tokens/s per stream; proxy CPU per streamed token (us), median of the rounds "
          "[min-max]\n")
    print("| upstream | 128-token answers | 1,024-token answers | 1,024 / 128 (median of per-round ratios) |")
    print("|---|---:|---:|---:|")
    medians = {}
    for mode in MODES:
        short, long = figures[(mode, 128)], figures[(mode, 1024)]
        ratios = [b / a for a, b in zip(short, long, strict=True)]
        medians[mode] = (statistics.median(short), statistics.median(long))
        print(f"| {mode} | {medians[mode][0]:.1f} [{min(short):.1f}-{max(short):.1f}] | {medians[mode][1]:.1f} "
              f"[{min(long):.1f}-{max(long):.1f}] | {statistics.median(ratios):.2f}x |")
    for tokens, index in ((128, 0), (1024, 1)):
        print(f"\nincremental / cumulative at {tokens} tokens: "
              f"{medians['incremental'][index] / medians['cumulative'][index]:.2f}x", end="")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--token-rate", type=float, default=500.0)
    parser.add_argument("--streams-128", type=int, default=16)
    parser.add_argument("--streams-1024", type=int, default=4)
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args()
    procs: dict = {}
    tmp = Path(tempfile.mkdtemp(prefix="stream-modes-"))
    try:
        ports = start_all(procs, tmp, args.token_rate)
        pids = {name: proc.pid for name, proc in procs.items()}
        figures = trio.run(run, args, ports, pids)
    finally:
        stop_servers(procs, tmp, keep_logs=args.keep_logs)
    report(figures, args)


if __name__ == "__main__":
    main()
