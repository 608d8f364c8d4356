"""What a read of finalized segments gives its caller: the segments as a ``list``, plus the lease of a draining read.

One definition for both sides of ``POST /trajectory/read``: :meth:`SessionRegistry.read
<proxy.controllers.session_registry.SessionRegistry.read>` returns it to the route (and to in-process callers), and
:class:`proxy.client.ProxyClient` builds it from the answer. A ``list`` subclass on purpose: every caller that
read segments before reads became two-phase (``(segment,) = await registry.read(...)``, ``== []``, iteration)
keeps working, and a draining caller finds the lease it must acknowledge on the same object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class TrajectoryRead(list):  # list[dict[str, Any]]
    """The segment dicts (this object is their list, in finalize order) and, for a draining read, its lease.

    ``lease_id`` is None when the read leased nothing (no drain, or nothing left to drain); ``lease_seconds`` is
    how long the lease holds before its unacknowledged segments are readable again.
    """

    lease_id: str | None
    lease_seconds: float | None
    #: a draining read: segments it skipped because another reader's lease holds them (not in the answer's JSON)
    skipped_leased: int

    def __init__(
        self, segments: Iterable[dict[str, Any]] = (), lease_id: str | None = None,
        lease_seconds: float | None = None, *, skipped_leased: int = 0,
    ) -> None:
        super().__init__(segments)
        self.lease_id = lease_id
        self.lease_seconds = lease_seconds if lease_id is not None else None
        self.skipped_leased = skipped_leased

    def __repr__(self) -> str:
        return f"TrajectoryRead({len(self)} segment(s), lease_id={self.lease_id!r}, lease_seconds={self.lease_seconds})"

    @property
    def trajectory_ids(self) -> list[str]:
        """The ``trajectory_id`` of every segment: unique per segment, the trainer's deduplication key."""
        return [segment["trajectory_id"] for segment in self]

    def answer_json(self, *, drain: bool) -> dict[str, Any]:
        """The ``/trajectory/read`` answer: ``{"data"}``, and for a draining read ``lease_id`` and ``lease_seconds``."""
        answer: dict[str, Any] = {"data": list(self)}
        if drain:
            answer.update(lease_id=self.lease_id, lease_seconds=self.lease_seconds)
        return answer

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> TrajectoryRead:
        """From a ``/trajectory/read`` answer (the lease fields are absent when the read did not drain)."""
        seconds = body.get("lease_seconds")
        return cls(body["data"], body.get("lease_id"), float(seconds) if seconds is not None else None)


__all__ = ["TrajectoryRead"]
