"""The rollout gate's state shared by a fleet of proxies through the store (``TrajectoryStore.control``).

A trainer pauses and resumes every proxy of the fleet (``proxy/fleet.py:ProxyFleet``); each proxy records the state
it was told in the shared store, so a proxy that starts while the fleet is paused starts paused, with the fleet's
weight version (:func:`join_fleet`, called by ``proxy/cli.py:run_proxy`` before it serves). A store only one process
uses (memory, SQLite) keeps no such state: a lone proxy restarts running, as it always did.

The order of a write and the local change is chosen for a proxy that joins meanwhile: a pause is recorded *before*
the gate pauses (a pause can take up to ``--pause-abort-timeout`` while generations are cut; a proxy joining in that
time must start paused), a resume *after* the gate resumed (a refused resume leaves the fleet paused).
"""

from __future__ import annotations

import logging

from proxy.controllers.gate import GateController
from proxy.trajectory.store import ControlState, TrajectoryStore

log = logging.getLogger("dressage_proxy.fleet")


async def join_fleet(gate: GateController, store: TrajectoryStore) -> ControlState | None:
    """Before serving: take the fleet's pause state and weight version from a shared store (None: not shared)."""
    if not store.shared:
        return None
    state = await store.control()
    await gate.start_as(paused=state.paused, weight_version=state.weight_version)
    if state.paused:
        log.info("the fleet is paused: this proxy starts paused (weight version %s) until a resume reaches it",
                 state.weight_version, extra={"weight_version": state.weight_version})
    return state


async def record_control(store: TrajectoryStore, *, paused: bool, weight_version: str | None) -> bool | None:
    """Record the gate's state for the fleet (shared stores only: None otherwise, nothing to record). False when
    the store refused: the local gate changed anyway and the answer says so (``fleet_recorded``); the store's fault
    is logged, never a 500."""
    if not store.shared:
        return None
    try:
        await store.set_control(ControlState(paused=paused, weight_version=weight_version))
    except Exception:
        log.error("recording the fleet's pause state (paused=%s) in the store failed: a proxy joining now starts %s",
                  paused, "running" if paused else "paused", exc_info=True)
        return False
    return True


__all__ = ["join_fleet", "record_control"]
