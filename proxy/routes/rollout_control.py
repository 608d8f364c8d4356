"""The rollout gate over HTTP (spec 4, 7): pause generation for a weight update, resume it, look at it.

| route | body | answer |
|---|---|---|
| ``POST /v1/rollout/pause`` | none (ignored) | ``{"state": "PAUSED", "epoch", "weight_version", "aborted", "tokens_kept", "waiting", "already_paused", "force_cut", "seconds", "fleet_recorded"?}`` |
| ``POST /v1/rollout/resume`` | ``{"weight_version"?}`` (or no body) | ``{"state": "RUNNING", "epoch", "weight_version", "admitted", "already_running", "fleet_recorded"?}`` |
| ``GET /v1/rollout/pause_state`` | | ``{"state", "epoch", "weight_version", "in_flight", "waiting", "pauses_total", "admitted_total", "parked_total"}`` |

Everything is the :class:`~proxy.controllers.gate.GateController`'s (``services.gate``), which drives the
``RolloutGate`` machine; ``docs/partial-rollout.md`` describes the protocol and its guarantees.

- **Pause** returns only once no generation streams upstream: every in-flight generation was cut at a token
  boundary (its request's cancel scope, and ``/abort_request`` for its rid on the worker URLs when configured) and
  acknowledged, keeping the tokens it had received. ``aborted``: generations this pause interrupted;
  ``tokens_kept``: the generated tokens they hold; ``waiting``: generations now waiting for resume (interrupted
  ones and new requests); ``seconds``: how long this call took. Idempotent: a pause while paused answers at once
  (``already_paused: true``, ``aborted: 0``); a pause while another is in progress waits for it and gets its
  answer. A trainer that disconnects does not undo the pause. A pause never waits for ever: when the upstream has
  not confirmed every abort within ``--pause-abort-timeout`` (30 s), the proxy cancels its own requests (each keeps
  what it delivered, as with any abort) and acknowledges; ``force_cut`` names those generations (``id``,
  ``session_id``, ``tokens_before``: what they held before this pause).
- **Resume** moves the gate to RUNNING with ``epoch + 1`` and the announced ``weight_version`` (else the current
  one) and lets every waiter go on at once. Idempotent: a resume while running with no or the same version changes
  nothing (``already_running: true``). Refused with 409 ``resume_refused``: a resume while a pause is still in
  progress (wait for the pause call to return), and a resume *while running* that announces another version
  (weights may change only inside a pause: pause, update, then resume with the version).
- **Fleet** (a shared store, ``docs/storage.md`` "Fleet"): pause and resume also record the state in the store
  (``proxy/controllers/fleet_control.py``), so a proxy that joins during a pause starts paused; ``fleet_recorded``
  (only with a shared store) is false when the store refused that write (logged; the local gate changed anyway).
  A store only one process uses records nothing and the answers have no ``fleet_recorded``.
- **pause_state**: the gate's state (``RUNNING``, ``PAUSING``, ``PAUSED``), epoch, current weight version (null
  until one is announced), generations in flight and waiting, and lifetime counters.
"""

from __future__ import annotations

import trio
from quart import jsonify
from quart_trio import QuartTrio

from proxy.api import ApiError
from proxy.api.errors import ErrorCode
from proxy.api.rollout_requests import ResumeRequest
from proxy.controllers.fleet_control import record_control
from proxy.controllers.gate import GateController, ResumeRefusedError
from proxy.routes.json_body import read_json_body
from proxy.services import ProxyServices


def fleet_field(recorded: bool | None) -> dict[str, bool]:
    """``fleet_recorded`` for a proxy of a fleet (a shared store); nothing for a proxy on its own."""
    return {} if recorded is None else {"fleet_recorded": recorded}


def register(app: QuartTrio, services: ProxyServices) -> None:
    gate: GateController = services.gate
    store = services.sessions.store

    @app.post("/v1/rollout/pause")
    async def pause():
        began = trio.current_time()
        # Recorded first: a proxy joining the fleet while this pause cuts generations starts paused.
        recorded = await record_control(store, paused=True, weight_version=gate.statistics().weight_version)
        result = await gate.pause()
        stats = gate.statistics()
        return jsonify(
            {
                "state": "PAUSED",
                "epoch": result.epoch,
                "weight_version": stats.weight_version,
                "aborted": result.aborted,
                "tokens_kept": result.tokens_kept,
                "waiting": result.waiting,
                "already_paused": result.already_paused,
                "force_cut": list(result.force_cut),
                "seconds": round(trio.current_time() - began, 6),
                **fleet_field(recorded),
            }
        )

    @app.post("/v1/rollout/resume")
    async def resume():
        body = await read_json_body(ResumeRequest.from_json)
        try:
            result = await gate.resume(body.weight_version)
        except ResumeRefusedError as exc:
            raise ApiError.of(ErrorCode.RESUME_REFUSED, f"resume refused: {exc}") from None
        # Recorded after the gate resumed: a refused resume leaves the fleet paused.
        recorded = await record_control(store, paused=False, weight_version=result.weight_version)
        return jsonify(
            {
                "state": "RUNNING",
                "epoch": result.epoch,
                "weight_version": result.weight_version,
                "admitted": result.admitted,
                "already_running": result.already_running,
                **fleet_field(recorded),
            }
        )

    @app.get("/v1/rollout/pause_state")
    async def pause_state():
        stats = gate.statistics()
        return jsonify(
            {
                "state": stats.state,
                "epoch": stats.epoch,
                "weight_version": stats.weight_version,
                "in_flight": stats.in_flight,
                "waiting": stats.waiting,
                "pauses_total": stats.pauses_total,
                "admitted_total": stats.admitted_total,
                "parked_total": stats.parked_total,
            }
        )


__all__ = ["register"]
