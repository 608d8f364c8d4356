"""Fixtures of the kill -9 tests: the never-killed reference run (once per test process) and durable store URLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.durability import harness


def sqlite_url(folder: Path) -> str:
    return f"sqlite:///{folder / 't.sqlite3'}"


_REFERENCE: dict[str, harness.Run] = {}


@pytest.fixture
def reference_run(qwen3_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """``await reference_run()``: the workload never killed, on a SQLite store (run once, then reused)."""

    async def get() -> harness.Run:
        if "run" not in _REFERENCE:
            folder = tmp_path_factory.mktemp("reference")
            _REFERENCE["run"] = await harness.run(sqlite_url(folder), qwen3_path, folder / "logs")
        return _REFERENCE["run"]

    return get
