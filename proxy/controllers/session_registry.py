"""The session registry on trio: sessions by id, each with a short lock around its critical sections.

This is the interface the chat-completions path (a later issue) uses for one step::

    prepared = await registry.prepare(session_id, messages, tools=..., chat_template_kwargs=...,
                                      response_mask=..., instance_id=..., turn_id=...)
    try:
        ... generate upstream from prepared.input_ids() (any number of interruptions and continuations) ...
    except BaseException:
        await registry.drop(prepared.handle)        # failed or cancelled: nothing is committed
        raise
    result = await registry.commit(prepared.handle, generated_ids, logprobs, versions, routed_experts,
                                   finish_reason, assistant_message)

and the rollout endpoints use ``finalize``, ``read`` and ``store_statistics``.

Concurrency (architecture.md): ``prepare`` and ``commit`` take the session's ``trio.Lock`` only around their
critical sections (the sync calls into :class:`~proxy.trajectory.session.Session`, microseconds: no I/O and no
token copies of the prefix inside). Tokenization runs between the two critical sections of prepare; full encodes of
long histories and exports of long sessions run in a worker thread. Generation runs outside any lock, so the
generations of one session run concurrently; concurrent siblings of one parent each get their own chain or node
and never overwrite each other. ``drop`` and the end of ``finalize`` are shielded from cancellation, so a client
that goes away can neither leak a generation's reservation nor leave a session stuck in FINALIZING.

Finalize exports in the caller's task (shielded); a second finalize during the export waits for it and gets the
same :class:`~proxy.trajectory.session_results.FinalizeResult`. A finalized session keeps a small tombstone (its machine)
so stragglers are rejected and a late request cannot resurrect it (field note 11); ``forget`` drops a tombstone.

**An export failure never loses a session.** Whatever fails (building the segments, writing them to the store) is
a bug or a store fault: it is logged with the session id (``log.exception``), counted (``export_failures`` and the
ids of the sessions still waiting for a retry, in :meth:`SessionRegistry.store_statistics`, hence
``GET /trajectory/stats``), and every finalize call waiting for that export gets
:class:`~proxy.trajectory.session_errors.ExportFailedError` (500 ``export_failed``). The session keeps every committed step
(state EXPORT_FAILED) and the next finalize retries the same export.

**Durable** (issue 16, ``docs/storage.md`` "Recovery"). A commit returns only once its step journal record is in
the store (``store_unavailable`` when the store fails: the step stays in memory and the next commit journals it);
a session id not in memory is loaded from the store on its first use (new, rebuilt from its journal, or a finalized
or aborted tombstone); finalize stores its result with the segments, abort is recorded, an expired tombstone is
forgotten in the store too. Which proxy of a fleet may use a session is the ``leases`` collaborator's answer
(``session_leases.py``). The journal and load path is ``session_journal.py``.

**Memory has a budget** (``docs/operations.md``): the idle finalize, the tombstone expiry and the reports are
``session_upkeep.py``'s (a mixin of the registry); the records of a session and of a prepared step are
``session_entries.py``'s.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

import attrs
import trio

from proxy.controllers.idempotency import IdempotencyKeys
from proxy.controllers.off_loop import run_off_loop, run_sized, runs_inline
from proxy.controllers.session_entries import LockedSession, PreparedStep, RegistryStatistics, text_size
from proxy.controllers.session_journal import load_session, result_json, step_record, write_journal
from proxy.controllers.session_leases import SessionLeases, SoleOwner
from proxy.controllers.session_upkeep import SessionUpkeep
from proxy.observability.metrics import NO_METRICS, MetricsHooks
from proxy.tokenization.results import TitoFailure
from proxy.tokenization.tito import TitoTokenizer
from proxy.trajectory.boundaries import BoundaryReason
from proxy.trajectory.encode_plan import EncodeKind, EncodePlan, request_keys, tokenize_plan
from proxy.trajectory.export import export_segments
from proxy.trajectory.message_keys import MessageKeyError, message_key, reasoning_variant
from proxy.trajectory.session import BranchHandle, Session
from proxy.trajectory.session_config import SessionConfig
from proxy.trajectory.session_errors import (
    ExportFailedError,
    GenerationFinishedError,
    ResponseMaskMismatchError,
    SessionAbortedError,
    SessionFinalizedError,
)
from proxy.trajectory.session_results import CommitResult, ExportJob, FinalizeResult, WaitForExport
from proxy.trajectory.memory_store import InMemoryTrajectoryStore
from proxy.trajectory.step_journal import JournaledRequest
from proxy.trajectory.store import DEFAULT_READ_LEASE_SECONDS, AckResult, LeaseLostError, StoreStatistics, TrajectoryStore
from proxy.api.trajectory_read import TrajectoryRead
from proxy.trajectory.tokens import RoutedChunk
from proxy.trajectory.version_stamp import VersionStamp

log = logging.getLogger("dressage_proxy.sessions")

#: how many ids of sessions whose export failed (and was not retried successfully) the statistics list
MAX_REPORTED_EXPORT_FAILURES = 100

T = TypeVar("T")


@attrs.define(eq=False)
class SessionRegistry(SessionUpkeep):
    """Every session of the proxy, by session id (see the module docstring)."""

    # The model's TITO tokenizer: it encodes every step's context, and builds last_step exports.
    tokenizer: TitoTokenizer
    store: TrajectoryStore = attrs.field(factory=InMemoryTrajectoryStore)
    config: SessionConfig = attrs.field(factory=SessionConfig)
    _sessions: dict[str, LockedSession] = attrs.field(factory=dict, init=False)
    # Failed export attempts since start; the sessions whose last export failed, oldest first (bounded).
    _export_failures: int = attrs.field(default=0, init=False)
    _failed_exports: dict[str, None] = attrs.field(factory=dict, init=False)
    # Seconds, for idleness and tombstone ages (trio's clock: tests run it on a MockClock).
    clock: Callable[[], float] = attrs.field(default=trio.current_time, kw_only=True)
    _idle_finalized: int = attrs.field(default=0, init=False)
    _expired_tombstones: int = attrs.field(default=0, init=False)
    #: where tokenization, TITO checks, store writes and finalized sessions are reported
    metrics: MetricsHooks = attrs.field(default=NO_METRICS, kw_only=True)
    #: which proxy of a fleet owns a session (``session_leases.py``): every session is this proxy's by default
    leases: SessionLeases = attrs.field(factory=SoleOwner, kw_only=True)

    def _locked(self, session_id: str) -> LockedSession:
        """The session with its lock, created in memory on first use (not loaded yet: see :meth:`_use`)."""
        locked = self._sessions.get(session_id)
        if locked is None:
            locked = LockedSession(Session(session_id, self.config, _end_ids(self.tokenizer)))
            locked.last_activity = self.clock()
            self._sessions[session_id] = locked
        return locked

    async def _use(self, session_id: str) -> LockedSession:
        """The session, this proxy's to use (its lease), loaded from the store on first use: new, rebuilt from its
        journal, or a finalized / aborted tombstone (``session_journal.py``). Concurrent first uses load once."""
        grant = await self.leases.acquire(session_id)
        locked = self._sessions.get(session_id)
        if grant.changed and locked is not None and locked.loaded:
            # Another proxy owned the session since this copy was loaded: it is stale.
            del self._sessions[session_id]
        locked = self._locked(session_id)
        locked.epoch = grant.epoch
        if locked.loaded:
            return locked
        if locked.load_lock is None:
            locked.load_lock = trio.Lock()
        async with locked.load_lock:  # the uses that wait here hold the lock object even once it is dropped
            if not locked.loaded:
                session, keyed = await load_session(self.store, session_id, self.config,
                                                    _end_ids(self.tokenizer))
                locked.session, locked.loaded, locked.load_lock = session, True, None
                if keyed:
                    # The Idempotency-Keys of its journal answer repeats from their steps (``idempotency.py``).
                    locked.idempotency = IdempotencyKeys.restore(keyed)
                if session.trie is None:
                    locked.released_at = self.clock()
        return locked

    def _drop_copy(self, locked: LockedSession) -> None:
        """Another proxy took the session: forget this proxy's copy (the next use loads it again)."""
        session_id = locked.session.session_id
        if self._sessions.get(session_id) is locked:
            del self._sessions[session_id]

    def _active(self, locked: LockedSession) -> None:
        """A request arrived or a generation ended: the session's idle time starts again."""
        locked.last_activity = self.clock()

    # -- one step ----------------------------------------------------------------------------------------------------

    async def prepare(
        self,
        session_id: str,
        messages: Sequence[Any],
        *,
        tools: Sequence[Any] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        response_mask: Sequence[int] | None = None,
        instance_id: str | None = None,
        turn_id: str | None = None,
        idempotency: tuple[str, str] | None = None,
    ) -> PreparedStep:
        """Admit a generation, pick its branch, tokenize its context.

        Raises (and records nothing): ``MaxStepsExceededError``, ``SessionFinalizedError``, ``InvalidMessagesError``,
        ``ResponseMaskMismatchError`` (the mask must have one entry per context token this step adds),
        ``proxy.tokenization.TitoError`` (the full encode failed: bad message, template error).
        """
        # The keys are pure and O(request text): computed before taking the lock (and before a malformed request
        # could create a session). Only for the messages the session does not hold yet: the echoed history's keys
        # are its trie's (found here, on the loop: the trie is not read from a worker thread).
        known = self._echoed_prefix(session_id, messages)
        keys = await self._cpu(
            messages[len(known):] if known else messages,
            partial(request_keys, messages, ignore_cch=self.config.ignore_cch_for_prefix_hash, known=known),
        )
        locked = await self._use(session_id)
        # Before waiting for the lock: an idle finalize that takes it first sees this request and keeps the session.
        self._active(locked)
        self.leases.generation_started(session_id)
        try:
            async with locked.lock:
                handle, plan = locked.session.prepare(
                    messages, tools=tools, chat_template_kwargs=chat_template_kwargs, instance_id=instance_id,
                    turn_id=turn_id, request_keys=keys,
                )
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.leases.generation_ended(session_id)
            raise
        # What the step journal records of the request, kept until the generation commits or drops.
        # With the Idempotency-Key the chat route claimed for this request (journaled with the step it commits).
        locked.requests[handle.generation_id] = (
            handle, JournaledRequest(messages, tools, chat_template_kwargs, instance_id, turn_id,
                                     idempotency=idempotency)
        )
        try:
            ids, plan = await self._encode(locked, handle, plan, messages)
            if response_mask is not None and len(response_mask) != len(ids):
                raise ResponseMaskMismatchError(len(ids), len(response_mask))
            # The generation's private state (and an idempotent per-node cache): no lock needed, no await inside.
            tokens = locked.session.set_context(handle, ids, response_mask)
            # A cancellation that arrived during a worker-thread encode is delivered here, while the handle can
            # still be released; past this point the caller owns the handle (and must drop it on failure).
            await trio.lowlevel.checkpoint_if_cancelled()
        except BaseException:
            await self.drop(handle)
            raise
        return PreparedStep(
            handle, tokens, plan.kind,
            plan.boundary_reason.value if plan.boundary_reason is not None else None,
            plan.boundary_detail, plan.boundary_reason is BoundaryReason.TITO_FAILED,
        )

    def _echoed_prefix(self, session_id: str, messages: Any) -> list[Any]:
        """The trie nodes of the leading messages a session in memory already holds (none for a session not loaded:
        its keys are all computed, as before)."""
        locked = self._sessions.get(session_id)
        return locked.session.echoed_prefix(messages) if locked is not None else []

    async def _encode(
        self, locked: LockedSession, handle: BranchHandle, plan: EncodePlan, messages: Sequence[Any]
    ) -> tuple[list[int], EncodePlan]:
        """The context ids of the plan; an incremental failure moves the generation to a full encode."""
        ids = await self._tokenize(plan)
        if plan.kind is EncodeKind.INCREMENTAL:
            # Every incremental encode checks the junction rules (TITO): the metrics count how often it holds.
            self.metrics.tito_checked(ids.reason.value if isinstance(ids, TitoFailure) else "ok")
        if isinstance(ids, TitoFailure):
            async with locked.lock:
                plan = locked.session.restart_segment(handle, f"{ids.reason.value}: {ids.detail}", messages)
            ids = await self._tokenize(plan)
        return ids, plan

    async def _tokenize(self, plan: EncodePlan) -> array[int] | TitoFailure:
        """``tokenize_plan``, inline or off the loop as ``_cpu`` would run it, timed for the metrics (off the loop:
        the wait for a worker thread included)."""
        size = text_size(plan.messages)
        began = trio.current_time()
        ids = await run_sized(size, self.config.thread_encode_chars, tokenize_plan, self.tokenizer, plan)
        self.metrics.tokenized(trio.current_time() - began,
                               off_loop=not runs_inline(size, self.config.thread_encode_chars))
        return ids

    async def _cpu(self, messages: Sequence[Any], function: Callable[..., T], *args: Any) -> T:
        """Run a tokenizer call inline, or off the loop (``proxy/controllers/off_loop.py``) when its messages are
        long."""
        return await run_sized(text_size(messages), self.config.thread_encode_chars, function, *args)

    async def commit(
        self,
        handle: BranchHandle,
        generated_ids: Sequence[int],
        logprobs: Sequence[float | None] | None,
        versions: Sequence[str | None] | None,
        routed_experts: Sequence[Any] | None,
        finish_reason: str,
        assistant_message: Mapping[str, Any],
        *,
        version_stamp: VersionStamp | None = None,
    ) -> CommitResult:
        """Commit the generation's step: its generated ids (mask 1) with their logprobs (one per id, or None: the
        step then has none, all-or-none), weight versions (one per id, or None), routed-expert chunks (objects with
        ``data``, ``num_rows``, ``start_len``), SGLang's finish reason (``stop``, ``length``...) and the assistant
        message returned to the client (the trie key of the answer).

        ``version_stamp`` (the step's rollout epoch and weight version; given without partial rollout): the session's
        stamped steps must share it, else ``TrajectoryVersionChangedError`` (nothing changes; the handle stays live:
        drop it). Raises ``SessionFinalizedError`` when the session left ACTIVE (nothing changes), ``ValueError`` for
        malformed arguments (nothing changes and the handle stays live: drop it), ``GenerationFinishedError`` for a
        handle that already committed or dropped.
        """
        locked = self._sessions.get(handle.session_id)
        if locked is None:
            raise SessionFinalizedError("the session was forgotten")
        request = self._request_of(locked, handle)
        if request is None:
            # Ended already, or prepared on a copy of the session this proxy dropped (another proxy owned it since):
            # committing it here would mix two copies.
            raise GenerationFinishedError(f"generation {handle.generation_id} already ended or belongs to a dropped "
                                          "copy of its session")
        count = len(generated_ids)
        aligned = logprobs is not None and len(logprobs) == count and all(v is not None for v in logprobs)
        if versions is None:
            versions = [None] * count
        elif len(versions) != count:
            raise ValueError(f"{len(versions)} weight versions for {count} generated ids")
        try:
            # Keyed as the next request's echo of it will be (``--ignore-cch-for-prefix-hash`` blanks billing hashes).
            key = message_key(assistant_message, ignore_cch=self.config.ignore_cch_for_prefix_hash)
        except MessageKeyError as exc:
            raise ValueError(f"assistant_message: {exc}") from None
        chunks = [RoutedChunk.of(chunk) for chunk in routed_experts or ()]
        span = Session.build_span(handle, generated_ids, logprobs if aligned else None, versions, chunks)
        self._active(locked)
        # The journal lock orders the session's appends as its steps; prepares of the session do not wait for it.
        async with locked.journal_lock:
            try:
                async with locked.lock:
                    result = locked.session.commit(
                        handle, span, finish_reason=finish_reason, assistant_message=assistant_message, key=key,
                        variant=reasoning_variant(assistant_message), logprobs_invalid=not aligned,
                        version_stamp=version_stamp,
                    )
            except SessionFinalizedError:
                # The handle is spent (the commit was rejected): its generation ended.
                await self._generation_ended(locked, handle)
                raise
            try:
                record = step_record(
                    request, handle, span, result, finish_reason=finish_reason,
                    assistant_message=assistant_message, logprobs_invalid=not aligned, version_stamp=version_stamp,
                )
                # Durable before the response is released (issue 16 item 2).
                await write_journal(self.store, locked, result.step_id, record)
            except LeaseLostError:
                self._drop_copy(locked)
                raise
            finally:
                await self._generation_ended(locked, handle)
        return result

    @staticmethod
    def _request_of(locked: LockedSession, handle: BranchHandle) -> JournaledRequest | None:
        """The request of a generation prepared on this copy of its session and not ended yet (else None)."""
        entry = locked.requests.get(handle.generation_id)
        return entry[1] if entry is not None and entry[0] is handle else None

    async def _generation_ended(self, locked: LockedSession, handle: BranchHandle) -> None:
        """A generation committed, was rejected or dropped: forget its request, tell the leases (which finish even
        in a cancelled task: see ``SessionLeases``; no shield here, a scope a request for nothing to wait for)."""
        locked.requests.pop(handle.generation_id, None)
        await self.leases.generation_ended(handle.session_id)

    @staticmethod
    def committed_step(handle: BranchHandle) -> int | None:
        """The step id the handle's generation committed, or None (in flight, dropped, or its commit was rejected)."""
        return Session.committed_step(handle)

    def idempotency_keys(self, session_id: str) -> IdempotencyKeys | None:
        """The session's Idempotency-Key records (created on first use, like the session itself), or None once the
        session's data was freed (finalized, aborted): a request then meets the session's refusal as usual."""
        locked = self._locked(session_id)
        if locked.session.trie is None:
            return None
        if locked.idempotency is None:
            locked.idempotency = IdempotencyKeys()
        return locked.idempotency

    async def loaded_idempotency_keys(self, session_id: str) -> IdempotencyKeys | None:
        """:meth:`idempotency_keys` of the session as the store knows it (loaded on first use, like ``prepare``
        does): after a restart, the keys its journal holds are restored before a repeat is looked up."""
        await self._use(session_id)
        return self.idempotency_keys(session_id)

    def check_version(self, handle: BranchHandle, stamp: VersionStamp) -> None:
        """Before a step generates (no partial rollout): raise ``TrajectoryVersionChangedError`` if ``stamp`` (the
        admission's epoch) differs from the session's stamped steps. Sync: it only reads the session's stamp, which
        commits set under the lock (a commit racing this check is caught by the commit's own check)."""
        locked = self._sessions.get(handle.session_id)
        if locked is not None:
            locked.session.check_version(stamp)

    async def drop(self, handle: BranchHandle) -> None:
        """The generation ends without committing (upstream failure, client gone): release its branch. Idempotent,
        shielded from cancellation."""
        locked = self._sessions.get(handle.session_id)
        if locked is None or self._request_of(locked, handle) is None:
            # Unknown, ended already, or prepared on a dropped copy of the session: nothing of this copy to release.
            return
        self._active(locked)
        with trio.CancelScope(shield=True):
            async with locked.lock:
                dropped = locked.session.drop(handle)
            if dropped:
                await self._generation_ended(locked, handle)

    # -- finalize and the store --------------------------------------------------------------------------------------

    async def finalize(
        self,
        session_id: str,
        reward_info: Mapping[str, Any] | None = None,
        instance_id: str | None = None,
        *,
        rollout_id: str | None = None,
    ) -> FinalizeResult:
        """Close the session and export its segments to the store. Idempotent: every call gets the same result.

        In-flight generations are not waited for: their commits are rejected from now on. A session id never seen
        is finalized with no segment (so a late request cannot start it). Raises ``SessionAbortedError`` for an
        aborted session, ``ExportFailedError`` when the export failed (the session keeps its steps; finalize again to
        retry: the export of the first call, its ``reward_info`` and ids included, is run again).
        """
        locked = await self._use(session_id)
        async with locked.lock:
            outcome = locked.session.begin_finalize(
                reward_info=reward_info, instance_id=instance_id, rollout_id=rollout_id
            )
            if isinstance(outcome, ExportJob):
                # Every export attempt has its own event: a retry's waiters must not see the failed attempt's.
                locked.export_done = trio.Event()
            export_done = locked.export_done
        if isinstance(outcome, FinalizeResult):
            return outcome
        if isinstance(outcome, WaitForExport):
            assert export_done is not None  # the export it waits for created it (finalize or the reaper)
            await export_done.wait()
            return self._outcome(locked)
        # The export runs to its end even if this caller goes away: the session must not stay FINALIZING.
        with trio.CancelScope(shield=True):
            await self._export(locked, outcome)
        return self._outcome(locked)

    async def _export(self, locked: LockedSession, job: ExportJob) -> None:
        """Export, store, report to the session, wake the waiters."""
        session = locked.session
        try:
            tokens = sum(tip.length for tip in job.export.tips)
            if tokens > self.config.thread_export_tokens:
                segments = await run_off_loop(export_segments, job.export, self.config.export, self.tokenizer)
            else:
                segments = export_segments(job.export, self.config.export, self.tokenizer)
            result = FinalizeResult(
                session.session_id, len(segments), job.steps, tuple(s["trajectory_id"] for s in segments),
                job.export.reason.value,
            )
            # After the journal appends of steps committed before the finalize (they hold the journal lock from
            # their commit to their append): a step appended after the write would meet a finalized session.
            async with locked.journal_lock:
                began = trio.current_time()
                # One transaction: the segments, the session finalized with its result, its journal dropped.
                written = await self.store.write(session.session_id, segments, result=result_json(result))
                self.metrics.store_written(trio.current_time() - began, written)
                # Records a failed append kept are exported now: nothing is left to journal.
                locked.unjournaled.clear()
        except Exception as exc:  # noqa: BLE001 - any failure is a bug: logged, counted, kept for a retry
            log.exception(
                "export of session %r failed; its %d committed step(s) are kept and the next finalize retries it",
                session.session_id, job.steps, extra={"session_id": session.session_id, "steps": job.steps},
            )
            self._record_export_failure(session.session_id)
            async with locked.lock:
                session.export_failed(type(exc).__name__)
        else:
            self._failed_exports.pop(session.session_id, None)
            self.metrics.session_exported(job.export, segments, self.config.export.export_all_checkpoints)
            # The line that answers "why did this session split into N segments": each segment's boundary reason.
            log.info(
                "session %r finalized (%s): %d step(s) exported as %d segment(s)", result.session_id, result.reason,
                result.steps, result.segments,
                extra={
                    "session_id": result.session_id, "reason": result.reason, "steps": result.steps,
                    "segments": result.segments,
                    "boundary_reasons": [segment["boundary_reason"] for segment in segments],
                },
            )
            async with locked.lock:
                session.export_completed(result)
                locked.drop_idempotency_if_freed()
                if not segments:
                    locked.released_at = self.clock()
        finally:
            assert locked.export_done is not None  # each caller of _export created this attempt's event
            locked.export_done.set()

    def _record_export_failure(self, session_id: str) -> None:
        """Count a failed export and list its session (most recent last, at most the reported number)."""
        self._export_failures += 1
        self._failed_exports.pop(session_id, None)
        self._failed_exports[session_id] = None
        while len(self._failed_exports) > MAX_REPORTED_EXPORT_FAILURES:
            del self._failed_exports[next(iter(self._failed_exports))]

    @staticmethod
    def _outcome(locked: LockedSession) -> FinalizeResult:
        """The stored result, or why there is none (aborted, or the export failed and waits for a retry)."""
        session = locked.session
        if session.result is not None:
            return session.result
        if session.export_failure is not None:
            raise ExportFailedError(session.session_id, session.machine.statistics().steps, session.export_failure)
        raise SessionAbortedError(session.discarded or "the session was not finalized")

    async def read(
        self, *, session_id: str | None = None, trajectory_id: str | None = None, drain: bool = False,
        lease_seconds: float = DEFAULT_READ_LEASE_SECONDS,
    ) -> TrajectoryRead:
        """Finalized segments of a session, one segment, or all (a ``list``). ``drain`` is the first phase of a
        two-phase read: the store leases what it returns for ``lease_seconds`` (other draining reads skip it) and
        deletes nothing; the result's ``lease_id`` goes to :meth:`acknowledge`, which deletes. An unacknowledged
        lease expires and its segments are readable again."""
        result = await self.store.read(
            session_id=session_id, trajectory_id=trajectory_id, drain=drain, lease_seconds=lease_seconds
        )
        return TrajectoryRead(result.segments, result.lease_id, result.lease_seconds,
                              skipped_leased=result.skipped_leased)

    async def acknowledge(self, lease_id: str) -> AckResult:
        """The second phase of a drain: delete the lease's segments; a session left with none moves to DRAINED
        (its tombstone's age counts from now). An unknown, expired or already acknowledged lease deletes nothing."""
        acked = await self.store.acknowledge(lease_id)
        for emptied in acked.emptied_sessions:
            locked = self._sessions.get(emptied)
            if locked is not None:
                async with locked.lock:
                    locked.session.drained()
                    locked.released_at = self.clock()
        return acked

    async def store_statistics(self) -> StoreStatistics:
        """The store's sizes, for ``GET /trajectory/stats``, with the registry's export failures (how many export
        attempts failed since start, and the sessions whose export failed and still waits for a retry) and its
        memory (sessions, tombstones, approximate bytes, idle finalizes, expired tombstones)."""
        stats = await self.store.statistics()
        registry = self.statistics()
        return attrs.evolve(
            stats, export_failures=self._export_failures, export_failed_sessions=tuple(self._failed_exports),
            registry_sessions=registry.sessions, registry_tombstones=registry.tombstones,
            registry_bytes=registry.approximate_bytes, approximate_bytes=registry.approximate_bytes + (stats.bytes if self.store.in_memory else 0),
            idle_finalized_sessions=registry.idle_finalized,
            expired_tombstones=registry.expired_tombstones,
        )

    async def abort(self, session_id: str) -> bool:
        """Discard an active session without export; False if it was not active (unknown, finalized, aborted)."""
        if session_id not in self._sessions and await self.store.load_session(session_id) is None:
            # Unknown here and in the store: nothing to abort (and no session is created for the id).
            return False
        locked = await self._use(session_id)
        async with locked.lock:
            aborted = locked.session.abort()
            locked.drop_idempotency_if_freed()
            if aborted:
                locked.released_at = self.clock()
            reason = locked.session.discarded
        if aborted:
            # A restart keeps the id aborted (and the store drops its journal).
            async with locked.journal_lock:
                await self.store.mark_aborted(session_id, reason or "aborted")
        return aborted

    def forget(self, session_id: str) -> bool:
        """Drop the tombstone of a session that is no longer active (late requests then start a new session)."""
        locked = self._sessions.get(session_id)
        if locked is None or (locked.session.result is None and locked.session.discarded is None):
            return False
        del self._sessions[session_id]
        return True


__all__ = ["LockedSession", "PreparedStep", "RegistryStatistics", "SessionRegistry"]


def _end_ids(tokenizer: Any) -> int | frozenset[int]:
    """The ids a step may end with and still be extended (GLM: several role tokens; ChatML: ``<|im_end|>``)."""
    ids = getattr(tokenizer, "end_of_turn_ids", None)
    return ids if ids and len(ids) > 1 else tokenizer.end_of_turn_id
