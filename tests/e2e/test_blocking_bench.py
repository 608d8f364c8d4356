"""The suite's bounded run of ``bench/blocking.py``: tiny prompts, a short idle phase, no timing asserted.

It checks that the benchmark still runs end to end against the current proxy (a real ``dressage-proxy`` process
on its embedded engine, as the full benchmark starts it) and prints its table and ratio; the figures themselves
are measured by the full run and recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "blocking.py"


def test_the_blocking_bench_runs_and_reports_its_ratio():
    run = subprocess.run(
        [sys.executable, str(BENCH), "--prompt-mb", "0.08", "--prompts", "2", "--concurrency", "2",
         "--idle-seconds", "0.5", "--bound", "120"],
        capture_output=True, text=True, timeout=240,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "| idle |" in run.stdout and "| large prompts arriving |" in run.stdout
    assert "loaded p99 / idle p99" in run.stdout
    assert "probe errors" not in run.stdout
    # both large requests were answered (0.08 MB fits the engine's window: 200)
    assert run.stdout.count("200 ") == 2, run.stdout
