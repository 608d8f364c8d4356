"""Benchmark: CPU cost of the SGLang client's HTTP layer (trio sockets + ``http1``) against httpx2 and httpcore, in
one run.

The embedded engine (``dressage-engine``, its own process, as fast as it can) serves ``/generate``; this process
runs the clients, one phase at a time, and measures its own CPU time (``time.process_time``) per request and per
streamed token. Four clients, all doing the same requests:

- ``new``: ``SGLangClient.generate`` / ``generate_stream`` (the HTTP layer plus SSE parsing and token decoding);
- ``httpx2``: the same requests and the same decoding (``SSEParser``, ``ChunkDecoder``) through an
  ``httpx2.AsyncClient`` configured as the client's old ``_httplib`` did: the previous ``SGLangClient`` path;
- ``httpcore``: the same through ``httpcore.AsyncConnectionPool`` on its trio backend (issue 21 item 3: the
  hand-written client stays only if it is at least 1.5x cheaper than httpcore);
- ``new-http`` / ``httpx2-http`` / ``httpcore-http``: the HTTP layers alone, bodies read but not decoded, to
  isolate what the library itself costs.

``--upstream floor`` answers from ``bench/fixed_upstream.py`` (precomputed bodies, no per-request work) instead of
the embedded engine, so the upstream neither paces nor crowds the clients.

Each shape (non-streaming: short replies, many requests; streaming: long replies) runs every client ``--rounds``
times, interleaved (new, httpx2, new-http, httpx2-http, new, ...), so drift on a shared machine hits all of them;
ratios are new/baseline of the means. Every phase is bounded in count and in seconds; 127.0.0.1 only.

    .venv/bin/python bench/upstream_client.py [--concurrency 64] [--requests 4000] [--streams 512]
        [--stream-tokens 128] [--rounds 3] [--seconds 30] [--upstream {engine,floor}]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import httpcore
import httpx2
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from servers import cpu_seconds, free_port, start_server, stop_servers, wait_listening  # noqa: E402

from proxy.upstream._httplib import HTTPClient  # noqa: E402
from proxy.upstream.chunks import ChunkDecoder, SSEParser  # noqa: E402
from proxy.upstream.client import SGLangClient, _generate_body  # noqa: E402
from proxy.upstream.events import Token  # noqa: E402
from proxy.upstream.request_ids import new_rid  # noqa: E402

PROMPT = [151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198]  # a short Qwen3 chat prompt
CLIENTS = ("new", "httpx2", "httpcore", "new-http", "httpx2-http", "httpcore-http")

#: ``(input_ids, params, stream) -> tokens received``: one request, however the client does it.
Request = Callable[[list[int], dict[str, Any], bool], Awaitable[int]]


@attrs.frozen
class Phase:
    client: str
    stream: bool
    requests: int
    tokens: int
    errors: int
    cpu: float  # this process, seconds
    engine_cpu: float
    wall: float

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.cpu / self.requests if self.requests else float("nan")

    @property
    def cpu_us_per_token(self) -> float:
        return 1e6 * self.cpu / self.tokens if self.tokens else float("nan")


# ---- the four clients -----------------------------------------------------------------------------------------


def generate_body(ids: list[int], params: dict[str, Any], stream: bool) -> dict[str, Any]:
    """The body ``SGLangClient`` sends (fresh rid, logprobs on)."""
    return _generate_body(ids, params, rid=new_rid(), stream=stream, return_logprob=True,
                          return_routed_experts=False, routed_experts_start_len=None, extra_body=None)


async def decode_stream(pieces: AsyncIterator[bytes], decoder: ChunkDecoder) -> int:
    """Tokens of an SGLang stream read from ``pieces`` (the body as a library yields it), decoded as the client
    does."""
    tokens = 0
    sse = SSEParser()
    async for data in pieces:
        for payload in sse.feed(data):
            tokens += sum(type(e) is Token for e in decoder.feed_payload(payload))
    decoder.feed_eof()
    return tokens


class NewClient:
    def __init__(self, url: str, concurrency: int) -> None:
        self.client = SGLangClient(url, max_connections=max(1024, concurrency))

    async def request(self, ids: list[int], params: dict[str, Any], stream: bool) -> int:
        if not stream:
            return len((await self.client.generate(ids, params)).output_ids)
        tokens = 0
        async with self.client.generate_stream(ids, params) as events:
            async for event in events:
                tokens += type(event) is Token
        return tokens

    async def aclose(self) -> None:
        await self.client.aclose()


class Httpx2Client:
    """What ``SGLangClient`` did before: httpx2 with the old ``_httplib`` settings, the same decoding."""

    def __init__(self, url: str, concurrency: int) -> None:
        self.url = url + "/generate"
        limit = max(1024, concurrency)
        self.http = httpx2.AsyncClient(
            timeout=httpx2.Timeout(connect=10, read=None, write=60, pool=60),
            limits=httpx2.Limits(max_connections=limit, max_keepalive_connections=limit, keepalive_expiry=60),
            trust_env=False,
            follow_redirects=False,
        )

    async def request(self, ids: list[int], params: dict[str, Any], stream: bool) -> int:
        body = generate_body(ids, params, stream)
        decoder = ChunkDecoder(rid=body["rid"], url=self.url)
        if not stream:
            response = await self.http.post(self.url, json=body)
            response.raise_for_status()
            decoder.feed_chunk(json.loads(response.content))
            assert decoder.result is not None
            return len(decoder.result.output_ids)
        async with self.http.stream("POST", self.url, json=body) as response:
            response.raise_for_status()
            return await decode_stream(response.aiter_bytes(), decoder)

    async def aclose(self) -> None:
        await self.http.aclose()


class NewHTTPOnly:
    def __init__(self, url: str, concurrency: int) -> None:
        self.url = url + "/generate"
        self.http = HTTPClient(max_connections=max(1024, concurrency), connect_timeout=10, write_timeout=60,
                               pool_timeout=60, keepalive_expiry=60)

    async def request(self, ids: list[int], params: dict[str, Any], stream: bool) -> int:
        body = generate_body(ids, params, stream)
        if not stream:
            response = await self.http.request("POST", self.url, body)
            assert response.status == 200 and response.content
            return params["max_new_tokens"]
        response = await self.http.stream("POST", self.url, body)
        try:
            while await response.receive() is not None:
                pass
        finally:
            response.close()
        return params["max_new_tokens"]

    async def aclose(self) -> None:
        self.http.close()


class Httpx2HTTPOnly(Httpx2Client):
    async def request(self, ids: list[int], params: dict[str, Any], stream: bool) -> int:
        body = generate_body(ids, params, stream)
        if not stream:
            response = await self.http.post(self.url, json=body)
            assert response.status_code == 200 and response.content
            return params["max_new_tokens"]
        async with self.http.stream("POST", self.url, json=body) as response:
            async for _ in response.aiter_bytes():
                pass
        return params["max_new_tokens"]


class HttpcoreClient:
    """``httpcore.AsyncConnectionPool`` on its trio backend (pinned in the ``bench`` extra), the same decoding."""

    def __init__(self, url: str, concurrency: int) -> None:
        self.url = url + "/generate"
        limit = max(1024, concurrency)
        self.http = httpcore.AsyncConnectionPool(max_connections=limit, max_keepalive_connections=limit,
                                                 keepalive_expiry=60, network_backend=httpcore.TrioBackend())

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        return {"headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))],
                "content": payload}

    async def request(self, ids: list[int], params: dict[str, Any], stream: bool) -> int:
        body = generate_body(ids, params, stream)
        decoder = ChunkDecoder(rid=body["rid"], url=self.url)
        if not stream:
            response = await self.http.request("POST", self.url, **self._post(body))
            assert response.status == 200
            decoder.feed_chunk(json.loads(response.content))
            assert decoder.result is not None
            return len(decoder.result.output_ids)
        async with self.http.stream("POST", self.url, **self._post(body)) as response:
            assert response.status == 200
            return await decode_stream(response.aiter_stream(), decoder)

    async def aclose(self) -> None:
        await self.http.aclose()


class HttpcoreHTTPOnly(HttpcoreClient):
    async def request(self, ids: list[int], params: dict[str, Any], stream: bool) -> int:
        body = generate_body(ids, params, stream)
        if not stream:
            response = await self.http.request("POST", self.url, **self._post(body))
            assert response.status == 200 and response.content
            return params["max_new_tokens"]
        async with self.http.stream("POST", self.url, **self._post(body)) as response:
            async for _ in response.aiter_stream():
                pass
        return params["max_new_tokens"]


FACTORIES = {"new": NewClient, "httpx2": Httpx2Client, "httpcore": HttpcoreClient, "new-http": NewHTTPOnly,
             "httpx2-http": Httpx2HTTPOnly, "httpcore-http": HttpcoreHTTPOnly}


# ---- one phase ------------------------------------------------------------------------------------------------


async def run_phase(name: str, url: str, engine_pid: int, *, stream: bool, concurrency: int, total: int,
                    tokens: int, seconds: float) -> Phase:
    client = FACTORIES[name](url, concurrency)
    params = {"max_new_tokens": tokens, "ignore_eos": True}
    counts = {"requests": 0, "tokens": 0, "errors": 0}
    try:
        async with trio.open_nursery() as nursery:  # warm-up: open the connections, first-use imports
            for i in range(concurrency):
                nursery.start_soon(client.request, PROMPT + [i], params, stream)
        remaining = total

        async def worker(index: int) -> None:
            nonlocal remaining
            n = 0
            while remaining > 0:
                remaining -= 1
                n += 1
                try:
                    got = await client.request(PROMPT + [index, n], params, stream)
                except Exception as exc:  # counted, and the phase goes on
                    counts["errors"] += 1
                    print(f"  {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                counts["requests"] += 1
                counts["tokens"] += got

        cpu0, engine0, wall0 = time.process_time(), cpu_seconds(engine_pid), time.perf_counter()
        with trio.move_on_after(seconds):
            async with trio.open_nursery() as nursery:
                for i in range(concurrency):
                    nursery.start_soon(worker, i)
        cpu, engine, wall = time.process_time() - cpu0, cpu_seconds(engine_pid) - engine0, time.perf_counter() - wall0
    finally:
        await client.aclose()
    return Phase(name, stream, counts["requests"], counts["tokens"], counts["errors"], cpu, engine, wall)


# ---- report ---------------------------------------------------------------------------------------------------


def report(phases: list[Phase], args: argparse.Namespace) -> None:
    def mean(values: list[float]) -> float:
        return statistics.fmean(values) if values else float("nan")

    for stream in (False, True):
        shape = (f"Streaming: {args.concurrency} concurrent streams x {args.stream_tokens} tokens" if stream else
                 f"Non-streaming: {args.concurrency} concurrent requests, {args.ns_tokens} tokens each")
        print(f"\n### {shape}\n")
        print("| client | requests | tokens | errors | client CPU ms/request | client CPU us/token | "
              "engine CPU ms/request | requests/s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        per: dict[str, dict[str, float]] = {}
        for name in CLIENTS:
            ps = [p for p in phases if p.client == name and p.stream == stream]
            if not ps:
                continue
            per[name] = {
                "ms": mean([p.cpu_ms_per_request for p in ps]),
                "us": mean([p.cpu_us_per_token for p in ps]),
            }
            print(f"| {name} | {sum(p.requests for p in ps)} | {sum(p.tokens for p in ps)} | "
                  f"{sum(p.errors for p in ps)} | {per[name]['ms']:.3f} | {per[name]['us']:.2f} | "
                  f"{mean([1000 * p.engine_cpu / p.requests for p in ps if p.requests]):.3f} | "
                  f"{mean([p.requests / p.wall for p in ps]):.0f} |")
        print()
        pairs = (("new", "httpx2"), ("new", "httpcore"), ("new-http", "httpx2-http"), ("new-http", "httpcore-http"))
        for new, old in pairs:
            if new in per and old in per:
                metric = "us" if stream else "ms"
                what = "CPU per streamed token" if stream else "CPU per request"
                rounds = "; ".join(
                    f"{name} " + ", ".join(f"{p.cpu_us_per_token if stream else p.cpu_ms_per_request:.3g}"
                                           for p in phases if p.stream == stream and p.client == name)
                    for name in (new, old))
                print(f"- {new} / {old}, {what}: **{per[new][metric] / per[old][metric]:.2f}** "
                      f"(per round, {'us/token' if stream else 'ms/request'}: {rounds})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=4000, help="non-streaming requests per phase")
    parser.add_argument("--ns-tokens", type=int, default=8, help="tokens per non-streaming reply")
    parser.add_argument("--streams", type=int, default=512, help="streams per phase")
    parser.add_argument("--stream-tokens", type=int, default=128, help="tokens per stream")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30, help="bound of each phase")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--upstream", choices=("engine", "floor"), default="engine")
    args = parser.parse_args()
    clients = [c for c in args.clients.split(",") if c]
    if not set(clients) <= set(CLIENTS):
        raise SystemExit(f"--clients: choose among {CLIENTS}")

    tmp = Path(tempfile.mkdtemp(prefix="dressage-upstream-client-"))
    bin_dir = Path(sys.executable).parent
    port = free_port()
    if args.upstream == "floor":  # precomputed bodies: the answers of 8 and 128 tokens are among them
        from fixed_upstream import capture

        capture(tmp / "answers.json")
        argv = [sys.executable, str(Path(__file__).resolve().parent / "fixed_upstream.py"), "--answers",
                str(tmp / "answers.json"), "--port", str(port)]
    else:
        argv = [str(bin_dir / "dressage-engine"), "--port", str(port), "--seed", "1", "--log-level", "warning"]
    procs = {"engine": start_server(argv, tmp / "engine.log")}
    try:
        wait_listening(port, procs["engine"], 120)
        url = f"http://127.0.0.1:{port}"

        async def run_all() -> list[Phase]:
            phases = []
            for stream in (False, True):
                for _ in range(args.rounds):
                    for name in clients:
                        phase = await run_phase(
                            name, url, procs["engine"].pid, stream=stream, concurrency=args.concurrency,
                            total=args.streams if stream else args.requests,
                            tokens=args.stream_tokens if stream else args.ns_tokens, seconds=args.seconds)
                        print(f"  {'stream' if stream else 'non-stream'} {name}: {phase.requests} requests, "
                              f"{phase.cpu_ms_per_request:.3f} ms CPU/request, {phase.wall:.1f} s",
                              file=sys.stderr, flush=True)
                        phases.append(phase)
            return phases

        phases = trio.run(run_all)
        if procs["engine"].poll() is not None:
            print(f"engine exited with {procs['engine'].returncode} (log {tmp}/engine.log)")
        report(phases, args)
    finally:
        stop_servers(procs, tmp)


if __name__ == "__main__":
    main()
