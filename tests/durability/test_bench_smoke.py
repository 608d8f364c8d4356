"""The suite's bounded runs of ``bench/store_throughput.py`` and ``bench/fleet_throughput.py`` (``--smoke``): a
few sessions per phase, one round, no figure asserted. They check that the benchmarks still run end to end against
the current proxy (real processes on real stores, the fleet behind a real HAProxy over a real PostgreSQL) with no
failed request, and print their tables. The figures are the full runs', in docs/benchmarks.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.debian_packages import PackageUnavailable, ensure_installed
from tests.postgres_server import ensure_postgres_binaries

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _run(script: str) -> str:
    run = subprocess.run([sys.executable, str(BENCH / script), "--smoke"], capture_output=True, text=True,
                         timeout=600)
    # The benchmark exits 1 when a request failed or a phase committed nothing.
    assert run.returncode == 0, f"{script} --smoke failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run.stdout


def test_the_store_bench_runs_memory_and_sqlite_without_errors() -> None:
    out = _run("store_throughput.py")
    for row in ("| memory |", "| sqlite |"):
        assert row in out, out


def test_the_fleet_bench_runs_behind_haproxy_over_postgresql_without_errors() -> None:
    try:
        ensure_postgres_binaries()
        ensure_installed("haproxy", Path("/usr/sbin/haproxy"), print)
    except PackageUnavailable as error:
        pytest.skip(f"NO POSTGRESQL OR HAPROXY, the fleet bench is unchecked: {error}")
    out = _run("fleet_throughput.py")
    for row in ("| 1 |", "| 2 |"):
        assert row in out, out
    assert "Projection from per-step CPU" in out, out
