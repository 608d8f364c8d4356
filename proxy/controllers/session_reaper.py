"""The session reaper: one background trio task that keeps the registry's memory bounded.

Started with the proxy (``proxy/cli.py:run_proxy``), it wakes every ``ExpiryPolicy.sweep_interval()`` seconds and
asks the registry to finalize the sessions idle for ``--session-idle-timeout`` (``SessionRegistry.finalize_idle``:
each under its session's lock, never one with a generation in flight) and to forget the tombstones released
``--tombstone-ttl`` ago (``SessionRegistry.expire_tombstones``). The decisions are ``session_expiry.py``'s pure
functions; this module only schedules them.

A sweep that fails (a bug) is logged and the next one runs anyway: the reaper must not take the proxy down, and a
session it could not finalize is simply tried again.
"""

from __future__ import annotations

import logging

import trio

from proxy.config import ProxyConfig
from proxy.controllers.session_expiry import ExpiryPolicy
from proxy.controllers.session_registry import SessionRegistry

log = logging.getLogger("dressage_proxy.sessions")


def expiry_policy(config: ProxyConfig) -> ExpiryPolicy:
    """The policy of ``--session-idle-timeout`` and ``--tombstone-ttl``."""
    return ExpiryPolicy(idle_timeout=config.session_idle_timeout, tombstone_ttl=config.tombstone_ttl)


async def sweep(registry: SessionRegistry, policy: ExpiryPolicy) -> tuple[int, int]:
    """One pass: finalize idle sessions, then expire tombstones; returns (finalized, expired)."""
    finalized = await registry.finalize_idle(policy)
    return len(finalized), await registry.expire_tombstones(policy)


async def run_reaper(
    registry: SessionRegistry, policy: ExpiryPolicy, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Sweep until cancelled (returns at once when neither timeout is set)."""
    interval = policy.sweep_interval()
    task_status.started()
    if interval is None:
        return
    while True:
        await trio.sleep(interval)
        try:
            await sweep(registry, policy)
        except Exception:  # noqa: BLE001 - a bug: logged, and the next sweep tries again
            log.exception("session reaper sweep failed; retrying in %.1f s", interval)


__all__ = ["expiry_policy", "run_reaper", "sweep"]
