"""kill -9 at random points of the scripted workload (issue 16, "Tests"): 0 lost, 0 duplicated steps, the export
byte-identical to a run that was never killed.

A real ``dressage-proxy`` process on a SQLite store is killed with SIGKILL several times while 12 agents hold their
conversations, finalize and a trainer drains them (``tests/durability/workload.py``); each time it starts again on
the same store file and the agents carry on (a connection error or a 5xx: the same request again once it is back).
The kills are seeded (where in the run, in completed HTTP exchanges, plus a few milliseconds) so a failure can be
run again; ``tests/durability/compare.py`` says what "the same" means: exact, commit ids included (a request whose
step was durable when a kill landed is answered after the restart from that step, under its Idempotency-Key).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.durability import harness
from tests.durability.compare import compare
from tests.durability.conftest import sqlite_url

#: kills per run, and the seeds of the runs (a longer soak: tests/durability/soak.py)
KILLS = 5
SEEDS = (16,)


@pytest.mark.parametrize("seed", SEEDS)
async def test_random_kills_lose_and_duplicate_nothing(reference_run, qwen3_path: Path, tmp_path: Path,
                                                       seed: int) -> None:
    reference = await reference_run()
    killed = await harness.run(sqlite_url(tmp_path), qwen3_path, tmp_path / "logs", kills=KILLS, seed=seed)
    # Every planned kill happened, by the test (no death of its own), and the agents noticed them.
    assert [d.killed_by_test for d in killed.deaths] == [True] * KILLS, killed.deaths
    assert killed.retries > 0
    comparison = compare(reference.outcome, killed.outcome)
    assert comparison.identical, f"seed {seed}, {KILLS} kills:\n{comparison.describe()}\n{killed.logs}"
