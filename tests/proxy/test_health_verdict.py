"""The ``/health`` and ``/ready`` verdicts, value by value (``proxy/health_verdict.py``)."""

from __future__ import annotations

import attrs
import pytest

from proxy.health_verdict import ServiceSnapshot, Verdict, health_verdict, readiness_verdict

GiB = 1024**3
FINE = ServiceSnapshot(upstream_reachable=True, gate_state="RUNNING", pausing_seconds=0.0, pause_abort_timeout=30.0,
                       bytes_held=GiB, memory_budget=8 * GiB, draining=False)


def test_all_fine_is_ok_and_ready() -> None:
    assert health_verdict(FINE) == readiness_verdict(FINE) == Verdict(True, ())


@pytest.mark.parametrize(
    ("change", "health", "ready"),
    [
        ({"upstream_reachable": False}, ("upstream_unreachable",), ("upstream_unreachable",)),
        ({"gate_state": "PAUSED"}, (), ("paused",)),
        ({"gate_state": "PAUSING", "pausing_seconds": 2.0}, (), ("pausing",)),
        ({"gate_state": "PAUSING", "pausing_seconds": 30.5}, ("pause_stuck",), ("pausing",)),
        ({"bytes_held": 8 * GiB + 1}, ("memory_budget_exceeded",), ()),
        ({"bytes_held": 8 * GiB}, (), ()),  # at the budget is within it
        ({"bytes_held": None}, (), ()),  # unknown: no claim either way
        ({"bytes_held": 100 * GiB, "memory_budget": None}, (), ()),  # no budget
        ({"draining": True}, (), ("draining",)),
        (
            {"upstream_reachable": False, "gate_state": "PAUSING", "pausing_seconds": 31.0, "bytes_held": 9 * GiB,
             "draining": True},
            ("upstream_unreachable", "pause_stuck", "memory_budget_exceeded"),
            ("upstream_unreachable", "pausing", "draining"),
        ),
    ],
)
def test_each_condition_gives_its_reasons(change, health, ready) -> None:
    snapshot = attrs.evolve(FINE, **change)
    assert health_verdict(snapshot) == Verdict(not health, health)
    assert readiness_verdict(snapshot) == Verdict(not ready, ready)
