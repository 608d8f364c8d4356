"""kill -9 at every named crash point (``proxy/trajectory/stores/crash_points.py``), then restart and complete.

The first proxy process runs with ``DRESSAGE_CRASH_POINT=NAME:N`` and SIGKILLs itself the N-th time it passes the
point (N picked to land in the middle of the workload); the next process, started on the same SQLite file, completes
the run. Each run is compared with the never-killed reference (``tests/durability/compare.py``): 0 lost, 0
duplicated steps, identical bytes. Mid-commit (``append_step.*``) and mid-finalize (``write.*``) are the issue's
explicit asks.

Exactness, commit ids included: a session whose request was in flight before its step was durable retries it and
gets the same answer under the same ids. A session whose step was durable but whose answer had not left when the
process died (the armed ``append_step.after`` passage, and with any point, the steps of other sessions the store had
just committed) sends its request again under the same ``Idempotency-Key``: the restarted proxy restores the key
from the journal and answers from the committed step (``Idempotent-Replayed: true``), with no new generation and
no new step, so the export and the finalize answers equal the never-killed run's exactly.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from proxy.trajectory.stores import crash_points
from tests.durability import harness
from tests.durability.compare import compare
from tests.durability.conftest import sqlite_url

#: point -> the passage that kills (the middle of the workload: ~50 commits, 12 finalizes, ~15 acknowledgements)
PASSAGES = {
    "append_step.before": 20,
    "append_step.after": 20,
    "write.before": 5,
    "write.after": 5,
    "acknowledge.after": 6,
}


#: points outside the proxy process, each killed by a test of its own program
ELSEWHERE = {"export.batch.after": "tests/export/test_export_process.py (dressage-proxy export)"}


def named_points() -> list[str]:
    """The points ``crash_points.py``'s docstring lists."""
    return re.findall(r"^``([a-z_]+\.[a-z_]+)``", crash_points.__doc__ or "", re.MULTILINE)


def test_every_named_crash_point_is_exercised() -> None:
    assert named_points() and set(named_points()) <= set(PASSAGES) | set(ELSEWHERE), (
        f"crash points without a kill test: {sorted(set(named_points()) - set(PASSAGES) - set(ELSEWHERE))}")


@pytest.mark.parametrize("point", sorted(PASSAGES))
async def test_a_crash_at_the_point_loses_and_duplicates_nothing(reference_run, qwen3_path: Path, tmp_path: Path,
                                                                point: str) -> None:
    reference = await reference_run()
    armed = f"{point}:{PASSAGES[point]}"
    crashed = await harness.run(sqlite_url(tmp_path), qwen3_path, tmp_path / "logs", crash_point=armed)
    # The process died there, by itself, once (a point never reached would make this test pass for nothing).
    assert [(d.generation, d.killed_by_test, d.returncode) for d in crashed.deaths] == [(1, False, -9)], (
        f"{armed}: deaths {crashed.deaths}\n{crashed.logs}")
    comparison = compare(reference.outcome, crashed.outcome)
    assert comparison.identical, f"{armed}:\n{comparison.describe()}\n{crashed.logs}"
    if point == "append_step.after":
        # The killed commit's step was durable and its answer lost: its retry was answered from the step.
        assert crashed.replayed >= 1, f"{armed}: no answer was replayed\n{crashed.logs}"
