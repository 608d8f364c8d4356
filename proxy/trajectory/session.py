"""The session core: one session's trie, chains and machines, driven synchronously (one call per critical section).

Pure: no trio, no I/O. The trio layer (``proxy/controllers/session_registry.py``) holds the session's lock around
each call here and does everything slow outside it (tokenization, generation, export). Each method feeds the
session's ``SessionMachine`` and carries out the effects it returns; where a step attaches among the chains, and what
a commit, a drop and the export tell them, is the branching rule (``statemachines/branching.py``), the same functions
the model checker's worlds call, driving the session's chain machines through ``SessionChains``. Nothing here
branches on a machine's state.

A generation's lifecycle:

1. :meth:`Session.prepare` (critical section): admit (``GenerationRequested``: max steps, session still active),
   walk the trie, attach the pending suffix, find the nearest checkpoint and ask its chain whether to extend its
   tip, fork below it, or start a new segment (``branching.attach``). Returns the opaque :class:`BranchHandle`
   and the ``EncodePlan`` (``encode_plan.py``: incremental after a checkpoint, or a full encode with its boundary
   reason).
2. tokenize, outside the lock. If the incremental encode fails, :meth:`Session.restart_segment` (critical section)
   moves the generation to a new pending chain with a full encode (``tito_failed``). :meth:`Session.set_context`
   records the context tokens on the generation's private state.
3. generate, outside the lock.
4. :meth:`Session.commit` (critical section): accepted only while the session is active; the step goes to the chain
   the chain machine names (in place, or a fork when a sibling moved the tip first) and the answer is upserted in
   the trie (same message: the node is refreshed; different: a sibling). A refresh over the same checkpoint
   position (an idempotent retry: both full encodes, or both extending the same position of the same chain) asks
   the refreshed step's chain (``RefreshRequested``): the new step replaces that chain's tip, or, if the chain was
   continued past it, becomes the node's newest checkpoint without being exported; either way the export holds the
   answer once (spec 5.2, seed 001). Or :meth:`Session.drop`: nothing is committed, the branch is released, and the
   pending trie nodes only this generation needed are removed (a failed request leaves the session as if it had
   never been made; ``prefix_trie.py`` has the ownership rule).

Finalize: :meth:`Session.begin_finalize` (``FinalizeRequested``) collects every chain's tip for export;
:meth:`Session.export_completed` reports the stored export and frees the trie. :meth:`Session.export_failed` keeps
the export job (and the trie) instead: a failed export is a bug or a store fault, never a reason to lose committed
steps, and the next :meth:`Session.begin_finalize` hands the same job out again (``RetryExport``).
:meth:`Session.begin_idle_finalize` is the reaper's finalize (``IdleTimeout``, reason ``idle_timeout``).

A little over the house's ~500 lines: one class, each method one critical section of the machine's events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from proxy.trajectory.boundaries import BoundaryReason
from proxy.trajectory.encode_plan import EncodeKind, EncodePlan, request_keys
from proxy.trajectory.export import FinalizeReason, SessionExport
from proxy.trajectory.message_keys import MessageKey, context_key, effective_template_kwargs
from proxy.trajectory.packed_text import PackedText
from proxy.trajectory.prefix_share import stored_context
from proxy.trajectory.prefix_trie import PrefixTrie, TrieNode, encoding_signature
from proxy.trajectory.session_chains import SessionChains
from proxy.trajectory.session_config import SessionConfig
from proxy.trajectory.session_memory import step_bytes
from proxy.trajectory.session_errors import (
    GenerationFinishedError,
    MaxStepsExceededError,
    SessionAbortedError,
    SessionFinalizedError,
    TrajectoryVersionChangedError,
)
from proxy.trajectory.session_results import (
    CommitResult,
    ExportJob,
    FinalizeResult,
    HeadView,
    SessionDebugView,
    WaitForExport,
)
from proxy.trajectory.pending_step import BranchHandle, Moment, PendingStep
from proxy.trajectory.tokens import (
    RoutedChunk, Step, TokenSpan, WorkingTokens, committed_span, context_span, generation_id, pack_ids,
)
from proxy.trajectory.version_stamp import VersionStamp
from statemachines import branching
from statemachines import chain as chain_sm
from statemachines import session as session_sm

#: the reasons a prompt with no checkpoint on its path gets from how much of it the trie holds (pending nodes too)
_PROMPT_HISTORY_REASONS = frozenset(
    {BoundaryReason.NEW_CONVERSATION, BoundaryReason.RESAMPLE, BoundaryReason.HISTORY_REWRITTEN}
)


def _position_of(step: Step | None) -> tuple[int, int] | None:
    """Where a checkpoint sits: (chain, position), None for no checkpoint (a full encode). Steps that share a
    position answer the same prompt over the same checkpoint position, so they are interchangeable in a segment."""
    return None if step is None else (step.chain_id, step.position)


@attrs.define(eq=False)
class Session:
    """One session's state; every method is one critical section (see the module docstring)."""

    session_id: str
    config: SessionConfig
    # The tokenizer's end-of-turn id (or ids: GLM ends a turn on <|user|> or <|observation|>): a step not ending with
    # one cannot be extended. None: judge by finish reason.
    end_of_turn_id: int | frozenset[int] | None = None
    machine: session_sm.SessionMachine = attrs.field(init=False)
    trie: PrefixTrie | None = attrs.field(factory=PrefixTrie, init=False)
    instance_id: str | None = attrs.field(default=None, init=False)
    result: FinalizeResult | None = attrs.field(default=None, init=False)
    # Why the session was discarded (aborted while active).
    discarded: str | None = attrs.field(default=None, init=False)
    # Why the last export failed, while the session waits for a finalize to retry it (None otherwise).
    export_failure: str | None = attrs.field(default=None, init=False)
    # The export finalize built, kept until it is stored: a retry after a failed export exports exactly it (the
    # chains were closed by the first attempt; reward_info and the ids are those of the first finalize call).
    _export_job: ExportJob | None = attrs.field(default=None, init=False)
    _chains: SessionChains = attrs.field(factory=SessionChains, init=False)
    _pending_steps: dict[str, PendingStep] = attrs.field(factory=dict, init=False)
    _head: Step | None = attrs.field(default=None, init=False)
    _committed: int = attrs.field(default=0, init=False)
    _next_generation: int = attrs.field(default=0, init=False)
    # The epoch and version of the session's stamped steps (the first stamped commit sets it; spec 7).
    version_stamp: VersionStamp | None = attrs.field(default=None, init=False)
    # Approximate bytes of the committed steps (session_memory.py); 0 once the session freed its data.
    held_bytes: int = attrs.field(default=0, init=False)
    # Critical sections of generations so far (prepare, restart, commit): the step journal orders a replay by it.
    _events: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        self.machine = session_sm.SessionMachine.new(self.config.max_steps_per_session)

    # -- prepare ------------------------------------------------------------------------------------------------------

    def prepare(
        self,
        messages: Sequence[Any],
        *,
        tools: Sequence[Any] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        instance_id: str | None = None,
        turn_id: str | None = None,
        request_keys: tuple[list[MessageKey], list[str | PackedText | None]] | None = None,
    ) -> tuple[BranchHandle, EncodePlan]:
        """Admit a generation and pick its branch; raises MaxStepsExceededError, SessionFinalizedError,
        InvalidMessagesError (nothing changes then). ``request_keys`` (from :meth:`request_keys`, computed outside
        the lock: it is the O(request text) part) saves recomputing them here."""
        keys, variants = request_keys if request_keys is not None else self.request_keys(messages)
        for effect in self.machine.send(session_sm.GenerationRequested()):
            if isinstance(effect, session_sm.MaxStepsReached):
                raise MaxStepsExceededError(effect.limit, effect.steps, effect.in_flight)
            if isinstance(effect, session_sm.SessionClosed):
                raise SessionFinalizedError(effect.reason)
        # Admitted (AdmitGeneration). From here to the return nothing raises: the trie holds the attach node for the
        # generation, and its commit or drop gives the hold back.
        prepared = self._moment()
        kwargs = effective_template_kwargs(chat_template_kwargs, self.config.default_template_kwargs)
        ckey = context_key(tools, kwargs)
        trie = self.trie
        context = trie.context(ckey, tools, kwargs)
        node, matched = trie.match(context, keys, variants)
        attach = trie.attach(node, messages[matched:], keys[matched:], variants[matched:])
        base = trie.nearest_checkpoint(attach)
        if base is None:
            claim = branching.attach(self._chains, None)
            reason = self._no_checkpoint_reason(context, keys, variants, matched)
        else:
            claim = branching.attach(self._chains, base, self._chains.of(base), base.position)
            reason = BoundaryReason(claim.closed_tip.value) if claim.closed_tip is not None else None
        self._next_generation += 1
        pending = PendingStep(
            generation=self._next_generation, generation_id=generation_id(self.session_id, self._next_generation),
            attach=attach, claim=claim,
            boundary_reason=reason, boundary_detail=None, turn_id=turn_id, instance_id=instance_id,
            prepared=prepared,
        )
        if base is not None:
            pending.prefix_step, pending.prefix_depth = base.step_id, base.node.depth
        self._pending_steps[pending.generation_id] = pending
        handle = BranchHandle(self.session_id, pending.generation_id, pending)
        return handle, self._plan(pending, messages, context)

    def request_keys(self, messages: Sequence[Any]) -> tuple[list[MessageKey], list[str | PackedText | None]]:
        """The trie keys and reasoning variants of a request's messages (pure; raises InvalidMessagesError)."""
        return request_keys(messages, ignore_cch=self.config.ignore_cch_for_prefix_hash,
                            known=self.echoed_prefix(messages))

    def echoed_prefix(self, messages: Any) -> list[TrieNode | None]:
        """The trie nodes of the request's leading messages the session already holds (``request_keys(known=)``);
        empty for anything but a list or tuple, or once the session freed its trie. Read only: call it on the event loop
        (never in a worker thread while the loop may change the trie); its answer stays exact afterwards."""
        if self.trie is None or type(messages) not in (list, tuple):
            return []
        return self.trie.echoed_prefix(messages)

    def _no_checkpoint_reason(
        self, context: TrieNode, keys: Sequence[MessageKey], variants: Sequence[str | PackedText | None], matched: int
    ) -> BoundaryReason:
        """Why a request whose path holds no checkpoint starts a segment (boundaries.py has the table)."""
        if not self._committed:
            return BoundaryReason.SESSION_START
        for other in self.trie.contexts():
            if other is not context:
                node, _ = self.trie.match(other, keys, variants)
                if self.trie.nearest_checkpoint(node) is not None:
                    return BoundaryReason.CONTEXT_CHANGED
        if matched == 0:
            return BoundaryReason.NEW_CONVERSATION
        if matched == len(keys):
            return BoundaryReason.RESAMPLE
        return BoundaryReason.HISTORY_REWRITTEN

    @staticmethod
    def _plan(pending: PendingStep, messages: Sequence[Any], context: TrieNode) -> EncodePlan:
        """The encode decision for the generation's mode."""
        info = context.message
        base = pending.claim.base
        if pending.claim.mode is branching.Mode.NEW_SEGMENT:
            return EncodePlan(EncodeKind.FULL, None, tuple(messages), (), info.tools, info.template_kwargs,
                              pending.boundary_reason, pending.boundary_detail)
        split = base.node.depth
        return EncodePlan(EncodeKind.INCREMENTAL, base, tuple(messages[split:]), tuple(messages[:split]),
                          info.tools, info.template_kwargs)

    def restart_segment(self, handle: BranchHandle, detail: str, messages: Sequence[Any]) -> EncodePlan:
        """The incremental encode failed: the generation moves to a new segment with a full encode."""
        pending = self._live(handle)
        pending.restarted = self._moment()
        # A new pending chain; or, when the session left ACTIVE meanwhile, no chain (the commit will be rejected):
        # either way the plan is a full encode.
        effects = self.machine.send(session_sm.TitoFailed())
        pending.claim = branching.restart_segment(self._chains, pending.claim, effects)
        pending.boundary_reason, pending.boundary_detail = BoundaryReason.TITO_FAILED, detail
        pending.tito_failed = True
        return self._plan(pending, messages, PrefixTrie.context_of(pending.attach))

    @staticmethod
    def build_span(
        handle: BranchHandle,
        generated_ids: Sequence[int],
        logprobs: Sequence[float] | None,
        versions: Sequence[str | None],
        routed_experts: Sequence[RoutedChunk],
    ) -> TokenSpan:
        """The span a commit of this generation stores: its context tokens, then ``generated_ids``. Touches only
        the generation's private state, so it runs outside the lock (O(new tokens))."""
        pending = handle._pending
        if pending.context is None:
            raise GenerationFinishedError(f"generation {handle.generation_id} commits before its context was set")
        return committed_span(pending.context, generated_ids, logprobs, versions, routed_experts)

    def set_context(self, handle: BranchHandle, ids: Sequence[int], mask: Sequence[int] | None = None) -> WorkingTokens:
        """Record the context tokens the step adds (with the client's mask, if any); returns the generation's private
        token state. Siblings that encoded the same context on the same prompt node share one copy of it."""
        pending = self._live(handle)
        base = pending.claim.base
        signature = encoding_signature(base)
        packed = pack_ids(ids)
        if base is None:  # a full encode: what it repeats of the path the session holds is not stored again
            packed = stored_context(packed, PrefixTrie.nearest_checkpoint(pending.attach))
        stored = pending.attach.shared_encoding(signature, packed)
        pending.context, pending.encoding = context_span(stored, mask), signature
        return WorkingTokens(base, pending.context)

    @staticmethod
    def committed_step(handle: BranchHandle) -> int | None:
        """The step the handle's generation committed, or None (not committed: in flight, dropped or rejected)."""
        return handle._pending.step_id

    @staticmethod
    def journal_facts(handle: BranchHandle) -> PendingStep:
        """What the step journal records of a committed generation (``step_journal.py``): its pending step, read
        only, once its commit returned (nothing changes it any more)."""
        pending = handle._pending
        if pending.step_id is None:
            raise GenerationFinishedError(f"generation {handle.generation_id} did not commit")
        return pending

    def _moment(self) -> Moment:
        """The counters before a critical section of a generation; counts the section."""
        moment = Moment(self._events, self._next_generation, self._chains.last_id)
        self._events += 1
        return moment

    def rewind(self, moment: Moment) -> None:
        """Replay only (``session_replay.py``): set the counters to what they were before the recorded critical
        section, so it hands out the generation and chain ids it did live (generations that never committed, and
        are not in the journal, left gaps)."""
        self._events, self._next_generation = moment.events, moment.generations
        self._chains.rewind_ids(moment.chains)

    def restore_boundary_reason(self, handle: BranchHandle, reason: str | None) -> None:
        """Replay only: the boundary reason the live prepare gave a step with no checkpoint on its path. Whether its
        prompt was a resample, a rewritten history or a new conversation depends on how much of it the trie held,
        pending nodes of generations that never committed included (they are not in the journal), so the journal
        keeps the live answer; any other difference is a replay bug (ValueError)."""
        pending = self._live(handle)
        recorded = BoundaryReason(reason) if reason is not None else None
        if pending.boundary_reason is recorded:
            return
        if {pending.boundary_reason, recorded} <= _PROMPT_HISTORY_REASONS:
            pending.boundary_reason = recorded
            return
        raise ValueError(f"replayed boundary reason {pending.boundary_reason}, recorded {recorded}")

    def _live(self, handle: BranchHandle) -> PendingStep:
        """The handle's pending step, refusing one that already committed or dropped."""
        pending = handle._pending
        if pending.finished or handle.session_id != self.session_id:
            raise GenerationFinishedError(f"generation {handle.generation_id} already committed or dropped")
        return pending

    # -- versions (spec 7, without partial rollout) -------------------------------------------------------------------

    def check_version(self, stamp: VersionStamp) -> None:
        """Raise TrajectoryVersionChangedError when ``stamp`` differs from the session's steps' (nothing changes).
        A session with no stamped step accepts any."""
        held = self.version_stamp
        if held is not None and not held.matches(stamp):
            raise TrajectoryVersionChangedError(held, stamp)

    # -- commit / drop -----------------------------------------------------------------------------------------------

    def commit(
        self,
        handle: BranchHandle,
        span: TokenSpan,
        *,
        finish_reason: str,
        assistant_message: Mapping[str, Any],
        key: MessageKey,
        variant: str | None,
        logprobs_invalid: bool,
        version_stamp: VersionStamp | None = None,
    ) -> CommitResult:
        """Commit the generation's step (``span``: its context tokens then its generated tokens); raises
        SessionFinalizedError when the session left ACTIVE (nothing changes then). With ``version_stamp`` (no
        partial rollout) the step must match the session's earlier stamped steps, else TrajectoryVersionChangedError
        (nothing changes, the handle stays live: drop it); the first stamped commit sets the session's stamp."""
        pending = self._live(handle)
        if pending.context is None:
            raise GenerationFinishedError(f"generation {handle.generation_id} commits before its context was set")
        if version_stamp is not None:
            self.check_version(version_stamp)
        effects = self.machine.send(session_sm.CommitRequested())
        # Whatever the outcome, the handle is spent: a generation commits at most once.
        pending.finished = True
        del self._pending_steps[pending.generation_id]
        for effect in effects:
            if isinstance(effect, session_sm.RejectCommit):
                raise SessionFinalizedError(f"commit rejected: {effect.reason}")
        # Accepted (AcceptCommit).
        pending.committed = self._moment()
        extendable = self._extendable(span, finish_reason)
        close = None
        if not extendable:
            length = finish_reason == "length"
            close = chain_sm.CloseReason.LENGTH_EXHAUSTED if length else chain_sm.CloseReason.NO_END_OF_TURN
        boundary_reason = pending.boundary_reason.value if pending.boundary_reason is not None else None
        boundary_detail = pending.boundary_detail
        claim = pending.claim
        old = self._refreshed_step(pending, key, variant)
        refresh = branching.Refresh(self._chains.of(old), old.position) if old is not None else None
        placement = branching.commit(self._chains, claim, close, refresh)
        chain = placement.chain
        replaced = old if placement.placed is branching.Placed.TIP_REFRESHED else None
        if placement.placed in (branching.Placed.TIP_REFRESHED, branching.Placed.SHADOWED) and claim.base is None:
            # The step takes the refreshed step's position, so a segment that begins with it begins for the reason
            # that position began it: a retry of a first turn is the same sample again, not a resample beside it.
            # A shadowed one too: a continuation built on it that replaces its chain's tip puts it on the segment's
            # path in the refreshed step's place.
            boundary_reason, boundary_detail = old.boundary_reason, old.boundary_detail
        node, refreshed = self.trie.upsert_assistant(pending.attach, assistant_message, key, variant)
        self._committed += 1
        step = Step.of(
            span, step_id=self._committed, base=claim.base, chain_id=chain.chain_id,
            position=placement.position, node=node, session_id=self.session_id,
            generation=pending.generation, finish_reason=finish_reason, extendable=extendable,
            turn_id=pending.turn_id,
            boundary_reason=boundary_reason, boundary_detail=boundary_detail, tito_failed=pending.tito_failed,
            logprobs_invalid=logprobs_invalid,
        )
        self.trie.set_checkpoint(node, step)
        pending.attach.settle_encoding(step)
        # The path is committed structure now; the hold only kept it while the generation ran.
        self.trie.release(pending.attach)
        if pending.instance_id is not None and self.instance_id is None:
            self.instance_id = pending.instance_id
        if placement.is_tip:
            chain.tip = step
        if version_stamp is not None and self.version_stamp is None:
            self.version_stamp = version_stamp
        self._head = step
        self.held_bytes += step_bytes(span)
        pending.step_id = step.step_id
        return CommitResult(step.step_id, chain.chain_id, refreshed, placement.forked, extendable,
                            replaced.step_id if replaced is not None else None,
                            placement.placed is branching.Placed.SHADOWED)

    @staticmethod
    def _refreshed_step(pending: PendingStep, key: MessageKey, variant: str | None) -> Step | None:
        """The committed step the answer may refresh: the newest checkpoint of the node with the same answer, when
        it sits over the same checkpoint position as the generation's base. Its chain decides what the refresh does
        (replace its tip, shadow a step it continued past, or decline: the step then commits as one of its own)."""
        node = PrefixTrie.find_answer(pending.attach, key, variant)
        old = node.checkpoint if node is not None else None
        if old is None or not branching.same_checkpoint(_position_of(old.base), _position_of(pending.claim.base)):
            return None
        return old

    def _extendable(self, span: TokenSpan, finish_reason: str) -> bool:
        """Does the step end at a turn boundary TITO can extend?"""
        if self.end_of_turn_id is not None:
            ends = self.end_of_turn_id if isinstance(self.end_of_turn_id, frozenset) else {self.end_of_turn_id}
            return span.last_generated_id() in ends
        return finish_reason != "length"

    def drop(self, handle: BranchHandle) -> bool:
        """The generation ends without committing (failed, cancelled, bad input): release its branch and remove
        the pending trie structure only it needed (its shared encoding too), so the session is as if it had never
        been asked. Idempotent: False when the handle had already committed or dropped. Outside ACTIVE the trie is
        frozen for the export (and freed after it): nothing is removed then."""
        pending = handle._pending
        if pending.finished:
            return False
        pending.finished = True
        del self._pending_steps[pending.generation_id]
        if branching.release(self._chains, pending.claim, self.machine.send(session_sm.GenerationDropped())):
            self._release_prompt(pending)
        return True

    def _release_prompt(self, pending: PendingStep) -> None:
        """Give back what the failed generation held in the trie: its encoding entry, then its attach node."""
        if pending.context is not None:
            pending.attach.release_encoding(pending.encoding, pending.context.stored_context)
        self.trie.release(pending.attach)

    # -- finalize ----------------------------------------------------------------------------------------------------

    def begin_finalize(
        self,
        *,
        reward_info: Mapping[str, Any] | None = None,
        instance_id: str | None = None,
        rollout_id: str | None = None,
    ) -> ExportJob | WaitForExport | FinalizeResult:
        """Finalize: an export job (first call), a wait (export running), or the stored result (idempotent)."""
        for effect in self.machine.send(session_sm.FinalizeRequested()):
            if isinstance(effect, session_sm.ExportSession):
                return self._start_export(effect, reward_info, instance_id, rollout_id, FinalizeReason.REQUESTED)
            if isinstance(effect, session_sm.RetryExport):
                assert self._export_job is not None, "a failed export keeps its job"
                return self._export_job
            if isinstance(effect, session_sm.AlreadyFinalizing):
                return WaitForExport()
            if isinstance(effect, session_sm.AlreadyFinalized):
                return self.result
            if isinstance(effect, session_sm.FinalizeRefused):
                raise SessionAbortedError(self.discarded or effect.reason)
        raise AssertionError("FinalizeRequested always has an effect")  # pragma: no cover

    def begin_idle_finalize(self) -> ExportJob | None:
        """The session was idle for the idle timeout: the export job of a finalize with no reward (reason
        ``idle_timeout``), or None when the session keeps going (a generation is in flight) or already left ACTIVE."""
        for effect in self.machine.send(session_sm.IdleTimeout()):
            if isinstance(effect, session_sm.ExportSession):
                return self._start_export(effect, None, None, None, FinalizeReason.IDLE_TIMEOUT)
        return None

    def _start_export(
        self,
        effect: session_sm.ExportSession,
        reward_info: Mapping[str, Any] | None,
        instance_id: str | None,
        rollout_id: str | None,
        reason: FinalizeReason,
    ) -> ExportJob:
        """ExportSession: close every chain and keep the export job (a failed export retries exactly it)."""
        exported = branching.export(self._chains, self._chains)
        tips = [segment.chain.tip for segment in exported.segments]
        export = SessionExport(
            session_id=self.session_id,
            rollout_id=rollout_id if rollout_id is not None else self.session_id,
            instance_id=instance_id if instance_id is not None else self.instance_id,
            reward_info=reward_info,
            tips=tuple(tips),
            reason=reason,
        )
        self._export_job = ExportJob(export, effect.steps)
        return self._export_job

    def export_completed(self, result: FinalizeResult) -> None:
        """The segments are stored: remember the answer and free the trie."""
        for effect in self.machine.send(session_sm.ExportCompleted()):
            if isinstance(effect, session_sm.Finalized):
                self.result = result
                self.export_failure = None
                self._export_job = None
                self._free()

    def export_failed(self, reason: str) -> None:
        """The export failed: keep everything (the job, the trie) for the next finalize, which retries it."""
        for effect in self.machine.send(session_sm.ExportFailed(reason)):
            if isinstance(effect, session_sm.KeepForRetry):
                self.export_failure = effect.reason

    def drained(self) -> None:
        """The store drained the session's last segment."""
        self.machine.send(session_sm.SegmentsDrained())

    def abort(self) -> bool:
        """Discard an active session without export; False when there was nothing to abort."""
        for effect in self.machine.send(session_sm.AbortRequested()):
            if isinstance(effect, session_sm.DiscardSession):
                self.discarded = effect.reason
                self._free()
                return True
            if isinstance(effect, session_sm.AbortRefused):
                raise SessionFinalizedError(effect.reason)
        return False

    def _free(self) -> None:
        """Drop the trie, the chains and the steps (the session keeps its machine to reject stragglers)."""
        self.trie = None
        self._chains.clear()
        self._head = None
        self.held_bytes = 0

    # -- reporting ---------------------------------------------------------------------------------------------------

    def preview_export(self) -> SessionExport | None:
        """What a finalize would export now, changing nothing (the trajectory viewer previews a live session's
        segments with ``export_segments``): the tip of every chain that owns a step, which are exactly the chains
        finalize's ``ExportRequested`` exports. None once the session freed its data."""
        if self.trie is None:
            return None
        tips = tuple(chain.tip for chain in self._chains if chain.tip is not None)
        return SessionExport(self.session_id, self.session_id, self.instance_id, None, tips)

    def debug_view(self) -> SessionDebugView:
        """The session at a glance."""
        stats = self.machine.statistics()
        chains = [chain.machine.statistics() for chain in self._chains]
        head = None
        if self._head is not None:
            step = self._head
            head = HeadView(step.step_id, step.chain_id, step.generation_id, step.finish_reason, step.node.depth,
                            step.length)
        return SessionDebugView(
            session_id=self.session_id,
            state=stats.state,
            instance_id=self.instance_id,
            steps=stats.steps,
            in_flight=stats.in_flight,
            rejected_commits=stats.rejected,
            max_steps=stats.max_steps,
            head=head,
            branches=len(chains),
            open_branches=sum(chain.state in ("OPEN", "EXTENDING") for chain in chains),
            trie=self.trie.statistics() if self.trie is not None else None,
            segments=self.result.segments if self.result is not None else None,
            finalize_reason=self.result.reason if self.result is not None else None,
            held_bytes=self.held_bytes,
        )


__all__ = ["BranchHandle", "PendingStep", "Session"]
