"""Benchmark: what the proxy costs on the request path, against SGLang's ``/generate`` used directly.

One run, every figure against a baseline measured in the same run (the machines are shared and noisy):

- the embedded engine (``dressage-engine``, own process, ``--script`` of fixed replies) on its own port;
- one proxy process per parse backend (``dressage-proxy --sglang-router-url <engine> --sglang-worker-urls
  <engine>``, and the same with ``--tool-call-parse-backend local --reasoning-parse-backend local``);
- 64 concurrent clients (``bench/loadgen.py``: h11 on raw trio sockets, so the client is not the bottleneck), each
  running **multi-turn sessions**: turn k sends the whole conversation so far (system, user, assistant, user, ...)
  with the assistant messages echoed exactly as the proxy returned them, so the proxy's trie walk and TITO
  fragment encode do real work every turn;
- the **direct** baseline sends ``/generate`` the same token sequences: turn k's ``input_ids`` = turn k-1's
  ``input_ids`` + its output ids + the new user turn's ids (what TITO produces; checked token for token against
  the proxy's ``prompt_token_ids`` in a calibration session before measuring), and the engine's script gives both
  the same reply (hence the same completion tokens);
- three loaded shapes, each measured as direct, proxy(s), direct again (the two direct runs bracket the
  proxies; their mean is the baseline, their ratio shows drift): non-streaming (short replies), streaming with
  the engine as fast as it can (long replies; on a small shared machine this measures CPU cost, since engine,
  proxy and load generator share the cores), and streaming with the engine paced per stream (a GPU's decode
  speed: does the proxy keep up with the upstream, and what latency does it add);
- then one client at a time (unloaded) for the latency the proxy adds to a single request;
- CPU time of the proxy, engine and load-generator processes per answer, from /proc, and the cores the run's
  processes got; "at equal CPU" = direct CPU per answer / proxied CPU per answer (all processes), the
  throughput ratio a CPU-bound run converges to, much less sensitive to other work on the machine.

Every phase is bounded in requests and seconds; everything talks to 127.0.0.1 only. Output: markdown tables.

    .venv/bin/python bench/overhead.py [--concurrency 64] [--seconds 10] [--turns 4] [--backends local,sglang_api]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from servers import cpu_seconds, free_port, start_server, stop_servers, wait_listening  # noqa: E402
from loadgen import Connection, LoadResult, run_load  # noqa: E402

SYSTEM = "You are a careful assistant. Answer briefly and keep track of every earlier result."
_WORDS = ("check", "results", "plan", "value", "step", "data", "summary", "carefully", "report", "clearly",
          "each", "next", "first", "finally", "consistent", "answer", "question", "found", "simple", "short")
IM_END_ID = 151645  # <|im_end|> in the Qwen3 vocabulary (checked in load_tokenizer)
BACKEND_FLAGS = {
    "sglang_api": [],
    "local": ["--tool-call-parse-backend", "local", "--reasoning-parse-backend", "local"],
    "hybrid": ["--tool-call-parse-backend", "hybrid", "--reasoning-parse-backend", "hybrid"],
}


# ---- the conversation: texts and the token ids a TITO proxy sends for them ----------------------------------------


def load_tokenizer() -> Any:
    from tokenizers import Tokenizer

    from serving.tokenizer_files import model_tokenizer_path

    tokenizer = Tokenizer.from_file(str(model_tokenizer_path("qwen3") / "tokenizer.json"))
    if tokenizer.token_to_id("<|im_end|>") != IM_END_ID:
        raise SystemExit("unexpected tokenizer: <|im_end|> is not 151645")
    return tokenizer


def encode(tokenizer: Any, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


def reply_text(tokenizer: Any, tokens: int, salt: int) -> str:
    """A reply (reasoning, then an answer) of at most (in practice exactly) ``tokens`` tokens, counting the
    end-of-turn token the engine appends."""
    reasoning: list[str] = []
    answer: list[str] = []
    text = ""
    for i in range(4 * tokens):
        (reasoning if i % 3 == 0 else answer).append(_WORDS[(i * 7 + salt) % len(_WORDS)])
        candidate = f"<think>\nThe user asks; {' '.join(reasoning)}.\n</think>\n\n{' '.join(answer).capitalize()}."
        if len(encode(tokenizer, candidate)) + 1 > tokens:
            break
        text = candidate
    return text


def user_text(client: int, turn: int) -> str:
    return (f"Question {client}.{turn}: please {_WORDS[(client + turn) % len(_WORDS)]} the "
            f"{_WORDS[(3 * client + turn) % len(_WORDS)]} results of step {turn} and report the value.")


@attrs.define
class Conversation:
    """The texts of every client's session and the ids a direct client sends for them."""

    turns: int
    ns_reply: str
    stream_reply: str
    #: client -> turn -> ids the prompt gains at that turn (turn 0: system + user + assistant header)
    fragments: list[list[list[int]]]
    ns_reply_ids: list[int]
    stream_reply_ids: list[int]

    @classmethod
    def build(cls, tokenizer: Any, clients: int, turns: int, ns_tokens: int, stream_tokens: int) -> Conversation:
        fragments = []
        for client in range(clients):
            per_turn = [encode(tokenizer, f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
                                          f"{user_text(client, 0)}<|im_end|>\n<|im_start|>assistant\n")]
            for turn in range(1, turns):
                per_turn.append(encode(tokenizer, f"\n<|im_start|>user\n{user_text(client, turn)}<|im_end|>\n"
                                                  "<|im_start|>assistant\n"))
            fragments.append(per_turn)
        ns_reply, stream_reply = reply_text(tokenizer, ns_tokens, 1), reply_text(tokenizer, stream_tokens, 2)
        return cls(turns, ns_reply, stream_reply, fragments,
                   encode(tokenizer, ns_reply) + [IM_END_ID], encode(tokenizer, stream_reply) + [IM_END_ID])

    def reply(self, stream: bool) -> str:
        return self.stream_reply if stream else self.ns_reply


# ---- one worker's sessions: proxy (chat messages) or direct (input_ids) -------------------------------------------


def sse_events(payload: bytes) -> list[dict]:
    return [json.loads(e[6:]) for e in payload.split(b"\n\n") if e.startswith(b"data: {")]


@attrs.define
class Tally:
    """Per-phase counts the load generator does not keep."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    answered: int = 0
    bad: int = 0  # 200 answers that are not a complete reply (an SSE error event, a wrong token count)


@attrs.define
class ProxySessions:
    """One client: sessions of ``turns`` chat-completions requests through the proxy."""

    conv: Conversation
    phase: str
    client: int
    stream: bool
    tally: Tally
    session: int = 0
    messages: list[dict] = attrs.field(factory=list)
    return_token_ids: bool = False
    #: (prompt_token_ids, token_ids) of every answer, with return_token_ids (calibration)
    seen: list[tuple[list[int], list[int]]] = attrs.field(factory=list)

    @property
    def session_id(self) -> str:
        return f"{self.phase}.{self.client}.{self.session}"

    def body(self, _worker: int = 0, _n: int = 0) -> dict:
        turn = len(self.messages) // 2
        if turn == 0:
            self.messages = [{"role": "system", "content": SYSTEM}]
        self.messages.append({"role": "user", "content": user_text(self.client, turn)})
        body: dict[str, Any] = {"model": "bench", "messages": self.messages, "session_id": self.session_id}
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if self.return_token_ids:
            body["return_token_ids"] = True
        return body

    def on_response(self, _worker: int, status: int, payload: bytes) -> None:
        message, usage, ids = None, None, None
        if status == 200:
            try:
                if self.stream:
                    message, usage, ids = self._assemble(sse_events(payload))
                else:
                    answer = json.loads(payload)
                    message, usage = answer["choices"][0]["message"], answer["usage"]
                    if self.return_token_ids:
                        ids = (answer["prompt_token_ids"], answer["token_ids"])
            except (ValueError, KeyError, IndexError, TypeError):
                message = None
        expected = len(self.conv.stream_reply_ids if self.stream else self.conv.ns_reply_ids)
        if message is None or usage is None or usage.get("completion_tokens") != expected:
            if status == 200:
                self.tally.bad += 1
            self._next_session()
            return
        self.tally.answered += 1
        self.tally.prompt_tokens += usage["prompt_tokens"]
        self.tally.completion_tokens += usage["completion_tokens"]
        if ids is not None:
            self.seen.append(ids)
        self.messages.append(message)
        if len(self.messages) >= 1 + 2 * self.conv.turns:
            self._next_session()

    def _assemble(self, events: list[dict]) -> tuple[dict | None, dict | None, Any]:
        content: list[str] = []
        reasoning: list[str] = []
        usage = None
        prompt_ids: list[int] = []
        token_ids: list[int] = []
        for event in events:
            if "error" in event:
                return None, None, None
            if event.get("usage"):
                usage = event["usage"]
            if "prompt_token_ids" in event:
                prompt_ids = event["prompt_token_ids"]
            token_ids.extend(event.get("token_ids") or ())
            for choice in event.get("choices") or ():
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    content.append(delta["content"])
                if delta.get("reasoning_content"):
                    reasoning.append(delta["reasoning_content"])
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
        if reasoning:
            message["reasoning_content"] = "".join(reasoning)
        return message, usage, (prompt_ids, token_ids) if self.return_token_ids else None

    def _next_session(self) -> None:
        self.session += 1
        self.messages = []


@attrs.define
class DirectSessions:
    """One client: the same sessions as ``/generate`` requests with the ids TITO would send."""

    conv: Conversation
    phase: str
    client: int
    stream: bool
    tally: Tally
    session: int = 0
    turn: int = 0
    prompt: list[int] = attrs.field(factory=list)
    sent: list[list[int]] = attrs.field(factory=list)

    def body(self, _worker: int = 0, _n: int = 0) -> dict:
        fragment = self.conv.fragments[self.client][self.turn]
        self.prompt = fragment if self.turn == 0 else self.prompt + fragment
        self.sent.append(self.prompt)
        return {
            "input_ids": self.prompt,
            "sampling_params": {"max_new_tokens": None},  # as the proxy sends without a context window
            "return_logprob": True,
            "stream": self.stream,
            "routing_key": f"{self.phase}.{self.client}.{self.session}",
        }

    def on_response(self, _worker: int, status: int, payload: bytes) -> None:
        output = None
        if status == 200:
            try:
                if self.stream:  # cumulative chunks: the last one holds every output id
                    last = json.loads(payload[payload.rindex(b"data: {") + 6:].split(b"\n\n", 1)[0])
                    output = None if "error" in last else last["output_ids"]
                else:
                    output = json.loads(payload)["output_ids"]
            except (ValueError, KeyError, IndexError, TypeError):
                output = None
        expected = self.conv.stream_reply_ids if self.stream else self.conv.ns_reply_ids
        if output is None or len(output) != len(expected):
            if status == 200:
                self.tally.bad += 1
            self._next_session()
            return
        self.tally.answered += 1
        self.tally.prompt_tokens += len(self.prompt)
        self.tally.completion_tokens += len(output)
        self.prompt = self.prompt + output
        self.turn += 1
        if self.turn >= self.conv.turns:
            self._next_session()

    def _next_session(self) -> None:
        self.session += 1
        self.turn = 0
        self.prompt = []


# ---- processes and phases ------------------------------------------------------------------------------------


@attrs.frozen
class Experiment:
    """One load shape, measured against every target (direct, then each proxy, then direct again if bracketed)."""

    key: str
    title: str
    stream: bool
    clients: int
    per_client: int  # bound of requests per client
    seconds: float  # bound of each phase
    token_rate: float | None = None  # per-stream decode speed of the engine's replies (None: as fast as it can)
    bracket: bool = True

    def phase_name(self, target: str) -> str:
        return f"{self.key}-{target}"


def write_script(path: Path, conv: Conversation, experiments: list[Experiment], targets: list[str]) -> int:
    """Keyed script entries: every session a phase may open gets ``turns`` replies (short or long, maybe paced)."""
    lines = 0
    with path.open("w") as out:
        for exp in experiments:
            entry: dict[str, Any] = {"session": "{key}", "output": conv.reply(exp.stream)}
            if exp.token_rate:
                entry["token_rate"] = exp.token_rate
            line = json.dumps(entry)
            for target in targets + (["direct2"] if exp.bracket else []):
                for client in range(exp.clients):
                    # a failed request starts a new session: allow for a few
                    for session in range(math.ceil(exp.per_client / conv.turns) + 4):
                        keyed = line.replace("{key}", f"{exp.phase_name(target)}.{client}.{session}") + "\n"
                        out.write(keyed * conv.turns)
                        lines += conv.turns
    return lines


def start_engine_and_proxies(procs: dict[str, subprocess.Popen], ports: dict[str, int], tmp: Path,
                             proxies: dict[str, list[str]]) -> None:
    """The engine on ``tmp/script.jsonl`` and one ``dressage-proxy`` per ``proxies`` entry (name -> its extra
    flags) routed to it, each in its own process, logging to ``tmp/<process>.log``; waits until all listen.

    Processes go into ``procs`` as they start ("engine", "proxy-<name>"; ports "engine", "<name>"), so that the
    caller's ``stop_servers`` also stops those started before a failure."""
    bin_dir = Path(sys.executable).parent
    ports["engine"] = free_port()
    procs["engine"] = start_server([str(bin_dir / "dressage-engine"), "--port", str(ports["engine"]), "--seed", "1",
                                    "--script", str(tmp / "script.jsonl")], tmp / "engine.log")
    wait_listening(ports["engine"], procs["engine"], 120)
    engine_url = f"http://127.0.0.1:{ports['engine']}"
    for name, flags in proxies.items():
        ports[name] = free_port()
        procs[f"proxy-{name}"] = start_server(
            [str(bin_dir / "dressage-proxy"), "--port", str(ports[name]), "--sglang-router-url", engine_url,
             "--sglang-worker-urls", engine_url, *flags], tmp / f"proxy-{name}.log")
    for name in proxies:
        wait_listening(ports[name], procs[f"proxy-{name}"], 120)


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@attrs.frozen
class Phase:
    name: str
    target: str  # "direct" or a backend name
    stream: bool
    load: LoadResult
    tally: Tally
    cpu: dict[str, float]  # process -> CPU seconds spent during the phase

    @property
    def rate(self) -> float:
        """Complete answers per second (non-streaming), or tokens of complete streams per second (streaming)."""
        return (self.tally.completion_tokens if self.stream else self.tally.answered) / self.load.seconds

    def cpu_ms(self, who: str) -> float:
        """CPU milliseconds of one process per complete answer."""
        return 1000 * self.cpu.get(who, 0.0) / max(self.tally.answered, 1)

    @property
    def total_cpu_ms(self) -> float:
        """CPU ms per answer of every process on the path (engine, proxy if any, load generator)."""
        return 1000 * sum(self.cpu.values()) / max(self.tally.answered, 1)

    @property
    def cores(self) -> float:
        """CPU the processes of this run got, in cores (the rest of the machine went to other work)."""
        return sum(self.cpu.values()) / self.load.seconds


async def run_phase(
    name: str, target: str, stream: bool, port: int, pids: dict[str, int], conv: Conversation,
    concurrency: int, per_client: int, seconds: float,
) -> Phase:
    tally = Tally()
    if target == "direct":
        clients: list[Any] = [DirectSessions(conv, name, c, stream, tally) for c in range(concurrency)]
        path = "/generate"
        watched = {"engine": pids["engine"]}
    else:
        clients = [ProxySessions(conv, name, c, stream, tally) for c in range(concurrency)]
        path = "/v1/chat/completions"
        watched = {"engine": pids["engine"], "proxy": pids[f"proxy-{target}"]}
    before = {who: cpu_seconds(pid) for who, pid in watched.items()}
    before["loadgen"] = self_cpu()
    result = await run_load(
        "127.0.0.1", port, path, lambda w, n: clients[w].body(),
        concurrency=concurrency, requests_per_worker=per_client, deadline=seconds,
        on_response=lambda w, status, payload: clients[w].on_response(w, status, payload),
    )
    cpu = {who: cpu_seconds(pid) - before[who] for who, pid in watched.items()}
    cpu["loadgen"] = self_cpu() - before["loadgen"]
    await trio.sleep(0.5)  # let cancelled streams wind down before the next phase
    return Phase(name, target, stream, result, tally, cpu)


async def calibrate(conv: Conversation, proxy_port: int, backend: str) -> list[str]:
    """One session per mode through the proxy with token ids, compared to what the direct client sends."""
    problems = []
    for stream in (False, True):
        name = f"cal-{'s' if stream else 'ns'}-{backend}"
        tally = Tally()
        proxy = ProxySessions(conv, name, 0, stream, tally, return_token_ids=True)
        direct = DirectSessions(conv, name, 0, stream, Tally())
        conn = Connection("127.0.0.1", proxy_port)
        try:
            for _ in range(conv.turns):
                status, payload = await conn.request("POST", "/v1/chat/completions",
                                                     json.dumps(proxy.body()).encode())
                proxy.on_response(0, status, payload)
            status, payload = await conn.request("GET", f"/session/{name}.0.0", b"")
        finally:
            await conn.aclose()
        if tally.answered != conv.turns:
            problems.append(f"{name}: {tally.answered}/{conv.turns} turns answered ({tally.bad} bad)")
            continue
        for turn, (prompt_ids, token_ids) in enumerate(proxy.seen):
            direct.body()
            if prompt_ids != direct.prompt:
                problems.append(f"{name}: turn {turn}: proxy prompt ({len(prompt_ids)} ids) != direct "
                                f"construction ({len(direct.prompt)} ids)")
            direct.prompt = direct.prompt + token_ids
            direct.turn += 1
        view = json.loads(payload) if status == 200 else {}
        if view.get("steps") != conv.turns or view.get("branches") != 1:
            problems.append(f"{name}: session view {view.get('steps')} steps, {view.get('branches')} branches "
                            f"(expected {conv.turns} steps on 1 branch)")
    return problems


# ---- the report ----------------------------------------------------------------------------------------------


def ms(seconds: float) -> float:
    return 1000 * seconds


def fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def signed(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.1f}"


def mean(values: list[float]) -> float:
    return statistics.mean(values) if values else math.nan


def report(args: argparse.Namespace, conv: Conversation, experiments: list[Experiment],
           results: dict[tuple[str, str], list[Phase]], calibration: list[str], script_lines: int,
           load_before: float) -> None:
    backends = args.backends
    cols = [f"proxy `{b}`" for b in backends]
    print(f"# bench/overhead.py: {args.concurrency} clients, {args.turns}-turn sessions, replies of "
          f"{len(conv.ns_reply_ids)} tokens (non-streaming) / {len(conv.stream_reply_ids)} tokens (streaming); "
          f"load average {load_before:.2f} before the run, {os.getloadavg()[0]:.2f} after")
    print(f"calibration (direct input_ids == the proxy's prompt_token_ids every turn; one chain per session): "
          f"{'ok' if not calibration else 'FAILED'}" + "".join(f"\n  - {p}" for p in calibration))
    print(f"engine script: {script_lines} keyed replies\n")

    def direct(exp: Experiment) -> list[Phase]:
        return results[(exp.key, "direct")]

    def proxy(exp: Experiment, backend: str) -> Phase:
        return results[(exp.key, backend)][0]

    loaded = [e for e in experiments if e.clients > 1]
    single = [e for e in experiments if e.clients == 1]
    targets = {"ns": "≥ 0.5", "s": "≥ 0.8", "sp": "≥ 0.8"}

    print("## Ratios: proxy / direct, same run\n")
    print("| figure | target | " + " | ".join(cols) + " |")
    print("|---|---:|" + "---:|" * len(backends))
    for exp in loaded:
        base = mean([p.rate for p in direct(exp)])
        unit = "tokens/s" if exp.stream else "requests/s"
        cells = [f"**{proxy(exp, b).rate / base:.2f}**" if base else "n/a" for b in backends]
        print(f"| {exp.title}: {unit} | {targets.get(exp.key, '')} | " + " | ".join(cells) + " |")
    for exp in loaded:
        if exp.token_rate:
            continue
        base = mean([p.total_cpu_ms for p in direct(exp)])
        cells = [f"{base / proxy(exp, b).total_cpu_ms:.2f}" for b in backends]
        print(f"| {exp.title}: at equal CPU (direct CPU/answer ÷ proxied CPU/answer, all processes) | | "
              + " | ".join(cells) + " |")
    print()

    for exp in loaded:
        ds = direct(exp)
        ps = [proxy(exp, b) for b in backends]
        unit = "stream" if exp.stream else "request"
        print(f"## {exp.title}, {exp.clients} clients\n")
        print("| figure | direct | " + " | ".join(cols) + " |")
        print("|---|" + "---:|" * (1 + len(backends)))

        def row(label: str, dv: float, values: list[float], digits: int = 1) -> None:
            print(f"| {label} | {fmt(dv, digits)} | " + " | ".join(fmt(v, digits) for v in values) + " |")

        row("tokens/s" if exp.stream else "requests/s", mean([p.rate for p in ds]), [p.rate for p in ps], 0)
        if exp.stream:
            row("streams/s", mean([p.tally.answered / p.load.seconds for p in ds]),
                [p.tally.answered / p.load.seconds for p in ps])
        for label, which in (("latency", False), ("first token", True)) if exp.stream else (("latency", False),):
            for pct in (50, 99):
                def value(p: Phase) -> float:
                    return p.load.percentile(pct, p.load.first_byte if which else None)
                base = mean([value(p) for p in ds])
                print(f"| p{pct} {label} ms (added) | {fmt(ms(base))} | "
                      + " | ".join(f"{fmt(ms(value(p)))} ({signed(ms(value(p) - base))})" for p in ps) + " |")
        row(f"proxy CPU ms/{unit}", math.nan, [p.cpu_ms("proxy") for p in ps], 2)
        row(f"engine CPU ms/{unit}", mean([p.cpu_ms("engine") for p in ds]), [p.cpu_ms("engine") for p in ps], 2)
        row(f"load generator CPU ms/{unit}", mean([p.cpu_ms("loadgen") for p in ds]),
            [p.cpu_ms("loadgen") for p in ps], 2)
        row("cores used by the run's processes", mean([p.cores for p in ds]), [p.cores for p in ps], 2)
        row("prompt tokens/request", mean([p.tally.prompt_tokens / max(p.tally.answered, 1) for p in ds]),
            [p.tally.prompt_tokens / max(p.tally.answered, 1) for p in ps])
        row("completion tokens/request", mean([p.tally.completion_tokens / max(p.tally.answered, 1) for p in ds]),
            [p.tally.completion_tokens / max(p.tally.answered, 1) for p in ps])
        print()
        if len(ds) == 2 and ds[0].rate:
            print(f"Direct measured before and after the proxies (the column is their mean); drift "
                  f"{ds[1].rate / ds[0].rate:.2f}.")
        for p in [ds[0], *ps, *ds[1:]]:
            print(f"- {p.name}: {p.tally.answered} answers, {p.load.errors} HTTP errors, {p.tally.bad} bad, "
                  f"{p.load.requests} requests in {p.load.seconds:.1f} s")
        print()

    if single:
        print("## One client at a time (no load): what the proxy adds to one request\n")
        print("| figure | direct | " + " | ".join(cols) + " |")
        print("|---|" + "---:|" * (1 + len(backends)))
        for exp in single:
            d = direct(exp)[0]
            mode = "stream" if exp.stream else "non-streaming"
            for label, which in (("latency", False), ("first token", True)) if exp.stream else (("latency", False),):
                for pct in (50, 99):
                    def value(p: Phase) -> float:
                        return p.load.percentile(pct, p.load.first_byte if which else None)
                    base = value(d)
                    print(f"| {mode} p{pct} {label} ms (added) | {fmt(ms(base))} | "
                          + " | ".join(f"{fmt(ms(value(proxy(exp, b))))} ({signed(ms(value(proxy(exp, b)) - base))})"
                                       for b in backends) + " |")
            print(f"| {mode} proxy CPU ms/{'stream' if exp.stream else 'request'} | n/a | "
                  + " | ".join(fmt(proxy(exp, b).cpu_ms("proxy"), 2) for b in backends) + " |")
        print()
        for exp in single:
            for p in [direct(exp)[0]] + [proxy(exp, b) for b in backends]:
                print(f"- {p.name}: {p.tally.answered} answers, {p.load.errors} HTTP errors, {p.tally.bad} bad in "
                      f"{p.load.seconds:.1f} s")


def add_conversation_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that shape :class:`Conversation` (shared with ``bench/observability.py``)."""
    parser.add_argument("--turns", type=int, default=4, help="requests per session")
    parser.add_argument("--ns-reply-tokens", type=int, default=32)
    parser.add_argument("--stream-reply-tokens", type=int, default=128)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0, help="bound of each loaded phase")
    add_conversation_arguments(parser)
    parser.add_argument("--ns-requests", type=int, default=150, help="bound of requests per client, non-streaming")
    parser.add_argument("--stream-requests", type=int, default=20, help="bound of streams per client")
    parser.add_argument("--paced-token-rate", type=float, default=32.0,
                        help="tokens/s of each stream in the paced streaming phases (0: skip them)")
    parser.add_argument("--paced-requests", type=int, default=2, help="streams per client in the paced phases")
    parser.add_argument("--unloaded-seconds", type=float, default=4.0, help="0: skip the one-client phases")
    parser.add_argument("--backends", type=lambda s: [b for b in s.split(",") if b], default=["local", "sglang_api"],
                        help="proxy parse backends to measure, comma-separated (local, sglang_api, hybrid)")
    parser.add_argument("--proxy-arg", action="append", default=[], help="extra dressage-proxy flag (repeatable)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the server logs and the script; print where")
    args = parser.parse_args()
    for b in args.backends:
        if b not in BACKEND_FLAGS:
            parser.error(f"unknown backend {b}")
    load_before = os.getloadavg()[0]

    experiments = [
        Experiment("ns", "Non-streaming", False, args.concurrency, args.ns_requests, args.seconds),
        Experiment("s", "Streaming, engine as fast as it can", True, args.concurrency, args.stream_requests,
                   args.seconds),
    ]
    if args.paced_token_rate > 0:
        duration = args.paced_requests * args.stream_reply_tokens / args.paced_token_rate
        experiments.append(Experiment(
            "sp", f"Streaming, engine paced at {args.paced_token_rate:g} tokens/s per stream", True,
            args.concurrency, args.paced_requests, max(args.seconds, 3 * duration), args.paced_token_rate))
    if args.unloaded_seconds > 0:
        experiments += [
            Experiment("u-ns", "One client, non-streaming", False, 1, 400, args.unloaded_seconds, bracket=False),
            Experiment("u-s", "One client, streaming", True, 1, 60, args.unloaded_seconds, bracket=False),
        ]
    targets = ["direct"] + args.backends
    calibration_exp = [Experiment(f"cal-{m}", "", m == "s", 1, args.turns, 0, bracket=False) for m in ("ns", "s")]

    tokenizer = load_tokenizer()
    conv = Conversation.build(tokenizer, args.concurrency, args.turns, args.ns_reply_tokens, args.stream_reply_tokens)
    tmp = Path(tempfile.mkdtemp(prefix="dressage-overhead-"))
    script_lines = write_script(tmp / "script.jsonl", conv, experiments + calibration_exp, targets)
    procs: dict[str, subprocess.Popen] = {}
    ports: dict[str, int] = {}
    try:
        start_engine_and_proxies(procs, ports, tmp, {b: [*BACKEND_FLAGS[b], *args.proxy_arg] for b in args.backends})
        pids = {name: proc.pid for name, proc in procs.items()}

        async def run_all() -> tuple[list[str], dict[tuple[str, str], list[Phase]]]:
            calibration: list[str] = []
            for b in args.backends:
                calibration += await calibrate(conv, ports[b], b)
            results: dict[tuple[str, str], list[Phase]] = {}
            for exp in experiments:
                for target in targets + (["direct2"] if exp.bracket else []):
                    real = "direct" if target.startswith("direct") else target
                    phase = await run_phase(
                        exp.phase_name(target), real, exp.stream, ports["engine" if real == "direct" else real],
                        pids, conv, exp.clients, exp.per_client, exp.seconds)
                    results.setdefault((exp.key, real), []).append(phase)
                    print(f"  {phase.name}: {phase.tally.answered} answers in {phase.load.seconds:.1f} s",
                          file=sys.stderr, flush=True)
            return calibration, results

        calibration, results = trio.run(run_all)
        for name, proc in procs.items():
            if proc.poll() is not None:
                calibration.append(f"{name} exited with {proc.returncode} during the run (log {tmp}/{name}.log)")
        report(args, conv, experiments, results, calibration, script_lines, load_before)
    finally:
        stop_servers(procs, tmp, args.keep_logs)


if __name__ == "__main__":
    main()
