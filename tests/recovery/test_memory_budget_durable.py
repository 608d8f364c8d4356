"""--memory-budget bounds what the process holds: a durable store's segments are on disk and do not count."""

from __future__ import annotations

from pathlib import Path

from proxy.controllers.session_registry import SessionRegistry
from proxy.families import load_tito_tokenizer
from proxy.trajectory.memory_store import InMemoryTrajectoryStore
from proxy.trajectory.stores import open_store

SEGMENT = {"trajectory_id": "s:0", "token_ids": list(range(1000)), "text": "x" * 10_000}


async def test_a_durable_stores_segments_do_not_count_against_the_memory_budget(qwen3_path: Path, tmp_path: Path):
    tokenizer = load_tito_tokenizer("qwen3", qwen3_path)
    async with open_store(f"sqlite:///{tmp_path / 't.sqlite3'}") as durable:
        await durable.write("s", [SEGMENT], result={})
        on_disk = SessionRegistry(tokenizer, durable)
        assert (await durable.statistics()).bytes > 10_000
        assert await on_disk.approximate_bytes() == on_disk.held_bytes()
        assert (await on_disk.store_statistics()).approximate_bytes == on_disk.held_bytes()
    memory = InMemoryTrajectoryStore()
    await memory.write("s", [SEGMENT], result={})
    in_process = SessionRegistry(tokenizer, memory)
    assert await in_process.approximate_bytes() == in_process.held_bytes() + (await memory.statistics()).bytes
