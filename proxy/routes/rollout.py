"""The rollout-facing endpoints (spec 4, 5.5): finalize a session, read and drain its segments (two-phase: lease,
then acknowledge), store statistics, and a per-session debug view.

| route | body | answer |
|---|---|---|
| ``POST /session/finalize`` | ``{"session_id", "instance_id"?, "rollout_id"?, "reward_info"?}`` | ``{"session_id", "segments", "steps", "trajectory_ids"}`` |
| ``POST /trajectory/read`` | ``{"session_id"?, "trajectory_id"?, "drain"?}`` (at least one id) | ``{"data": [segment, ...]}``; with drain also ``"lease_id", "lease_seconds"`` |
| ``POST /trajectory/ack`` | ``{"lease_id"}`` | ``{"acknowledged": n}`` |
| ``GET /trajectory/stats`` | | ``{"sessions", "segments", "tokens", "bytes", "written_sessions", "drained_segments", "cleaned_sessions", "leased_segments", "export_failures", "export_failed_sessions", "registry_sessions", "registry_tombstones", "registry_bytes", "approximate_bytes", "idle_finalized_sessions", "expired_tombstones"}`` |
| ``GET /session/<session_id>`` | | the session's debug view (state, head, branches, in flight, trie size) |

Decisions:

- **Finalize is idempotent**: every call for a session gets the answer of the first (its ``reward_info``,
  ``instance_id`` and ``rollout_id`` are the ones stored; later values are ignored). A session id never seen is
  finalized empty (``segments: 0``) so a straggling request cannot start it afterwards. A session that was aborted
  answers 409 ``session_aborted``. An export that fails (a bug, or a store fault) answers 500 ``export_failed``
  and loses nothing: the session keeps its steps and the next finalize retries (``docs/sessions.md``).
- **A drain is two-phase** (issue 16, item 4), so a response lost in transit loses nothing: ``drain: true`` leases
  the segments it returns for ``--read-lease-seconds`` and answers the lease (``lease_id`` null when nothing was
  leased); other draining reads skip leased segments; ``POST /trajectory/ack`` deletes them and answers how many
  (``0`` for an unknown, expired or already acknowledged lease: idempotent); a session left with no segment moves
  to ``DRAINED``. An unacknowledged lease expires and its segments are readable (and drainable) again. A read
  without drain is unchanged: it returns leased segments too and leases nothing. The trainer's exactly-once
  recipe (ack after durable use, skip the ``trajectory_id`` values already consumed) is in ``docs/api.md``.
- **Stats** include the registry's export failures: ``export_failures`` (since start) and
  ``export_failed_sessions`` (still waiting for a retry, bounded); and its memory: the sessions it knows
  (``registry_sessions``, of which ``registry_tombstones`` keep only a tombstone), their approximate bytes
  (``registry_bytes``), ``approximate_bytes`` (those plus the store's ``bytes``: what ``--memory-budget`` bounds),
  and the lifetime counts of idle finalizes (``idle_finalized_sessions``) and expired tombstones
  (``expired_tombstones``); docs/operations.md, "Memory budget".
- **Read of an unknown id is 404** ``not_found`` (a typo must not look like "not finalized yet" forever): a
  ``trajectory_id`` that is not stored (never, or drained and acknowledged already), or a ``session_id`` that is
  neither in the store nor known to the proxy. A session the proxy knows with no segment stored (still active,
  finalized with nothing to export, or drained) answers ``{"data": []}``, and so does a draining read whose
  segments another reader holds leased, so polling and drain loops need no special case.
- **The debug view path** is ``GET /session/<session_id>`` (the id percent-encoded; ``/`` in an id is allowed);
  404 for a session the proxy does not know. ``GET`` never collides with ``POST /session/finalize``: a session
  named ``finalize`` is still readable with ``GET``.

Bodies are parsed by :mod:`proxy.api.rollout_requests`; every error is an :class:`~proxy.api.ApiError` (or a
session error the app translates), rendered by ``proxy.app`` in the OpenAI error shape.
"""

from __future__ import annotations


from quart import jsonify
from quart_trio import QuartTrio

from proxy.api import ApiError, FinalizeRequest, TrajectoryReadRequest, report_json
from proxy.api.fields import identifier
from proxy.api.rollout_requests import AckRequest
from proxy.routes.json_body import read_json_body
from proxy.services import ProxyServices
from proxy.session_context import set_current_session_id


def register(app: QuartTrio, services: ProxyServices) -> None:
    sessions = services.sessions

    @app.post("/session/finalize")
    async def finalize_session():
        body = await read_json_body(FinalizeRequest.from_json)
        set_current_session_id(body.session_id)
        result = await sessions.finalize(
            body.session_id, body.reward_info, body.instance_id, rollout_id=body.rollout_id
        )
        return jsonify(
            {
                "session_id": result.session_id,
                "segments": result.segments,
                "steps": result.steps,
                "trajectory_ids": list(result.trajectory_ids),
            }
        )

    @app.post("/trajectory/read")
    async def read_trajectory():
        body = await read_json_body(TrajectoryReadRequest.from_json)
        set_current_session_id(body.session_id)
        ids = {"session_id": body.session_id, "trajectory_id": body.trajectory_id}
        result = await sessions.read(**ids, drain=body.drain, lease_seconds=services.config.read_lease_seconds)
        # Nothing to drain because another reader holds it leased is "nothing for you now", not "unknown id" (the
        # store's read says so: no second read).
        if not result and not result.skipped_leased:
            if body.trajectory_id is not None:
                raise ApiError.not_found(f"no stored segment {body.trajectory_id!r}", "trajectory_id")
            # Known to this process, or to the store (a session drained after a restart was never loaded here).
            known_here = sessions.debug_view(body.session_id) is not None
            if not known_here and await sessions.store.load_session(body.session_id) is None:
                raise ApiError.not_found(f"unknown session {body.session_id!r}", "session_id")
        return jsonify(result.answer_json(drain=body.drain))

    @app.post("/trajectory/ack")
    async def acknowledge_read():
        body = await read_json_body(AckRequest.from_json)
        acked = await sessions.acknowledge(body.lease_id)
        return jsonify({"acknowledged": acked.segments})

    @app.get("/trajectory/stats")
    async def trajectory_stats():
        stats = await sessions.store_statistics()
        return jsonify(stats.as_json())

    @app.get("/session/<path:session_id>")
    async def session_debug(session_id: str):
        session_id = identifier(session_id, "session_id")
        set_current_session_id(session_id)
        view = sessions.debug_view(session_id)
        if view is None:
            raise ApiError.not_found(f"unknown session {session_id!r}", "session_id")
        return jsonify(report_json(view))
