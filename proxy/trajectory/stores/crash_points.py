"""Named points where a test kills the proxy with SIGKILL, to prove a crash there loses nothing (issue 16's tests).

``DRESSAGE_CRASH_POINT=NAME[:N]`` in the proxy's environment kills the process the N-th time (default the first) it
passes :func:`crash_point` with that name. Unset (always, outside those tests), a call is one dict lookup.

Points (where they are called):

==========================  ========================================================================================
``append_step.before``      a step's journal record is about to be written (the step is not durable yet)
``append_step.after``       the record is durable, the commit's response is not released yet
``write.before``            finalize's transaction is about to run (the journal still holds the steps)
``write.after``             the segments are stored, finalize's response is not released yet
``acknowledge.after``       a lease's segments were deleted, the acknowledgement's response is not released yet
``export.batch.after``      ``dressage-proxy export`` wrote a batch to its partial file, the export is not complete
==========================  ========================================================================================
"""

from __future__ import annotations

import os
import signal

#: the environment variable that arms one point
CRASH_POINT_ENV = "DRESSAGE_CRASH_POINT"


def _armed() -> tuple[str, int] | None:
    value = os.environ.get(CRASH_POINT_ENV)
    if not value:
        return None
    name, _, count = value.partition(":")
    return name, int(count) if count else 1


_ARMED = _armed()
_passed: dict[str, int] = {}


def crash_point(name: str) -> None:
    """SIGKILL this process if ``name`` is the armed point and this is its armed passage."""
    if _ARMED is None or _ARMED[0] != name:
        return
    _passed[name] = _passed.get(name, 0) + 1
    if _passed[name] == _ARMED[1]:
        os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["CRASH_POINT_ENV", "crash_point"]
