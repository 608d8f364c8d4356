"""One contract, every back end: each test here runs on the memory store (the reference), SQLite (a file in
tmp_path) and PostgreSQL (a fresh database on the real server of ``tests/postgres_server.py``).

A test gets ``backend`` (what to open, and a fake clock it advances to expire leases without waiting) and usually
``store`` (that back end, open for the test). ``backend.open()`` opens it again: for the durable ones, the same file
or database (a restart); the memory store has nothing to reopen, so tests of reopening ask for ``durable_backend``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from proxy.trajectory.memory_store import InMemoryTrajectoryStore
from proxy.trajectory.store import TrajectoryStore
from proxy.trajectory.stores.postgres_store import open_postgres_store
from proxy.trajectory.stores.sqlite_store import open_sqlite_store
from tests.postgres_server import PostgresServer, postgres_server  # noqa: F401 - the session fixture

BACKENDS = ("memory", "sqlite", "postgresql")


class Clock:
    """Seconds since the epoch that only move when a test says so."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@attrs.define
class Backend:
    """A back end under test: its kind, where it lives, and the clock its stores use."""

    kind: str
    # sqlite: the file; postgresql: the database's URL; memory: None
    target: Any = None
    clock: Clock = attrs.field(factory=Clock)
    _memory: InMemoryTrajectoryStore | None = None

    @property
    def durable(self) -> bool:
        return self.kind != "memory"

    @contextlib.asynccontextmanager
    async def open(self, **options: Any) -> AsyncIterator[TrajectoryStore]:
        """The back end's store for the block (closed after it, as ``open_store`` does)."""
        if self.kind == "memory":
            if self._memory is None:
                self._memory = InMemoryTrajectoryStore(clock=self.clock, wall_clock=self.clock, **options)
            yield self._memory
            return
        if self.kind == "sqlite":
            store = await open_sqlite_store(self.target, clock=self.clock, **options)
        else:
            store = await open_postgres_store(self.target, "postgresql://test", clock=self.clock, **options)
        try:
            yield store
        finally:
            await store.flush()
            await store.aclose()


def make_backend(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if kind == "sqlite":
        return Backend(kind, tmp_path / "store" / "trajectories.sqlite3")
    if kind == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        return Backend(kind, server.fresh_database("contract"))
    return Backend(kind)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request.param, request, tmp_path)


@pytest.fixture(params=BACKENDS[1:])
def durable_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request.param, request, tmp_path)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[TrajectoryStore]:
    async with backend.open() as opened:
        yield opened


def segments(session_id: str, n: int, tokens: int = 3) -> list[dict[str, Any]]:
    """``n`` segments of a session, ``tokens`` token ids each."""
    return [{"trajectory_id": f"{session_id}:{i}", "parent_traj_id": session_id, "token_ids": list(range(tokens)),
             "messages": [{"role": "user", "content": f"turn {i} of {session_id}"}]} for i in range(n)]


def ids(result: Any) -> list[str]:
    """The trajectory ids of a read's segments, in order."""
    return [segment["trajectory_id"] for segment in result.segments]
