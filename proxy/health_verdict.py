"""What ``/health`` and ``/ready`` answer, decided from a snapshot of the service (pure: no I/O, no clock).

``GET /health`` (``proxy/routes/info.py``) is for people and monitoring: ``ok``, or ``degraded`` with every reason
that holds. ``GET /ready`` is Kubernetes-style readiness: 200 when the proxy should get new agent traffic, 503 with
the reasons when not. The two differ on purpose: a pause for a weight update is normal operation (healthy) but the
proxy cannot serve new generations until the resume (not ready); a stuck pause or a memory budget overrun is worth
a look but does not stop the proxy from serving (degraded, still ready).

Reasons (stable strings, in this order):

| reason | /health | /ready | when |
|---|---|---|---|
| ``upstream_unreachable`` | degraded | not ready | SGLang did not answer ``/model_info`` within the probe's bound |
| ``pause_stuck`` | degraded | | a pause has been in progress longer than ``--pause-abort-timeout`` (a generation did not answer its forced cut: a bug) |
| ``memory_budget_exceeded`` | degraded | | sessions and the store hold more than ``--memory-budget`` (approximate bytes) |
| ``paused`` / ``pausing`` | | not ready | the rollout gate is not RUNNING (a weight update) |
| ``draining`` | | not ready | shutting down: in-flight generations finish, new ones are refused |
"""

from __future__ import annotations

import attrs

#: the gate state in which new generations run (``proxy/controllers/gate.py``'s report)
RUNNING = "RUNNING"


@attrs.frozen
class ServiceSnapshot:
    """What the verdicts look at, gathered by the route."""

    upstream_reachable: bool
    #: the rollout gate's state: ``RUNNING``, ``PAUSING`` or ``PAUSED``
    gate_state: str
    #: how long the current pause has been in progress (0 when none is)
    pausing_seconds: float
    #: the bound after which a pause in progress is stuck (``--pause-abort-timeout``)
    pause_abort_timeout: float
    #: approximate bytes sessions and the store hold; None: not known
    bytes_held: int | None
    #: ``--memory-budget``; None: no budget
    memory_budget: int | None
    #: the proxy is shutting down
    draining: bool


@attrs.frozen
class Verdict:
    ok: bool
    reasons: tuple[str, ...]


def health_verdict(snapshot: ServiceSnapshot) -> Verdict:
    """``/health``: degraded when the upstream is unreachable, a pause is stuck, or the memory budget is exceeded."""
    reasons = []
    if not snapshot.upstream_reachable:
        reasons.append("upstream_unreachable")
    if snapshot.pausing_seconds > snapshot.pause_abort_timeout:
        reasons.append("pause_stuck")
    if memory_budget_exceeded(snapshot.bytes_held, snapshot.memory_budget):
        reasons.append("memory_budget_exceeded")
    return Verdict(not reasons, tuple(reasons))


def readiness_verdict(snapshot: ServiceSnapshot) -> Verdict:
    """``/ready``: not ready while the upstream is unreachable, the gate is paused or pausing, or draining."""
    reasons = []
    if not snapshot.upstream_reachable:
        reasons.append("upstream_unreachable")
    if snapshot.gate_state != RUNNING:
        reasons.append(snapshot.gate_state.lower())
    if snapshot.draining:
        reasons.append("draining")
    return Verdict(not reasons, tuple(reasons))


def memory_budget_exceeded(bytes_held: int | None, memory_budget: int | None) -> bool:
    """Unknown bytes or no budget: not exceeded (the verdict says only what it knows)."""
    return bytes_held is not None and memory_budget is not None and bytes_held > memory_budget


__all__ = ["ServiceSnapshot", "Verdict", "health_verdict", "memory_budget_exceeded", "readiness_verdict"]
