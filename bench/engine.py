"""Benchmark: the embedded engine's own throughput, the baseline every later proxy benchmark divides by.

One run measures, with 64 concurrent clients on keep-alive connections (bench/loadgen.py, h11 on raw sockets):

- non-streaming ``/generate`` (input_ids, 8 new tokens): requests/s;
- streaming ``/generate`` (128 new tokens, cumulative chunks): tokens/s;
- the engine process's CPU time per request (from /proc, less noisy than wall time on a shared machine).

Each figure is printed next to the same load against a **floor server** measured in the same run: a quart-trio app
on hypercorn (the same stack) that answers with precomputed bodies of the same shape and size, doing no
tokenization or generation. ``engine / floor`` is how much of the bare HTTP stack's capacity the engine keeps;
the machines are shared and noisy, so only same-run ratios are meaningful. Both servers run in their own process.

    .venv/bin/python bench/engine.py [--concurrency 64] [--seconds 15]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import LoadResult, run_load  # noqa: E402
from servers import cpu_seconds, free_port, start_server, wait_listening  # noqa: E402

PROMPT_IDS = list(range(1000, 1032))  # 32 ordinary Qwen3 tokens
NON_STREAM_TOKENS = 8
STREAM_TOKENS = 128








def body(stream: bool) -> dict:
    return {
        "input_ids": PROMPT_IDS,
        "sampling_params": {"max_new_tokens": STREAM_TOKENS if stream else NON_STREAM_TOKENS, "ignore_eos": True},
        "return_logprob": True,
        "stream": stream,
    }


def last_chunk_tokens(payload: bytes) -> int:
    """Tokens in a cumulative stream: the length of the last chunk's output_ids."""
    events = [e for e in payload.split(b"\n\n") if e.startswith(b"data: {")]
    return len(json.loads(events[-1][6:])["output_ids"]) if events else 0


# ---- the floor server: same stack, precomputed answers ----------------------------------------------------------


def serve_floor(port: int) -> None:
    """Run the floor server (in its own process) with bodies shaped like the engine's."""
    from quart import Response
    from quart_trio import QuartTrio

    from serving.http_server import harden_app, serve_app

    def chunk(n: int, final: bool) -> dict:
        ids = list(range(2000, 2000 + n))
        return {
            "text": " tok" * n,
            "output_ids": ids,
            "meta_info": {
                "id": "0" * 32, "finish_reason": {"type": "length", "length": n} if final else None,
                "prompt_tokens": len(PROMPT_IDS), "weight_version": "default", "completion_tokens": n,
                "cached_tokens": 0, "output_token_logprobs": [[-0.5, i, None] for i in ids],
            },
        }

    whole = json.dumps(chunk(NON_STREAM_TOKENS, True)).encode()
    events = [b"data: " + json.dumps(chunk(n, n == STREAM_TOKENS)).encode() + b"\n\n"
              for n in range(1, STREAM_TOKENS + 1)] + [b"data: [DONE]\n\n"]
    app = harden_app(QuartTrio("floor"))

    @app.post("/generate")
    async def generate():
        from quart import request

        if not (await request.get_json()).get("stream"):
            return Response(whole, content_type="application/json")

        async def stream():
            for event in events:
                yield event
                await trio.sleep(0)

        return Response(stream(), content_type="text/event-stream")

    trio.run(serve_app, app, "127.0.0.1", port)


# ---- the measurement ---------------------------------------------------------------------------------------------


async def measure(port: int, pid: int, concurrency: int, seconds: float) -> dict[str, LoadResult | float]:
    results: dict[str, LoadResult | float] = {}
    for name, stream, per_worker in (("non_streaming", False, 400), ("streaming", True, 20)):
        cpu_before = cpu_seconds(pid)
        result = await run_load(
            "127.0.0.1", port, "/generate", lambda i, n, s=stream: body(s),
            concurrency=concurrency, requests_per_worker=per_worker, deadline=seconds,
            count=last_chunk_tokens if stream else (lambda p: len(json.loads(p).get("output_ids", []))),
        )
        results[name] = result
        results[name + "_cpu_ms"] = 1000 * (cpu_seconds(pid) - cpu_before) / max(result.requests, 1)
    return results




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=15.0, help="bound of each load phase")
    parser.add_argument("--serve-floor", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_floor is not None:
        serve_floor(args.serve_floor)
        return

    bin_dir = Path(sys.executable).parent
    figures = {}
    for name, argv in (
        ("floor", [sys.executable, __file__, "--serve-floor", "{port}"]),
        ("engine", [str(bin_dir / "dressage-engine"), "--port", "{port}", "--seed", "1"]),
    ):
        port = free_port()
        proc = start_server([a.replace("{port}", str(port)) for a in argv])
        try:
            wait_listening(port, proc)
            figures[name] = trio.run(measure, port, proc.pid, args.concurrency, args.seconds)
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    floor, engine = figures["floor"], figures["engine"]
    print(f"concurrency {args.concurrency}; engine vs floor (same stack, precomputed bodies), same run")
    print(f"{'':28}{'floor':>12}{'engine':>12}{'engine/floor':>14}")
    rows = (
        ("non-streaming requests/s", floor["non_streaming"].rate, engine["non_streaming"].rate),
        ("  p50 latency ms", 1000 * floor["non_streaming"].percentile(50), 1000 * engine["non_streaming"].percentile(50)),
        ("  p99 latency ms", 1000 * floor["non_streaming"].percentile(99), 1000 * engine["non_streaming"].percentile(99)),
        ("  server CPU ms/request", floor["non_streaming_cpu_ms"], engine["non_streaming_cpu_ms"]),
        ("streaming tokens/s", floor["streaming"].unit_rate, engine["streaming"].unit_rate),
        ("  server CPU ms/stream", floor["streaming_cpu_ms"], engine["streaming_cpu_ms"]),
    )
    for label, f, e in rows:
        print(f"{label:28}{f:12.1f}{e:12.1f}{e / f if f else float('nan'):14.2f}")
    for name in ("floor", "engine"):
        for phase in ("non_streaming", "streaming"):
            r = figures[name][phase]
            print(f"{name} {phase}: {r.requests} requests, {r.errors} errors, {r.seconds:.1f} s")


if __name__ == "__main__":
    main()
