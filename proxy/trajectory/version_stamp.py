"""``VersionStamp``: the rollout epoch and weight version a step was generated under (spec 7)."""

from __future__ import annotations

import attrs


@attrs.frozen
class VersionStamp:
    """The rollout epoch and weight version a step was generated under (spec 7, without partial rollout).

    ``weight_version`` None means "not known yet" (the check before generation knows only the gate's epoch) and
    matches any version.
    """

    epoch: int
    weight_version: str | None = None

    def matches(self, other: VersionStamp) -> bool:
        """Same epoch, and the same version where both are known."""
        if self.epoch != other.epoch:
            return False
        mine, theirs = self.weight_version, other.weight_version
        return mine is None or theirs is None or mine == theirs

    def __str__(self) -> str:
        version = "unknown version" if self.weight_version is None else f"weight version {self.weight_version!r}"
        return f"rollout epoch {self.epoch}, {version}"


__all__ = ["VersionStamp"]
