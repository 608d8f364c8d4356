"""The registry's side of the store's step journal: every commit made durable before it returns, and a session
loaded on its first use after a restart (``session_registry.py`` calls these; ``docs/storage.md``, "Recovery").

- :func:`step_record` builds a committed step's journal record (``proxy/trajectory/step_journal.py``);
  :func:`write_journal` appends the session's records not yet durable, in step order (a failed append keeps its
  record for the next commit, so the journal never has a gap), shielded from cancellation;
- :func:`load_session` asks the store what it knows of a session id: nothing (a new session), an active journal
  (rebuilt by ``session_replay.py``, off the event loop when long, with the steps its Idempotency-Keys committed),
  or a finalized, drained or aborted record (a tombstone that answers as before the restart);
- :func:`result_json` / :func:`result_from_json`: the ``FinalizeResult`` as the store keeps it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs
import trio

from proxy.controllers.off_loop import run_off_loop
from proxy.controllers.session_entries import LockedSession
from proxy.trajectory import step_journal
from proxy.trajectory.session import BranchHandle, Session
from proxy.trajectory.session_config import SessionConfig
from proxy.trajectory.session_errors import SessionError
from proxy.trajectory.session_replay import KeyedStep, replay_journal
from proxy.trajectory.session_results import CommitResult, FinalizeResult
from proxy.trajectory.store import ABORTED, ACTIVE, DRAINED, LeaseLostError, TrajectoryStore
from proxy.trajectory.tokens import TokenSpan
from proxy.trajectory.version_stamp import VersionStamp

log = logging.getLogger("dressage_proxy.sessions")

#: journals of more steps than this are decoded and replayed in a worker thread
THREAD_REPLAY_STEPS = 16


class StoreUnavailableError(SessionError):
    """The step was committed in memory but the store could not make it durable (answered 503
    ``store_unavailable``): it stays in memory, the session's next commit journals it, finalize exports it."""

    code = "store_unavailable"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"the trajectory store is unavailable: the step of session {session_id!r} was kept in "
                         "memory but is not durable yet; retry later")
        self.session_id = session_id


def step_record(
    request: step_journal.JournaledRequest,
    handle: BranchHandle,
    span: TokenSpan,
    result: CommitResult,
    *,
    finish_reason: str,
    assistant_message: Mapping[str, Any],
    logprobs_invalid: bool,
    version_stamp: VersionStamp | None,
) -> bytes:
    """The journal record of a step whose commit just returned ``result``."""
    pending = Session.journal_facts(handle)
    record = step_journal.StepRecord(
        step_id=result.step_id, chain_id=result.chain_id, generation_id=pending.generation_id,
        # Only the messages after the newest checkpoint's: O(turn), not O(conversation), per record.
        request=request.after_prefix(pending.prefix_step, pending.prefix_depth),
        context_ids=span.context_ids, context_mask=span.context_mask,
        tito_detail=pending.boundary_detail if pending.tito_failed else None,
        boundary_reason=pending.boundary_reason.value if pending.boundary_reason is not None else None,
        generated_ids=span.generated_ids, logprobs=span.logprobs, logprobs_invalid=logprobs_invalid,
        version_runs=span.version_runs, routed_experts=span.routed_experts, finish_reason=finish_reason,
        assistant_message=assistant_message, version_stamp=version_stamp,
        prepared=pending.prepared, restarted=pending.restarted, committed=pending.committed,
    )
    return step_journal.encode(record)


async def write_journal(store: TrajectoryStore, locked: LockedSession, step_id: int, record: bytes) -> None:
    """Append ``record`` after the session's records not yet durable, in step order (the caller holds
    ``locked.journal_lock``). Raises :class:`StoreUnavailableError` when the store fails (the records wait for the
    next commit) and ``LeaseLostError`` when another proxy took the session."""
    session_id = locked.session.session_id
    locked.unjournaled.append((step_id, record))
    # Shielded: the step is committed in memory; a client that goes away must not leave its record unwritten.
    with trio.CancelScope(shield=True):
        while locked.unjournaled:
            pending_step, data = locked.unjournaled[0]
            try:
                await store.append_step(session_id, pending_step, data, fence=locked.epoch)
            except LeaseLostError:
                raise
            except Exception as exc:  # noqa: BLE001 - any store fault: answered 503, the records kept for a retry
                # The exception's class only: its text may name a DSN or a path.
                log.error(
                    "journal write of session %r failed (%s); %d step(s) kept in memory for the next commit",
                    session_id, type(exc).__name__, len(locked.unjournaled),
                    extra={"session_id": session_id, "step_id": pending_step, "error": type(exc).__name__},
                )
                raise StoreUnavailableError(session_id) from None
            locked.unjournaled.pop(0)


def result_json(result: FinalizeResult) -> dict[str, Any]:
    """A finalize result as the store keeps it (``TrajectoryStore.write``'s ``result``)."""
    return attrs.asdict(result)


def result_from_json(session_id: str, stored: Mapping[str, Any] | None) -> FinalizeResult:
    """The finalize result a store kept (a record without one, from a store written before results: no segment)."""
    stored = stored or {}
    return FinalizeResult(
        session_id, int(stored.get("segments", 0)), int(stored.get("steps", 0)),
        tuple(stored.get("trajectory_ids", ())), str(stored.get("reason", "requested")),
    )


async def load_session(
    store: TrajectoryStore, session_id: str, config: SessionConfig, end_of_turn_id: int | frozenset[int] | None
) -> tuple[Session, dict[str, KeyedStep]]:
    """The session as the store knows it (see the module docstring), and the newest step of each Idempotency-Key
    its journal holds. Raises ``JournalFormatError`` and ``ReplayMismatchError`` for a journal this proxy cannot
    rebuild (never silently a new session)."""
    stored = await store.load_session(session_id)
    if stored is None:
        return Session(session_id, config, end_of_turn_id), {}
    if stored.state == ACTIVE:
        if len(stored.steps) > THREAD_REPLAY_STEPS:
            return await run_off_loop(_rebuild, session_id, config, end_of_turn_id, stored.steps)
        return _rebuild(session_id, config, end_of_turn_id, stored.steps)
    session = Session(session_id, config, end_of_turn_id)
    if stored.state == ABORTED:
        session.abort()
        return session, {}
    # Finalized (or drained): the tombstone answers every finalize with the stored result, and rejects late steps.
    session.begin_finalize()
    result = result_from_json(session_id, stored.result)
    session.export_completed(result)
    if stored.state == DRAINED and result.segments:
        session.drained()
    # A tombstone has no keys: a request to it meets the session's refusal (``idempotency.py``).
    return session, {}


def _rebuild(
    session_id: str, config: SessionConfig, end_of_turn_id: int | frozenset[int] | None, steps: tuple[bytes, ...]
) -> tuple[Session, dict[str, KeyedStep]]:
    """Decode the journal and replay it (pure: a worker thread may run it)."""
    return replay_journal(session_id, config, end_of_turn_id, [step_journal.decode(data) for data in steps])


__all__ = [
    "THREAD_REPLAY_STEPS", "StoreUnavailableError", "load_session", "result_from_json", "result_json",
    "step_record", "write_journal",
]
