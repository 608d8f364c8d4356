"""When an idle session is finalized and when a tombstone expires: pure decisions over timestamps (no trio).

The registry records, per session, its last activity (a request arriving, a generation committing or dropping) and
the time it released its data for good (:meth:`~proxy.controllers.session_registry.SessionRegistry` sets it when
the session holds nothing any more: finalized with no segment, its last segment drained, or aborted). The reaper
(``session_reaper.py``) asks the registry to apply this policy periodically; the registry asks it again under the
session's lock, so a request that arrives between the sweep and the lock keeps its session.

- ``--session-idle-timeout`` (``idle_timeout``, None: never): a session idle that long is finalized (the session
  machine's ``IdleTimeout``, which leaves a session with a generation in flight alone).
- ``--tombstone-ttl`` (``tombstone_ttl``, None: never): a released session's tombstone (kept so that a late step
  is refused with ``session_finalized`` instead of starting the session again) is forgotten that long after the
  release. A finalized session whose segments still wait in the store keeps its tombstone until they are drained:
  forgetting it would let a late step start a new session of the same id, whose finalize would replace them.
"""

from __future__ import annotations

import attrs

#: the reaper sweeps this many times per (shortest) timeout, so a deadline is overrun by at most 1/SWEEPS of it
SWEEPS_PER_TIMEOUT = 4
#: bounds of the sweep interval, seconds: no busy loop for tiny timeouts, no hour-long overrun for long ones
MIN_SWEEP_SECONDS = 0.5
MAX_SWEEP_SECONDS = 60.0


@attrs.frozen
class ExpiryPolicy:
    """The two timeouts, in seconds (None: never)."""

    idle_timeout: float | None = 3600.0
    tombstone_ttl: float | None = 86400.0

    def is_idle(self, last_activity: float, now: float) -> bool:
        """Has a session whose last request or generation ended at ``last_activity`` been idle long enough?"""
        return self.idle_timeout is not None and now - last_activity >= self.idle_timeout

    def is_expired(self, released_at: float, now: float) -> bool:
        """Has a tombstone released at ``released_at`` outlived the TTL?"""
        return self.tombstone_ttl is not None and now - released_at >= self.tombstone_ttl

    def sweep_interval(self) -> float | None:
        """Seconds between the reaper's sweeps; None when neither timeout is set (no reaper)."""
        timeouts = [t for t in (self.idle_timeout, self.tombstone_ttl) if t is not None]
        if not timeouts:
            return None
        return min(MAX_SWEEP_SECONDS, max(MIN_SWEEP_SECONDS, min(timeouts) / SWEEPS_PER_TIMEOUT))


__all__ = ["ExpiryPolicy", "MAX_SWEEP_SECONDS", "MIN_SWEEP_SECONDS", "SWEEPS_PER_TIMEOUT"]
