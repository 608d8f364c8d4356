"""The report of ``bench/floor_bench.py`` (markdown on stdout, the figures as a dict), the machine it ran on, and
the optional py-spy profile of the proxy over one non-streaming phase."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import shutil
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

PACKAGES = ("trio", "hypercorn", "quart", "quart-trio", "h11", "orjson", "transformers", "tokenizers", "fastapi",
            "uvicorn", "httpx", "httpcore", "litellm", "py-spy")


def machine() -> dict[str, Any]:
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parent, check=False).stdout.strip()
    except OSError:
        commit = ""
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release(),
            "load_average": os.getloadavg()[0], "commit": commit, "versions": versions}


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(args: argparse.Namespace, phases: list[Any], sessions: dict[str, Any], profile: dict[str, Any] | None, *,
           have_gateway: bool, have_litellm: bool) -> dict[str, Any]:
    info = machine()
    print(f"# ./dev bench (bench/floor_bench.py){' --smoke' if args.smoke else ''}\n")
    print(f"machine: {info['cpu']}, {info['cores']} cores, Python {info['python']}, Linux {info['kernel']}, "
          f"load average {info['load_average']:.2f} at the end; commit {info['commit']}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v))
    if not have_gateway:
        print("\n**reference gateway: fastapi/uvicorn/httpx not installed, SKIPPED** "
              "(pip install -e '.[bench]'; ./dev bench installs it)")
    if not have_litellm:
        print("\n**LiteLLM: not installed, skipped** (it is not a dependency; install it to run it side by side)")
    else:
        print("\n**LiteLLM: installed but NOT RUN**: its proxy needs an OpenAI-compatible upstream, and the floor "
              "serves SGLang's /generate only (not wired yet)")

    figures: dict[str, Any] = {"machine": info, "grid": {}, "growth": {}, "memory": {}, "profile": profile}
    keys = sorted(dict.fromkeys(p.shape for p in phases), key=lambda k: (k != "ns", k.split("-")[-1], len(k)))
    targets = [t for t in ("floor", "proxy", "gateway", "litellm") if any(p.target == t for p in phases)]
    print(f"\n## CPU of each server process (/proc utime+stime), {args.rounds} interleaved rounds, "
          f"{args.clients} clients: median of the rounds [min-max]\n")
    print("Non-streaming: ms per request (4-turn sessions, 8-token answers). Streams: µs per streamed token.\n")
    print("| shape | " + " | ".join(targets) + " | proxy / floor | proxy / gateway |")
    print("|---|" + "---:|" * (len(targets) + 2))
    for key in keys:
        stream = key != "ns"
        scale = 1e6 if stream else 1e3
        row: dict[str, list[float]] = {}
        for target in targets:
            row[target] = [scale * p.cpu / p.tokens for p in phases if p.shape == key and p.target == target
                           and p.tokens]
        errors = sum(p.errors for p in phases if p.shape == key)
        cells = [f"{_median(v):.1f} [{min(v):.1f}-{max(v):.1f}]" if v else "n/a" for v in row.values()]
        per_round = {t: row[t] for t in targets}

        def ratio(other: str) -> str:
            if other not in per_round or not per_round[other] or not per_round["proxy"]:
                return "n/a"
            ratios = [a / b for a, b in zip(per_round["proxy"], per_round[other], strict=False) if b]
            return f"**{_median(ratios):.2f}x**" if ratios else "n/a"

        print(f"| {key}{f' ({errors} errors)' if errors else ''} | " + " | ".join(cells)
              + f" | {ratio('floor')} | {ratio('gateway')} |")
        figures["grid"][key] = {"per_round": per_round, "errors": errors,
                                "unit": "us/token" if stream else "ms/request"}
    for mode in ("cumulative", "incremental"):
        long, short = figures["grid"].get(f"s1024-{mode}"), figures["grid"].get(f"s128-{mode}")
        if long and short and long["per_round"].get("proxy") and short["per_round"].get("proxy"):
            # As ratio() above: a round whose short phase read no CPU tick (the smoke's few requests) has no ratio.
            ratios = [a / b for a, b in zip(long["per_round"]["proxy"], short["per_round"]["proxy"], strict=False)
                      if b]
            shown = f"**{_median(ratios):.2f}x**" if ratios else "n/a"
            print(f"\nproxy, {mode} upstream: 1,024-token / 128-token CPU per token = {shown}", end="")
    floor_behind = [1e3 * p.floor_cpu / p.requests for p in phases if p.shape == "ns" and p.target == "proxy"
                    and p.requests]
    if floor_behind:
        print(f"\n\nthe floor's own CPU behind the proxy, non-streaming: {_median(floor_behind):.3f} ms per request")

    window = args.growth_window
    if sessions["growth"]:
        print(f"\n## Per-turn growth: {args.growth_sessions} sessions x {args.growth_turns} turns, "
              f"~{args.growth_user_tokens}-token user turns, 8-token answers\n")
        print(f"| target | ms/request, turns 1-{window} | ms/request, turns {args.growth_turns - window + 1}-"
              f"{args.growth_turns} | last / first | prompt tokens at the end | failed |")
        print("|---|---:|---:|---:|---:|---:|")
    for target, g in sessions["growth"].items():
        per_turn, n = g["per_turn_cpu"], g["sessions"]
        first, last = sum(per_turn[:window]) / (window * n), sum(per_turn[-window:]) / (window * n)
        growth = last / first if first else float("nan")
        print(f"| {target} | {1e3 * first:.2f} | {1e3 * last:.2f} | **x{growth:.2f}** | "
              f"{g['final_prompt_tokens']:.0f} | {g['failures']} |")
        figures["growth"][target] = {"first_ms": 1e3 * first, "last_ms": 1e3 * last, "ratio": growth, **g}
    for target, g in sessions["growth"].items():
        if g.get("last_failure"):
            print(f"\n{target}: the last failed turn (retried): {g['last_failure']}")

    if sessions["memory"]:
        print("\n## Memory: RSS growth of the server process\n")
        print("| target | live 10-turn sessions | KiB per session, first batch | KiB per further session "
              "| sessions of ~20k tokens | tokens held | bytes per token | failed |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for target, m in sessions["memory"].items():
        per_session = m["session_rss_growth"] / m["sessions"] / 1024
        per_token = m["token_rss_growth"] / m["tokens"] if m["tokens"] else float("nan")
        # The second batch of as many sessions, the first still live (floor_bench.py: the caches are full).
        further = m.get("next_session_rss_growth", float("nan")) / m["sessions"] / 1024
        print(f"| {target} | {m['sessions']} ({m['session_tokens'] / m['sessions']:.0f} tokens each) | "
              f"**{per_session:.1f}** | **{further:.1f}** | "
              f"{m['token_sessions']} ({m['tokens'] / max(m['token_sessions'], 1):.0f} "
              f"tokens each) | {m['tokens']} | **{per_token:.1f}** | {m['failures']} |")
        figures["memory"][target] = {**m, "kib_per_session": per_session, "kib_per_further_session": further,
                                     "bytes_per_token": per_token}
    if sessions["memory"]:
        # Issue 21 item 5 reads the further-session column (docs/benchmarks.md, "Item 5's fixed cost").
        print("\nThe fixed cost per live session is the further column: the first batch also fills, once, caches "
              "bounded whatever the sessions (SQLite's page cache, the tokenizer's word cache).")

    if profile:
        print(f"\n## Profile: py-spy of a proxy under the non-streaming load ({profile['samples']} samples; "
              "the trio loop's stacks, start-up excluded)\n")
        print("| function (inclusive) | share |\n|---|---:|")
        for name, share in profile["inclusive"]:
            print(f"| `{name}` | {100 * share:.1f}% |")
        print("\n| function (self) | share |\n|---|---:|")
        for name, share in profile["self"]:
            print(f"| `{name}` | {100 * share:.1f}% |")
    return figures


def py_spy() -> str | None:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return found if Path(found).exists() else None


async def profile(args: argparse.Namespace, ports: dict[str, int], pids: dict[str, int], run_phase: Any,
                  shape: Any, tmp: Path, spy: subprocess.Popen) -> dict[str, Any] | None:
    """The proxy started under ``py-spy record`` (raw collapsed stacks): a warm-up and one non-streaming phase of
    ``args.profile`` seconds, then SIGINT makes py-spy write its file (and stop the proxy)."""
    import signal

    import trio

    kwargs = dict(clients=args.clients, streams=0)
    await run_phase(shape, "proxyprofile", ports, pids, ns_requests=args.clients * 4, seconds=args.profile, **kwargs)
    await run_phase(shape, "proxyprofile", ports, pids, ns_requests=10**6, seconds=args.profile, **kwargs)
    spy.send_signal(signal.SIGINT)
    with trio.fail_after(60):
        while spy.poll() is None:
            await trio.sleep(0.2)
    out = tmp / "profile.txt"
    return summarize(out.read_text()) if out.exists() else None


def summarize(collapsed: str, top: int = 25) -> dict[str, Any]:
    """Inclusive and self shares of the functions in py-spy's raw (collapsed) output."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        # Request handling only: the trio loop's stacks, without the proxy's start-up (imports, tokenizer loading
        # in a worker thread, building the services).
        if _LOOP not in stack or any(marker in stack for marker in _STARTUP):
            continue
        total += count
        frames = [_frame_name(f) for f in stack.split(";")]
        for name in set(frames):
            inclusive[name] += count
        own[frames[-1]] += count
    if not total:
        return {"samples": 0, "inclusive": [], "self": []}
    return {"samples": total,
            "inclusive": [(n, c / total) for n, c in inclusive.most_common(top)],
            "self": [(n, c / total) for n, c in own.most_common(top)]}


_LOOP = "unrolled_run"
_STARTUP = ("_find_and_load", "ProxyServices.build", "freeze_startup_heap")


def _frame_name(frame: str) -> str:
    """``function (path/to/module.py:line)`` -> ``module.py:function``."""
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    return f"{path.rsplit('/', 1)[-1]}:{name}" if path else name
