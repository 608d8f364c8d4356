"""The bounded soak (issue 15 item 3): ``bench/soak.py``'s cycles against ``run_proxy`` on its embedded engine, on
trio's ``MockClock`` (the idle timeout and the tombstone TTL pass in virtual time), with memory checked two ways.

- **Deterministic**: the proxy's own counts and bytes (``/trajectory/stats``: ``registry_sessions``,
  ``registry_bytes``, the store's ``sessions``, ``segments``, ``bytes``) return exactly to the baseline after every
  cycle's drain and tombstone expiry, while at each cycle's peak they do hold the cycle's sessions.
- **RSS** (this process: proxy, engine and client), generous and honest: after two warm-up cycles (the allocator
  grows to one cycle's working set, imports and caches warm up), the settled RSS may not grow by more than twice
  one cycle's working set over the remaining cycles. The working set is the proxy's own estimate of what a cycle
  holds at its peak (``approximate_bytes``: the registry's sessions and the store's segments), floored at 4 MiB
  so that allocator noise (pages returned or not) cannot fail the test. A leak of the kind issue 15 found (every
  cycle's sessions kept) grows RSS by at least about one working set per cycle, i.e. by more than the bound over
  the cycles measured. No wall-clock figure is asserted.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import trio.testing

ROOT = Path(__file__).resolve().parents[2]
CYCLES = 5
WARM_UP = 2
RSS_FLOOR = 4 * 2**20


def load_soak():
    """``bench/soak.py`` (a script, not a package) as a module."""
    spec = importlib.util.spec_from_file_location("bench_soak", ROOT / "bench" / "soak.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.02)


async def test_soak_memory_returns_to_baseline_every_cycle(start_proxy, mock_clock) -> None:
    soak = load_soak()
    # Virtual timeouts long enough that autojumps while requests run never idle a session mid-conversation.
    settings = soak.SoakSettings(sessions=20, steps=2, abandon=4, concurrency=8, idle_timeout=600.0,
                                 tombstone_ttl=600.0)
    proxy = await start_proxy(session_idle_timeout=settings.idle_timeout, tombstone_ttl=settings.tombstone_ttl,
                              engine={"request_log_size": soak.ENGINE_REQUEST_LOG})
    cycles = await soak.soak(proxy.url, settings, lambda done: done < CYCLES, lambda cycle: None)
    assert len(cycles) == CYCLES
    keys = ("registry_sessions", "registry_tombstones", "registry_bytes", "sessions", "segments", "bytes",
            "approximate_bytes")
    for cycle in cycles:
        # At the peak every session of the cycle is held (finalized, every abandoned one by the reaper), and counted.
        assert cycle.idle_finalized == len(range(0, settings.sessions, settings.abandon))
        assert cycle.peak["registry_sessions"] == cycle.peak["sessions"] == settings.sessions
        assert cycle.peak["bytes"] > 0 and cycle.peak["registry_bytes"] > 0
        # Settled: exactly the baseline of an empty proxy.
        assert {key: cycle.settled[key] for key in keys} == dict.fromkeys(keys, 0)
    last = cycles[-1].settled
    assert last["idle_finalized_sessions"] == sum(cycle.idle_finalized for cycle in cycles)
    assert last["expired_tombstones"] == last["written_sessions"] == settings.sessions * CYCLES
    working_set = max(RSS_FLOOR, max(cycle.peak["approximate_bytes"] for cycle in cycles))
    growth = cycles[-1].settled_rss - cycles[WARM_UP].settled_rss
    rss = [round(cycle.settled_rss / 2**20, 1) for cycle in cycles]
    assert growth <= 2 * working_set, f"settled RSS per cycle (MiB): {rss}; working set {working_set} bytes"
