"""Comparing a run that was killed with the run that never was: lost and duplicated steps, and the export's bytes.

Per session (its segments by ``trajectory_id``, each as canonical JSON):

- **lost / duplicated steps**: the session's trained steps (each segment's steps with ``trained: true``, as canonical
  JSON without the ids that name commits) as a multiset, reference minus run (lost) and run minus reference
  (duplicated); also whole segments missing or extra;
- **bytes**: every segment byte-identical to the reference, commit ids (``step_ids``, ``tip_step``, each step's
  ``step_id`` and ``generation_id``) included, and every finalize answer equal (its ``steps`` count included). No
  exception: a step that was durable when the proxy died but whose answer never reached the agent is answered, when
  the agent sends its request again under the same ``Idempotency-Key``, from the committed step (the key is journaled
  with it, ``proxy/controllers/idempotency.py``), so the retry adds no step and no id moves.
"""

from __future__ import annotations

import collections
import json
from typing import Any

import attrs

from tests.durability.workload import Outcome, canonical

#: the fields of a step that name its commit: left out when steps are counted as lost or duplicated (a step is the
#: same training data whatever its ids; the segments' bytes, ids included, are compared separately)
STEP_COMMIT_IDS = ("step_id", "generation_id")


def _trained_steps(segments: dict[str, bytes], session_id: str) -> collections.Counter[bytes]:
    steps: collections.Counter[bytes] = collections.Counter()
    for data in segments.values():
        segment = json.loads(data)
        if segment["parent_traj_id"] != session_id:
            continue
        for step in segment["steps"]:
            if step.get("trained"):
                steps[canonical({k: v for k, v in step.items() if k not in STEP_COMMIT_IDS})] += 1
    return steps


@attrs.frozen
class Comparison:
    """How a run's export differs from the reference's (all empty or zero: identical)."""

    lost_steps: int
    duplicated_steps: int
    missing_segments: tuple[str, ...]
    extra_segments: tuple[str, ...]
    #: segments whose bytes differ (commit ids included)
    different_segments: tuple[str, ...]
    #: finalize answers that differ (the committed-step count included)
    different_finalize: tuple[str, ...]
    #: segments read twice with different bytes
    changed_rereads: tuple[str, ...]
    #: segments or leases left in the store after everything was drained
    left_in_store: dict[str, int]
    #: finalized sessions the proxy did not know any more when the trainer read them
    unknown_sessions: tuple[str, ...] = ()

    @property
    def identical(self) -> bool:
        return not (self.lost_steps or self.duplicated_steps or self.missing_segments or self.extra_segments
                    or self.different_segments or self.different_finalize or self.changed_rereads
                    or any(self.left_in_store.values()) or self.unknown_sessions)

    def describe(self) -> str:
        return "\n".join(f"  {field.name}: {getattr(self, field.name)!r}" for field in attrs.fields(Comparison))


def compare(reference: Outcome, run: Outcome) -> Comparison:
    lost = duplicated = 0
    different: list[str] = []
    different_finalize: list[str] = []
    for session_id, expected in reference.finalized.items():
        got = run.finalized.get(session_id)
        ref_steps, run_steps = _trained_steps(reference.segments, session_id), _trained_steps(run.segments, session_id)
        lost += sum((ref_steps - run_steps).values())
        duplicated += sum((run_steps - ref_steps).values())
        if got is None:
            different_finalize.append(session_id)
            continue
        if got != expected:
            different_finalize.append(session_id)
        for tid in expected["trajectory_ids"]:
            if tid not in run.segments or tid not in reference.segments:
                continue
            if run.segments[tid] != reference.segments[tid]:
                different.append(tid)
    stats = run.final_stats
    return Comparison(
        lost_steps=lost, duplicated_steps=duplicated,
        missing_segments=tuple(sorted(set(reference.segments) - set(run.segments))),
        extra_segments=tuple(sorted(set(run.segments) - set(reference.segments))),
        different_segments=tuple(different), different_finalize=tuple(different_finalize),
        changed_rereads=tuple(tid for tid, _, _ in run.changed),
        left_in_store={"segments": stats.get("segments", -1), "leased_segments": stats.get("leased_segments", 0)},
        unknown_sessions=tuple(run.unknown_sessions),
    )


__all__ = ["Comparison", "compare"]
