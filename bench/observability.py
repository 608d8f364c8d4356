"""Benchmark: what Prometheus metrics and JSON logs cost the proxy per request (issue 19's bench; target < 3%).

One run, every figure a ratio against a baseline measured in the same run (the machines are shared and noisy):

- the embedded engine (``dressage-engine``, own process, a ``--script`` of fixed replies) and three proxy processes
  routed to it, identical but for the observability flags:
  **off** ``--no-metrics --log-level warning``, **metrics** ``--metrics --log-level warning``, **metrics + JSON
  logs** ``--metrics --log-format json --log-level info`` (one access line per request, to the proxy's log file);
- the load and the sessions of ``bench/overhead.py`` (its machinery, reused): ``--concurrency`` clients on
  ``bench/loadgen.py``, each running multi-turn chat sessions whose every turn echoes the proxy's answer;
- per mode (non-streaming, then streaming), interleaved phases A/B/C/A/C/B/A...: off, the two configurations,
  off again, the two in the other order, off again (``--rounds`` times), so that drift of the machine hits every
  configuration alike. Each configuration's CPU per answer is divided by the mean of the off phases; the off
  phases against each other (A/A) show the run's noise;
- what is measured: CPU time of the proxy process (utime + stime from /proc) per complete answer. Not latency,
  not throughput: on two shared cores those move with whatever else runs, CPU per answer much less. A phase ends
  when every client has sent its count of requests (``--ns-requests``, ``--stream-requests``), not at a deadline, so
  no phase pays for streams cut half way.

With ``--py-spy PATH`` (py-spy is not a dependency of the project), one more phase per mode, ``--profile-phases``
times longer, runs on the JSON configuration under py-spy (sampling, without pausing the proxy), and the report
gives the share of the proxy's samples in metrics code (prometheus-client, ``proxy/observability/`` metrics
modules) and log code (``logging``, python-json-logger, the access-log wrapper, the session slot). A sample counts
for the code it was running, not for a wrapper further up its stack. Unlike CPU per answer, this share does not move
with what else the machine runs.

Before the report, each configuration is checked to be what it claims: off answers ``/metrics`` 404; metrics
counts every request in ``dressage_requests_total``; metrics + JSON logs also wrote one JSON object per line,
about one per request.

Bounded: each phase stops after its requests or ``--bound`` seconds, whichever comes first (a phase cut by the
bound is reported); talks to 127.0.0.1 only. About 80 s with the defaults on two quiet cores (several minutes
when other work shares them).

    .venv/bin/python bench/observability.py [--rounds 2] [--concurrency 16] [--ns-requests 32] [--stream-requests 6]
                                            [--py-spy PATH [--profile-phases 4]]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import Connection  # noqa: E402
from overhead import (  # noqa: E402
    BACKEND_FLAGS, Conversation, Experiment, Phase, add_conversation_arguments, load_tokenizer, run_phase,
    start_engine_and_proxies, write_script,
)
from servers import stop_servers  # noqa: E402

#: configuration -> (label, flags); "off" is the baseline
CONFIGURATIONS = {
    "off": ("off", ["--no-metrics", "--log-level", "warning"]),
    "metrics": ("metrics", ["--metrics", "--log-level", "warning"]),
    "json": ("metrics + JSON logs", ["--metrics", "--log-format", "json", "--log-level", "info"]),
}
#: the parse backend of every proxy: ``local`` (no engine round trip for reasoning), the cheapest request path,
#: so the observability share of it is the largest
BACKEND = "local"


def schedule(rounds: int) -> list[str]:
    """Phase order of one mode: off, then the others (reversed every other round), then off again, ``rounds``
    times (off, metrics, json, off, json, metrics, off for two rounds)."""
    others = [c for c in CONFIGURATIONS if c != "off"]
    order = ["off"]
    for r in range(rounds):
        order += (others if r % 2 == 0 else others[::-1]) + ["off"]
    return order


def labels(order: list[str]) -> list[str]:
    """A unique phase label per slot (``off-0``, ``metrics-0``, ``off-1`` ...): the engine's script is keyed by
    session ids, which carry the phase's name."""
    seen: dict[str, int] = {}
    out = []
    for config in order:
        out.append(f"{config}-{seen.get(config, 0)}")
        seen[config] = seen.get(config, 0) + 1
    return out


@attrs.frozen
class ModeResult:
    title: str
    unit: str
    expected: int  # requests of a phase that ran to its count
    phases: list[tuple[str, Phase]]  # (configuration, phase) in the order run

    def cpu(self, config: str) -> list[float]:
        return [p.cpu_ms("proxy") for c, p in self.phases if c == config]

    def ratio(self, config: str) -> float:
        return statistics.mean(self.cpu(config)) / statistics.mean(self.cpu("off"))

    def off_spread(self) -> float:
        """A/A: the largest relative distance of an off phase from the mean of the off phases."""
        off = self.cpu("off")
        base = statistics.mean(off)
        return max(abs(v / base - 1) for v in off)

    def bracketed(self, config: str) -> list[float]:
        """Each phase of ``config`` against the mean of the two off phases around it."""
        ratios = []
        last_off = None
        pending: list[float] = []
        for c, p in self.phases:
            if c == "off":
                value = p.cpu_ms("proxy")
                if last_off is not None:
                    ratios += [v / ((last_off + value) / 2) for v in pending]
                last_off, pending = value, []
            elif c == config:
                pending.append(p.cpu_ms("proxy"))
        return ratios


# ---- checking that each configuration is what it claims ---------------------------------------------------------


async def scrape(port: int) -> tuple[int, str]:
    conn = Connection("127.0.0.1", port)
    try:
        status, payload = await conn.request("GET", "/metrics", b"")
    finally:
        await conn.aclose()
    return status, payload.decode(errors="replace")


def requests_counted(exposition: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(s.value for f in text_string_to_metric_families(exposition) for s in f.samples
               if s.name == "dressage_requests_total")


def json_lines(log: Path) -> tuple[int, int]:
    """(lines that are one JSON object, other lines) of a proxy's log."""
    good = bad = 0
    for line in log.read_text(errors="replace").splitlines():
        try:
            good += isinstance(json.loads(line), dict)
        except ValueError:
            bad += 1
    return good, bad


async def check_configurations(ports: dict[str, int], sent: dict[str, int], tmp: Path) -> list[str]:
    """One line per configuration: what was checked, and ``FAILED`` where it is not what it claims."""
    lines = []
    for config, (label, _flags) in CONFIGURATIONS.items():
        status, text = await scrape(ports[config])
        if config == "off":
            verdict = "ok" if status == 404 else "FAILED (metrics are not off)"
            lines.append(f"- {label}: /metrics {status} {verdict}")
            continue
        counted = requests_counted(text) if status == 200 else 0
        verdict = "ok" if status == 200 and counted >= sent[config] else "FAILED"
        line = (f"- {label}: /metrics {status}, dressage_requests_total {counted:.0f} for {sent[config]} requests "
                f"sent {verdict}")
        if config == "json":
            good, bad = json_lines(tmp / f"proxy-{config}.log")
            ok = bad == 0 and good >= sent[config]
            line += f"; log: {good} JSON lines, {bad} other lines {'ok' if ok else 'FAILED'}"
        lines.append(line)
    return lines


# ---- where the CPU goes: a py-spy profile of the JSON configuration (optional) -----------------------------------

#: code that runs only because of metrics or logs: a sample whose innermost frame outside the neutral stdlib is here
#: counts for that part (the wrappers' own frames, not the request they wrap: only the leaf side decides)
PROFILE_PARTS = {
    "metrics": ("prometheus_client/", "proxy/observability/metrics.py", "proxy/observability/exchanges.py",
                "proxy/observability/scrape.py", "proxy/observability/segment_versions.py"),
    "logs": ("pythonjsonlogger/", "logging/", "proxy/observability/logs.py",
             "serving/log_format.py", "proxy/session_context.py"),
}
#: stdlib frames that belong to whoever called them (json encoding under the formatter, say)
NEUTRAL_FRAMES = ("json/", "encodings/", "threading.py", "enum.py", "typing.py", "abc.py", "<frozen",
                  "collections/", "functools.py", "re/", "traceback.py", "os.py", "io.py", "codecs.py", "string.py",
                  "weakref.py", "_weakrefset.py", "posixpath.py", "genericpath.py")


def profile_shares(raw: str) -> tuple[int, dict[str, float]]:
    """(samples, part -> share of them) of a py-spy ``--format raw`` profile (``frame;frame;... count`` lines)."""
    counts = dict.fromkeys(PROFILE_PARTS, 0)
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        total += int(count)
        for frame in reversed(stack.split(";")):
            path = frame[frame.rfind("(") + 1:]  # "name (path:line)", the path as py-spy shortens it
            part = next((k for k, paths in PROFILE_PARTS.items() if path.startswith(paths)), None)
            if part is not None:
                counts[part] += int(count)
                break
            if not path.startswith(NEUTRAL_FRAMES):
                break
    return total, {part: n / total if total else 0.0 for part, n in counts.items()}


async def profiled_phase(py_spy: str, pid: int, out: Path, run: Any) -> str:
    """``await run()`` with py-spy sampling process ``pid`` (without pausing it); the raw profile's text."""
    spy = subprocess.Popen([py_spy, "record", "--nonblocking", "-r", "100", "-f", "raw", "-o", str(out), "-p",
                            str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await trio.sleep(1.0)  # py-spy attaches
        await run()
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes its profile on Ctrl-C
        try:
            spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            spy.kill()
    return out.read_text() if out.exists() else ""


# ---- the run -------------------------------------------------------------------------------------------------


def experiments(args: argparse.Namespace) -> list[tuple[Experiment, str]]:
    return [
        (Experiment("ns", "Non-streaming", False, args.concurrency, args.ns_requests, args.bound, bracket=False),
         "request"),
        (Experiment("s", f"Streaming ({args.stream_reply_tokens}-token replies)", True, args.concurrency,
                    args.stream_requests, args.bound, bracket=False), "stream"),
    ]


def report(args: argparse.Namespace, conv: Conversation, results: list[ModeResult], checks: list[str],
           load_before: float, profiles: dict[str, str]) -> None:
    print(f"# bench/observability.py: {args.concurrency} clients, {args.turns}-turn sessions, replies of "
          f"{len(conv.ns_reply_ids)} tokens (non-streaming) / {len(conv.stream_reply_ids)} (streaming), parse backend "
          f"`{BACKEND}`, {args.rounds} rounds, {args.ns_requests} requests / {args.stream_requests} streams per "
          f"client and phase; load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; "
          f"{os.cpu_count()} cores\n")
    print("Configurations checked:")
    print("\n".join(checks) + "\n")
    print("## Proxy CPU per answer, ratio to off (same run)\n")
    head = " | ".join(f"{m.title}: CPU ms/{m.unit} | ratio" for m in results)
    print(f"| configuration | flags | {head} |")
    print("|---|---|" + "---:|---:|" * len(results))
    for config, (label, flags) in CONFIGURATIONS.items():
        cells = []
        for m in results:
            cpu = statistics.mean(m.cpu(config))
            ratio = "1 (baseline)" if config == "off" else f"**{m.ratio(config):.3f}**"
            cells += [f"{cpu:.3f}", ratio]
        print(f"| {label} | `{' '.join(flags)}` | " + " | ".join(cells) + " |")
    print()
    for m in results:
        spans = "; ".join(
            f"{CONFIGURATIONS[c][0]} {min(r):.3f}-{max(r):.3f}" for c in CONFIGURATIONS if c != "off"
            for r in [m.bracketed(c)] if r)
        print(f"- {m.title}: A/A noise (off phases from their mean) up to {100 * m.off_spread():.1f}%; each "
              f"phase against the two off phases around it: {spans}")
    if profiles:
        label = CONFIGURATIONS["json"][0]
        print(f"\n## Share of the proxy's CPU samples in metrics and log code ({label}, py-spy)\n")
        print("| mode | samples | metrics | logs | both |")
        print("|---|---:|---:|---:|---:|")
        for title, raw in profiles.items():
            total, shares = profile_shares(raw)
            print(f"| {title} | {total} | {100 * shares['metrics']:.2f}% | {100 * shares['logs']:.2f}% | "
                  f"**{100 * sum(shares.values()):.2f}%** |")
    print("\nPhases in the order run:\n")
    for m in results:
        for _config, p in m.phases:
            cut = "" if p.load.requests >= m.expected else f" (CUT by the {args.bound:g} s bound)"
            print(f"- {p.name}: {p.tally.answered} answers, {p.load.errors} HTTP errors, {p.tally.bad} bad in "
                  f"{p.load.seconds:.1f} s{cut}; proxy {p.cpu_ms('proxy'):.3f} CPU ms/{m.unit}, {p.cores:.2f} "
                  f"cores used by the run's processes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--bound", type=float, default=60.0, help="seconds a phase may last at most")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of (metrics, json, off) after the first off")
    add_conversation_arguments(parser)
    parser.add_argument("--ns-requests", type=int, default=32, help="requests per client and phase")
    parser.add_argument("--stream-requests", type=int, default=6, help="streams per client and phase")
    parser.add_argument("--warmup-requests", type=int, default=8, help="per client, one unmeasured phase per proxy")
    parser.add_argument("--py-spy", metavar="PATH", help="py-spy binary: after the measured phases, profile one more "
                        "phase of the JSON configuration per mode and report the share of samples in metrics and "
                        "log code (py-spy is not a dependency of the project)")
    parser.add_argument("--profile-phases", type=int, default=4, help="a profiled phase has the requests of this "
                        "many measured phases")
    parser.add_argument("--keep-logs", action="store_true", help="keep the server logs and the script; print where")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]

    modes = experiments(args)
    order = schedule(args.rounds)
    slots = labels(order)
    warmup = Experiment("warm", "", False, args.concurrency, args.warmup_requests, args.bound, bracket=False)
    tokenizer = load_tokenizer()
    conv = Conversation.build(tokenizer, args.concurrency, args.turns, args.ns_reply_tokens, args.stream_reply_tokens)
    tmp = Path(tempfile.mkdtemp(prefix="dressage-observability-"))
    # a profiled phase is --profile-phases measured phases long (more samples, the same requests)
    profiled = [attrs.evolve(e, per_client=e.per_client * args.profile_phases) for e, _ in modes]
    write_script(tmp / "script.jsonl", conv, [e for e, _ in modes], slots)
    for name, exps, targets in (("warmup", [warmup], list(CONFIGURATIONS)), ("profile", profiled, ["profile"])):
        write_script(tmp / f"{name}.jsonl", conv, exps, targets)
        with (tmp / "script.jsonl").open("a") as script:
            script.write((tmp / f"{name}.jsonl").read_text())
    procs: dict[str, subprocess.Popen] = {}
    ports: dict[str, int] = {}
    try:
        start_engine_and_proxies(procs, ports, tmp, {c: [*BACKEND_FLAGS[BACKEND], *flags]
                                                     for c, (_label, flags) in CONFIGURATIONS.items()})
        pids = {name: proc.pid for name, proc in procs.items()}

        async def run_all() -> tuple[list[ModeResult], list[str], dict[str, str]]:
            sent = dict.fromkeys(CONFIGURATIONS, 0)

            async def phase(exp: Experiment, slot: str, config: str) -> Phase:
                result = await run_phase(exp.phase_name(slot), config, exp.stream, ports[config], pids, conv,
                                         exp.clients, exp.per_client, exp.seconds)
                sent[config] += result.load.requests
                print(f"  {result.name}: {result.tally.answered} answers, proxy {result.cpu_ms('proxy'):.3f} CPU "
                      f"ms/answer", file=sys.stderr, flush=True)
                return result

            for config in CONFIGURATIONS:
                await phase(warmup, config, config)
            results = []
            for exp, unit in modes:
                phases = [(config, await phase(exp, slot, config)) for config, slot in zip(order, slots)]
                results.append(ModeResult(exp.title, unit, exp.clients * exp.per_client, phases))
            checks = await check_configurations(ports, sent, tmp)
            profiles = {}
            for exp in profiled if args.py_spy else ():
                profiles[exp.title] = await profiled_phase(
                    args.py_spy, pids["proxy-json"], tmp / f"profile-{exp.key}.txt",
                    lambda exp=exp: phase(exp, "profile", "json"))
            return results, checks, profiles

        results, checks, profiles = trio.run(run_all)
        for name, proc in procs.items():
            if proc.poll() is not None:
                checks.append(f"- {name} exited with {proc.returncode} during the run FAILED")
        report(args, conv, results, checks, load_before, profiles)
    finally:
        stop_servers(procs, tmp, args.keep_logs)


if __name__ == "__main__":
    main()
