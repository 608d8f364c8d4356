"""Benchmark: pausing 256 in-flight streaming generations, through the proxy and on the engine itself.

One run, two scenarios on the same engine process (the embedded engine, decoding slowly enough that every
generation is mid-way when the pause comes), each compared in the same run:

- **engine baseline**: 256 streaming ``/generate`` requests straight to the engine; ``POST /pause_generation
  {"mode": "abort"}`` (which answers once every admitted request has finished with its abort); each client, as
  soon as its stream ends with the abort, resubmits ``input_ids = prompt + output so far`` (the partial-rollout
  recipe; the engine holds it at its pause gate); ``POST /continue_generation``; the continuations run to the end.
- **proxy**: 256 streaming chat completions through ``dressage-proxy --dressage-partial-rollout`` (router and
  worker URL = the engine); ``POST /v1/rollout/pause`` (answers once every generation acknowledged its abort at a
  token boundary); ``POST /v1/rollout/resume``; every stream simply continues to its end.

Measured for each: time from the pause request to its answer (client-side, plus the proxy's own ``seconds``), the
tokens the engine generated against the tokens the clients finally received (the difference was generated upstream
and discarded), and for every stream the time from the resume request to its next token. Checked for the proxy:
every stream's final token ids and text equal the scripted reply (no token the proxy had received was lost, none
duplicated), each session's recorded trajectory holds exactly those generated tokens, and ``tokens_kept`` in the
pause answer covers every token the clients had seen at the acknowledgement.

How to read it: the engine's own pause answers after one more decode step (an abort takes effect at the next token,
as in SGLang), so its time grows with the step time (1 / ``--token-rate`` here); the proxy's pause cuts its
upstream streams locally and acknowledges without waiting for the engine, then (with ``--sglang-worker-urls``)
aborts every rid on the workers in the background. ``--no-worker-urls`` measures the proxy without those aborts.
The engine baseline's continuations are already queued at the engine's pause gate when it continues; the proxy
sends its continuations after the resume. The engine is served by this script (``--serve-engine``: the
``dressage-engine`` app plus a read-only view of its request log) in its own process. ``--rounds N`` repeats
both scenarios (the machine is noisy: look at every round).

Bounded (256 streams of 64 tokens, every wait has a deadline); talks to 127.0.0.1 only.

    .venv/bin/python bench/pause.py [--streams 256] [--reply-tokens 64] [--token-rate 8] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
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
from servers import free_port, start_server, stop_servers, wait_listening  # noqa: E402
from loadgen import Connection  # noqa: E402
from overhead import IM_END_ID, SYSTEM, encode, load_tokenizer, reply_text  # noqa: E402

ACK_BOUND = 120.0  # seconds any single control call may take before the run gives up


# ---- the engine, served with a bench-only view of its request log ------------------------------------------------


def serve_engine(port: int, token_rate: float, script: Path) -> None:
    """The embedded engine (as ``dressage-engine`` serves it) plus ``GET /bench/tokens?prefix=``: the output tokens
    of every finished request whose routing key starts with ``prefix``, and how many such requests still run."""
    from quart import jsonify, request

    from engine import EngineConfig
    from engine.app import create_engine_app
    from serving.http_server import serve_app

    config = EngineConfig(host="127.0.0.1", port=port, token_rate=token_rate, script=script, seed=1,
                          request_log_size=1_000_000)
    app, engine = create_engine_app(config)
    arrivals: dict[str, list[float]] = {}  # routing key -> wall times at which its /generate requests arrived

    @app.before_request
    async def note_arrival() -> None:
        if request.path == "/generate":
            key = request.headers.get("X-SMG-Routing-Key")
            if key is None:
                try:
                    key = json.loads(await request.get_data()).get("routing_key")
                except (ValueError, AttributeError):
                    key = None
            if key:
                arrivals.setdefault(key, []).append(time.time())

    @app.get("/bench/tokens")
    async def tokens():
        prefix = request.args.get("prefix", "")
        records = [r for r in engine.request_log if (r.routing_key or "").startswith(prefix)]
        finish: dict[str, int] = {}
        per_key: dict[str, list] = {}
        for r in records:
            kind = (r.finish_reason or {}).get("type", "none")
            finish[kind] = finish.get(kind, 0) + 1
            per_key.setdefault(r.routing_key, []).append([r.input_len, len(r.output_ids), kind])
        return jsonify({
            "requests": len(records),
            "output_tokens": sum(len(r.output_ids) for r in records),
            "client_disconnected": sum(1 for r in records if r.client_disconnected),
            "finish": finish,
            "per_key": per_key,
            "arrivals": {k: v for k, v in arrivals.items() if k.startswith(prefix)},
            "active": sum(1 for s in engine.active_requests() if (s.routing_key or "").startswith(prefix)),
        })

    trio.run(serve_app, app, "127.0.0.1", port)


# ---- one streaming client ------------------------------------------------------------------------------------


@attrs.define
class Stream:
    """What one client saw: token arrivals (time, count), the ids, and how it ended."""

    key: str
    ids: list[int] = attrs.field(factory=list)
    arrivals: list[tuple[float, int]] = attrs.field(factory=list)  # (time, tokens in this event)
    text: list[str] = attrs.field(factory=list)
    reasoning: list[str] = attrs.field(factory=list)
    buffer: bytes = b""
    done: bool = False
    error: str | None = None
    finish: str | None = None
    #: engine baseline: ids of the current request's cumulative output (reset by each resubmission)
    request_ids: list[int] = attrs.field(factory=list)

    def tokens_before(self, t: float) -> int:
        return sum(n for when, n in self.arrivals if when <= t)

    def first_after(self, t: float) -> float | None:
        return next((when for when, n in self.arrivals if when > t and n), None)

    def events(self, data: bytes) -> list[dict]:
        self.buffer += data
        *complete, self.buffer = self.buffer.split(b"\n\n")
        out = []
        for event in complete:
            if event.startswith(b"data: {"):
                out.append(json.loads(event[6:]))
        return out

    def feed_proxy(self, data: bytes) -> None:
        now = time.perf_counter()
        for event in self.events(data):
            if "error" in event:
                self.error = json.dumps(event["error"])[:300]
                continue
            new = event.get("token_ids") or []
            if new:
                self.ids.extend(new)
                self.arrivals.append((now, len(new)))
            for choice in event.get("choices") or ():
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    self.text.append(delta["content"])
                if delta.get("reasoning_content"):
                    self.reasoning.append(delta["reasoning_content"])
                if choice.get("finish_reason"):
                    self.finish = choice["finish_reason"]

    def feed_engine(self, data: bytes) -> None:
        now = time.perf_counter()
        for event in self.events(data):
            if "error" in event:
                self.error = json.dumps(event["error"])[:300]
                continue
            out = event.get("output_ids") or []
            new = out[len(self.request_ids):]
            if new:
                self.request_ids = list(out)
                self.ids.extend(new)
                self.arrivals.append((now, len(new)))
            reason = (event.get("meta_info") or {}).get("finish_reason")
            if reason:
                self.finish = reason.get("type")


async def engine_client(port: int, stream: Stream, prompt: list[int]) -> None:
    """Stream; after an abort, resubmit prompt + output so far (it waits at the engine's pause gate)."""
    conn = Connection("127.0.0.1", port)
    try:
        for _ in range(4):
            stream.request_ids = []
            stream.finish = None
            body = {"input_ids": prompt + stream.ids, "sampling_params": {"max_new_tokens": None},
                    "stream": True, "routing_key": stream.key}
            status, _ = await conn.request("POST", "/generate", json.dumps(body).encode(), on_data=stream.feed_engine)
            if status != 200 or stream.error:
                stream.error = stream.error or f"HTTP {status}"
                return
            if stream.finish != "abort":
                break
    finally:
        stream.done = True
        await conn.aclose()


async def proxy_client(port: int, stream: Stream, user: str) -> None:
    conn = Connection("127.0.0.1", port)
    body = {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
            "session_id": stream.key, "stream": True, "return_token_ids": True,
            "stream_options": {"include_usage": True}}
    try:
        status, payload = await conn.request("POST", "/v1/chat/completions", json.dumps(body).encode(),
                                             on_data=stream.feed_proxy)
        if status != 200:
            stream.error = f"HTTP {status}: {payload[:200]!r}"
    finally:
        stream.done = True
        await conn.aclose()


async def call(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any, float]:
    """One control call on its own connection: (status, parsed body, seconds)."""
    conn = Connection("127.0.0.1", port)
    try:
        began = time.perf_counter()
        with trio.fail_after(ACK_BOUND):
            status, payload = await conn.request(method, path, b"" if body is None else json.dumps(body).encode())
        took = time.perf_counter() - began
    finally:
        await conn.aclose()
    try:
        parsed = json.loads(payload) if payload else None
    except ValueError:
        parsed = payload[:300]
    return status, parsed, took


# ---- a scenario --------------------------------------------------------------------------------------------


@attrs.define
class Outcome:
    name: str
    streams: list[Stream]
    in_flight_at_pause: int
    pause_status: int
    pause_answer: Any
    ack_seconds: float
    resume_seconds: float
    seen_at_pause: int  # tokens the clients had received when the pause was sent
    seen_at_ack: int  # ... when the pause answer arrived
    between_ack_and_resume: int  # tokens reaching clients while paused
    resume_first_token: list[float]  # per stream that was in flight: resume sent -> its next token
    engine: dict
    finished_seconds: float
    #: per stream: tokens the client had received when resume was sent
    seen_at_resume: list[int] = attrs.field(factory=list)
    #: per interrupted stream: resume sent -> its continuation request reached the engine (engine baseline: the
    #: continuation was already waiting there, so this is negative)
    resume_to_upstream: list[float] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)

    def kept(self, prompt_len: int) -> list[int | None]:
        """Per stream: the tokens carried into its continuation (continuation input - prompt), from the engine's
        log; None when the stream had no continuation."""
        out: list[int | None] = []
        for s in self.streams:
            requests = self.engine.get("per_key", {}).get(s.key, [])
            out.append(requests[1][0] - prompt_len if len(requests) > 1 else None)
        return out

    def lost(self, prompt_len: int) -> int:
        """Tokens a client had received before the resume that its continuation did not carry."""
        return sum(max(0, seen - kept) for seen, kept in zip(self.seen_at_resume, self.kept(prompt_len))
                   if kept is not None)

    @property
    def discarded(self) -> int:
        """Tokens the engine generated that no final response holds."""
        return self.engine.get("output_tokens", 0) - sum(len(s.ids) for s in self.streams)


async def scenario(name: str, kind: str, args: argparse.Namespace, ports: dict[str, int], prefix: str,
                   prompt: list[int], user: str) -> Outcome:
    streams = [Stream(f"{prefix}.{i}") for i in range(args.streams)]
    notes: list[str] = []
    async with trio.open_nursery() as nursery:
        for s in streams:
            if kind == "engine":
                nursery.start_soon(engine_client, ports["engine"], s, prompt)
            else:
                nursery.start_soon(proxy_client, ports["proxy"], s, user)
        # every stream has its first token (bounded), then let them run a while
        with trio.move_on_after(ACK_BOUND) as ramp:
            while sum(1 for s in streams if s.ids or s.done) < len(streams):
                await trio.sleep(0.05)
        if ramp.cancelled_caught:
            notes.append(f"only {sum(1 for s in streams if s.ids)} streams had a token after {ACK_BOUND:g} s")
        await trio.sleep(args.pause_after)
        in_flight = sum(1 for s in streams if s.ids and not s.done)
        t_pause = time.perf_counter()
        seen_at_pause = sum(len(s.ids) for s in streams)
        if kind == "engine":
            status, answer, ack = await call(ports["engine"], "POST", "/pause_generation", {"mode": "abort"})
        else:
            status, answer, ack = await call(ports["proxy"], "POST", "/v1/rollout/pause")
        t_ack = time.perf_counter()
        seen_at_ack = sum(s.tokens_before(t_ack) for s in streams)
        await trio.sleep(args.paused_for)  # the weight update would happen here
        t_resume = time.perf_counter()
        wall_resume = time.time()
        seen_at_resume = [s.tokens_before(t_resume) for s in streams]
        between = sum(seen_at_resume) - seen_at_ack
        if kind == "engine":
            r_status, _, resume = await call(ports["engine"], "POST", "/continue_generation", {})
        else:
            r_status, _, resume = await call(ports["proxy"], "POST", "/v1/rollout/resume", {})
        if r_status != 200:
            notes.append(f"resume answered {r_status}")
        with trio.move_on_after(ACK_BOUND + args.reply_tokens / max(args.token_rate, 1) * 4) as finish:
            while not all(s.done for s in streams):
                await trio.sleep(0.05)
        if finish.cancelled_caught:
            notes.append(f"{sum(1 for s in streams if not s.done)} streams still open at the deadline: cancelled")
            nursery.cancel_scope.cancel()
    finished = time.perf_counter() - t_resume
    interrupted = [s for s in streams if s.tokens_before(t_pause) and len(s.ids) > s.tokens_before(t_pause)]
    first = [s.first_after(t_resume) for s in interrupted]
    await trio.sleep(0.3)  # the engine logs a request when its task ends
    _, engine_view, _ = await call(ports["engine"], "GET", f"/bench/tokens?prefix={prefix}.")
    return Outcome(
        name=name, streams=streams, in_flight_at_pause=in_flight, pause_status=status, pause_answer=answer,
        ack_seconds=ack, resume_seconds=resume, seen_at_pause=seen_at_pause, seen_at_ack=seen_at_ack,
        between_ack_and_resume=between,
        resume_first_token=[f - t_resume for f in first if f is not None],
        engine=engine_view or {}, finished_seconds=finished, seen_at_resume=seen_at_resume, notes=notes,
        resume_to_upstream=[a[1] - wall_resume for s in interrupted
                            if len(a := (engine_view or {}).get("arrivals", {}).get(s.key, [])) > 1],
    )


async def check_proxy(outcome: Outcome, port: int, reply_ids: list[int], reply: str, prompt_len: int) -> list[str]:
    """Every stream's ids and text equal the reply; every session's trajectory holds exactly those tokens."""
    problems: list[str] = []
    think, _, answer = reply.partition("</think>")
    wrong_ids = [s.key for s in outcome.streams if s.ids != reply_ids]
    wrong_text = [s.key for s in outcome.streams if "".join(s.text).strip() != answer.strip()
                  or "".join(s.reasoning).strip() != think.replace("<think>", "").strip()]
    errors = [f"{s.key}: {s.error}" for s in outcome.streams if s.error]
    if wrong_ids:
        problems.append(f"{len(wrong_ids)} streams' token ids differ from the reply (e.g. {wrong_ids[:3]})")
    if wrong_text:
        problems.append(f"{len(wrong_text)} streams' text differs from the reply (e.g. {wrong_text[:3]})")
    if errors:
        problems.append(f"{len(errors)} streams ended with an error (e.g. {errors[:2]})")
    conn = Connection("127.0.0.1", port)
    bad_records = []
    try:
        for s in outcome.streams:
            await conn.request("POST", "/session/finalize", json.dumps({"session_id": s.key}).encode())
            status, payload = await conn.request(
                "POST", "/trajectory/read", json.dumps({"session_id": s.key, "drain": True}).encode())
            answer = json.loads(payload) if status == 200 else {}
            segments = answer.get("data", [])
            if answer.get("lease_id"):  # two-phase drain: the ack deletes what the read leased
                await conn.request("POST", "/trajectory/ack", json.dumps({"lease_id": answer["lease_id"]}).encode())
            generated = [t for seg in segments for t, m in zip(seg["token_ids"], seg["loss_mask"]) if m]
            if generated != reply_ids:
                bad_records.append(s.key)
    finally:
        await conn.aclose()
    if bad_records:
        problems.append(f"{len(bad_records)} recorded trajectories differ from the reply (e.g. {bad_records[:3]})")
    kept = (outcome.pause_answer or {}).get("tokens_kept") if isinstance(outcome.pause_answer, dict) else None
    if kept is not None and kept < outcome.seen_at_ack:
        problems.append(f"tokens_kept {kept} < {outcome.seen_at_ack} tokens the clients had at the acknowledgement")
    carried = sum(k for k in outcome.kept(prompt_len) if k is not None)
    if kept is not None and kept != carried:
        problems.append(f"tokens_kept {kept} != {carried} tokens the continuations carried upstream")
    if outcome.lost(prompt_len):
        problems.append(f"{outcome.lost(prompt_len)} tokens the clients had received were not carried on")
    return problems


def check_engine(outcome: Outcome, reply_ids: list[int], prompt_len: int) -> list[str]:
    wrong = [s.key for s in outcome.streams if s.ids != reply_ids]
    errors = [f"{s.key}: {s.error}" for s in outcome.streams if s.error]
    out = []
    if wrong:
        out.append(f"{len(wrong)} streams' token ids differ from the reply (e.g. {wrong[:3]})")
    if errors:
        out.append(f"{len(errors)} streams ended with an error (e.g. {errors[:2]})")
    if outcome.lost(prompt_len):
        out.append(f"engine baseline: {outcome.lost(prompt_len)} received tokens were not resubmitted")
    return out


# ---- report --------------------------------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    data = sorted(values)
    return data[min(len(data) - 1, int(p / 100 * len(data)))] if data else math.nan


def report(args: argparse.Namespace, rounds: list[tuple[Outcome, Outcome, list[str]]], reply_len: int,
           prompt_len: int, load_before: float) -> None:
    print(f"# bench/pause.py: {args.streams} streams of {reply_len} tokens, engine at {args.token_rate:g} tokens/s "
          f"per stream, pause {args.pause_after:g} s after every stream has a token, resume {args.paused_for:g} s "
          f"later; proxy parse backend `{args.backend}`, --dressage-partial-rollout"
          f"{'' if args.no_worker_urls else ', --sglang-worker-urls (rid aborts)'}; load average "
          f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after\n")
    print("| figure | target | " + " | ".join(f"round {i + 1}" for i in range(len(rounds))) + " |")
    print("|---|---|" + "---:|" * len(rounds))

    def row(label: str, target: str, cells: list[str]) -> None:
        print(f"| {label} | {target} | " + " | ".join(cells) + " |")

    row("pause acknowledgement, proxy / engine", "≤ 2", [f"**{p.ack_seconds / e.ack_seconds:.2f}**"
                                                          for e, p, _ in rounds])
    row("tokens the clients had received and the continuation lost (proxy)", "0",
        [f"**{p.lost(prompt_len)}**" for _, p, _ in rounds])
    row("tokens generated upstream and discarded, proxy (engine)", "", [
        f"{p.discarded} ({e.discarded})" for e, p, _ in rounds])
    row("resume to next token p50, proxy / engine", "", [
        f"{pct(p.resume_first_token, 50) / pct(e.resume_first_token, 50):.2f}" for e, p, _ in rounds])
    row("resume to next token p99, proxy / engine", "", [
        f"{pct(p.resume_first_token, 99) / pct(e.resume_first_token, 99):.2f}" for e, p, _ in rounds])
    print()
    for i, (e, p, problems) in enumerate(rounds):
        print(f"### Round {i + 1}\n")
        print("| figure | engine `/pause_generation` (abort) | proxy `/v1/rollout/pause` |")
        print("|---|---:|---:|")

        def both(label: str, f: Any, digits: int = 1) -> None:
            def show(o: Outcome) -> str:
                v = f(o)
                return v if isinstance(v, str) else ("n/a" if v is None or math.isnan(v) else f"{v:.{digits}f}")
            print(f"| {label} | {show(e)} | {show(p)} |")

        both("streams in flight at the pause", lambda o: str(o.in_flight_at_pause))
        both("pause request → answer, ms (client)", lambda o: 1000 * o.ack_seconds)
        both("pause duration reported by the proxy, ms", lambda o: (
            1000 * o.pause_answer["seconds"] if isinstance(o.pause_answer, dict) and "seconds" in o.pause_answer
            else "n/a"))
        both("generations interrupted (answer's `aborted`)", lambda o: (
            str(o.pause_answer.get("aborted")) if isinstance(o.pause_answer, dict) and "aborted" in o.pause_answer
            else "n/a"))
        both("tokens at clients when the pause was sent", lambda o: str(o.seen_at_pause))
        both("tokens at clients at the acknowledgement", lambda o: str(o.seen_at_ack))
        both("tokens kept (answer's `tokens_kept`)", lambda o: (
            str(o.pause_answer.get("tokens_kept")) if isinstance(o.pause_answer, dict)
            and "tokens_kept" in o.pause_answer else "n/a"))
        both("tokens reaching clients between acknowledgement and resume", lambda o: str(o.between_ack_and_resume))
        both("upstream requests (engine log)", lambda o: str(o.engine.get("requests")))
        both("tokens generated by the engine", lambda o: str(o.engine.get("output_tokens")))
        both("tokens in the final responses", lambda o: str(sum(len(s.ids) for s in o.streams)))
        both("**generated upstream but discarded**", lambda o: str(o.discarded))
        both("tokens carried into the continuations", lambda o: str(sum(k for k in o.kept(prompt_len) if k)))
        both("received by a client before resume but not carried on", lambda o: str(o.lost(prompt_len)))
        both("resume request → answer, ms", lambda o: 1000 * o.resume_seconds)
        both("resume → continuation request at the engine p50, ms", lambda o: 1000 * pct(o.resume_to_upstream, 50)
             if pct(o.resume_to_upstream, 50) > 0 else "already waiting")
        both("resume → continuation request at the engine max, ms", lambda o: 1000 * max(o.resume_to_upstream)
             if o.resume_to_upstream and max(o.resume_to_upstream) > 0 else "already waiting")
        both("resume → next token p50, ms", lambda o: 1000 * pct(o.resume_first_token, 50))
        both("resume → next token p99, ms", lambda o: 1000 * pct(o.resume_first_token, 99))
        both("resume → next token max, ms", lambda o: 1000 * max(o.resume_first_token, default=math.nan))
        both("resume → every stream finished, s", lambda o: o.finished_seconds, 2)
        both("engine finish reasons", lambda o: ", ".join(f"{k} {v}" for k, v in sorted(
            o.engine.get("finish", {}).items())))
        print()
        for o in (e, p):
            for note in o.notes:
                print(f"- {o.name}: {note}")
        if problems:
            print("Checks FAILED:\n" + "\n".join(f"- {x}" for x in problems))
        else:
            print("Checks passed: every stream (engine and proxy) ended with exactly the scripted reply's token "
                  "ids; through the proxy also the text, and every session's recorded trajectory holds exactly "
                  "those generated tokens; `tokens_kept` covers every token the clients had at the acknowledgement.")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--reply-tokens", type=int, default=64)
    parser.add_argument("--token-rate", type=float, default=8.0, help="engine decode speed per stream (tokens/s)")
    parser.add_argument("--pause-after", type=float, default=2.0,
                        help="seconds between every stream having a token and the pause")
    parser.add_argument("--paused-for", type=float, default=1.0, help="seconds between acknowledgement and resume")
    parser.add_argument("--rounds", type=int, default=1, help="engine then proxy, this many times")
    parser.add_argument("--backend", default="local", choices=("local", "sglang_api", "hybrid"),
                        help="the proxy's tool-call and reasoning parse backend")
    parser.add_argument("--no-worker-urls", action="store_true",
                        help="start the proxy without --sglang-worker-urls (it aborts by closing streams only)")
    parser.add_argument("--proxy-arg", action="append", default=[], help="extra dressage-proxy flag (repeatable)")
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument("--serve-engine", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--script", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_engine is not None:
        serve_engine(args.serve_engine, args.token_rate, args.script)
        return
    load_before = os.getloadavg()[0]

    tokenizer = load_tokenizer()
    reply = reply_text(tokenizer, args.reply_tokens, 3)
    reply_ids = encode(tokenizer, reply) + [IM_END_ID]
    user = "Please summarise the results of the last step and report the value."
    prompt = encode(tokenizer, f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
                               "<|im_start|>assistant\n")
    tmp = Path(tempfile.mkdtemp(prefix="dressage-pause-"))
    with (tmp / "script.jsonl").open("w") as out:
        for r in range(args.rounds):
            for kind in ("en", "px"):
                for i in range(args.streams):
                    out.write(json.dumps({"session": f"{kind}{r}.{i}", "output": reply}) + "\n")
    procs: dict[str, subprocess.Popen] = {}
    ports = {"engine": free_port(), "proxy": free_port()}
    try:
        procs["engine"] = start_server([sys.executable, __file__, "--serve-engine", str(ports["engine"]),
                                 "--token-rate", str(args.token_rate), "--script", str(tmp / "script.jsonl")],
                                tmp / "engine.log")
        wait_listening(ports["engine"], procs["engine"], 120)
        url = f"http://127.0.0.1:{ports['engine']}"
        backend = [] if args.backend == "sglang_api" else [
            "--tool-call-parse-backend", args.backend, "--reasoning-parse-backend", args.backend]
        procs["proxy"] = start_server([str(Path(sys.executable).parent / "dressage-proxy"), "--port", str(ports["proxy"]),
                                "--sglang-router-url", url,
                                *([] if args.no_worker_urls else ["--sglang-worker-urls", url]),
                                "--dressage-partial-rollout", *backend, *args.proxy_arg], tmp / "proxy.log")
        wait_listening(ports["proxy"], procs["proxy"], 120)

        async def run_all() -> list[tuple[Outcome, Outcome, list[str]]]:
            status, _, _ = await call(ports["proxy"], "GET", "/v1/rollout/pause_state")
            if status != 200:
                raise SystemExit(f"the proxy has no /v1/rollout/pause_state (HTTP {status}): pause not built yet")
            rounds = []
            for r in range(args.rounds):
                e = await scenario("engine", "engine", args, ports, f"en{r}", prompt, user)
                print(f"  round {r + 1} engine: ack {1000 * e.ack_seconds:.1f} ms", file=sys.stderr, flush=True)
                p = await scenario("proxy", "proxy", args, ports, f"px{r}", prompt, user)
                print(f"  round {r + 1} proxy: ack {1000 * p.ack_seconds:.1f} ms", file=sys.stderr, flush=True)
                problems = check_engine(e, reply_ids, len(prompt)) + await check_proxy(
                    p, ports["proxy"], reply_ids, reply, len(prompt))
                if e.pause_status != 200 or p.pause_status != 200:
                    problems.append(f"pause answered {e.pause_status} (engine), {p.pause_status} (proxy)")
                rounds.append((e, p, problems))
            return rounds

        rounds = trio.run(run_all)
        for name, proc in procs.items():
            if proc.poll() is not None:
                print(f"warning: {name} exited with {proc.returncode} (log {tmp}/{name}.log)")
        report(args, rounds, len(reply_ids), len(prompt), load_before)
    finally:
        stop_servers(procs, tmp, args.keep_logs)


if __name__ == "__main__":
    main()
