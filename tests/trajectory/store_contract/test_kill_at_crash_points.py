"""kill -9 at each of the store's crash points, in a real child process, then reopen the store: what a call had
returned before the kill is there, what it had not started is not, and a finalize or an acknowledgement is all or
nothing. (The proxy-level crash tests run whole workloads; these pin the store's own promise.) The SQLite file's
lock goes with the killed process: the reopen is not refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.trajectory.store import ACTIVE, DRAINED, FINALIZED
from proxy.trajectory.stores import open_store
from proxy.trajectory.stores.crash_points import CRASH_POINT_ENV

ROOT = Path(__file__).resolve().parents[3]

# The child: 5 steps, a finalize, a draining read and its acknowledgement, through open_store as the proxy does.
CHILD = """
import sys, trio
from proxy.trajectory.stores import open_store

async def main(url):
    async with open_store(url) as store:
        for step in range(5):
            await store.append_step("s", step, b"step %d" % step)
        segments = [{"trajectory_id": f"s:{i}", "token_ids": [1, 2, 3]} for i in range(2)]
        await store.write("s", segments, result={"segments": 2})
        lease = await store.read(drain=True)
        await store.acknowledge(lease.lease_id)
    print("finished")

trio.run(main, sys.argv[1])
"""

CASES = {
    # point: (journal records left, state, segments left)
    "append_step.before:3": (2, ACTIVE, 0),
    "append_step.after:3": (3, ACTIVE, 0),
    "write.before": (5, ACTIVE, 0),
    "write.after": (0, FINALIZED, 2),
    "acknowledge.after": (0, DRAINED, 0),
}


# Every point on SQLite; on PostgreSQL the two that end a commit (each child costs seconds of imports).
RUNS = [("sqlite", point) for point in CASES] + [("postgresql", "append_step.after:3"), ("postgresql", "write.after")]


@pytest.mark.parametrize(("kind", "point"), RUNS)
async def test_a_kill_at_a_crash_point_keeps_exactly_what_was_committed(kind, point, request, tmp_path):
    if kind == "sqlite":
        store_url = f"sqlite:///{tmp_path / 'crash.sqlite3'}"
    else:
        store_url = request.getfixturevalue("postgres_server").fresh_database("crash")
    child = subprocess.run(
        [sys.executable, "-c", CHILD, store_url], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, CRASH_POINT_ENV: point},
    )
    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stdout, child.stderr[-2000:])
    steps, state, left = CASES[point]
    async with open_store(store_url) as store:
        session = await store.load_session("s")
        assert (session.state, len(session.steps)) == (state, steps)
        assert session.steps == tuple(b"step %d" % step for step in range(steps))
        assert len((await store.read()).segments) == left
        if state != ACTIVE:
            assert session.result == {"segments": 2}
