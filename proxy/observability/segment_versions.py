"""How stale a segment's tokens are: the spread of the weight versions that produced the tokens it trains.

``dressage_segment_weight_version_spread`` observes, per exported segment, the newest minus the oldest weight version
among the generated tokens the segment trains (its own chain's steps: a forked prefix is context there and trained in
the segment that owns it, ``proxy/trajectory/export.py``). Versions are SGLang's ``weight_version`` strings: when
every one is an integer (``"3"``, the trainer's step) the spread is their difference; otherwise it is the number of
distinct versions minus one (``"step-7"`` and ``"step-9"`` spread 1). A segment none of whose trained tokens has a
known version is not observed (there is nothing to measure).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from proxy.trajectory.export import segment_tips
from proxy.trajectory.tokens import Step


def trained_versions(end: Step) -> set[str]:
    """The known weight versions of the generated tokens the segment ending at ``end`` trains: the steps of its own
    chain, walked back from its end (a chain's steps are contiguous on the path: a fork starts a new chain)."""
    versions: set[str] = set()
    step: Step | None = end
    while step is not None and step.chain_id == end.chain_id:
        versions.update(version for version, _ in step.span.version_runs if version is not None)
        step = step.base
    return versions


def version_spread(versions: Iterable[str]) -> int | None:
    """Newest minus oldest version (integers), else distinct versions minus one; None for no version."""
    distinct = set(versions)
    if not distinct:
        return None
    try:
        numbers = [int(version) for version in distinct]
    except ValueError:
        return len(distinct) - 1
    return max(numbers) - min(numbers)


def segment_version_spreads(tips: Sequence[Step], export_all_checkpoints: bool) -> list[int | None]:
    """One spread per segment the export builds from ``tips`` (the same segments, ``segment_tips``)."""
    return [version_spread(trained_versions(end)) for end in segment_tips(tips, export_all_checkpoints)]


__all__ = ["segment_version_spreads", "trained_versions", "version_spread"]
