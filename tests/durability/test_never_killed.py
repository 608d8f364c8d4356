"""The harness's own check: the workload run twice, never killed, exports the same bytes, on memory and on SQLite.

The kill -9 tests compare a killed run with a never-killed one byte for byte: that is only meaningful if the
workload is deterministic (the embedded engine's answers depend on the conversation only) and if the durable store
gives back exactly what the memory store does.
"""

from __future__ import annotations

from pathlib import Path

from tests.durability import harness
from tests.durability.compare import compare


async def test_a_never_killed_run_on_memory_exports_what_the_sqlite_reference_does(
    reference_run, qwen3_path: Path, tmp_path: Path
) -> None:
    reference = await reference_run()
    # Never killed: no retry, so nothing replayed (the scripted retries use a new key each).
    assert reference.deaths == () and reference.retries == 0 and reference.replayed == 0
    assert len(reference.outcome.finalized) == 12 and len(reference.outcome.segments) >= 12
    on_memory = await harness.run("memory", qwen3_path, tmp_path / "logs")
    comparison = compare(reference.outcome, on_memory.outcome)
    assert comparison.identical, comparison.describe()
    assert on_memory.outcome.segments == reference.outcome.segments
