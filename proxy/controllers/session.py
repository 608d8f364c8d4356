"""The session core: one session's trie, chains and machines, driven synchronously (one call per critical section).

The trio layer (``session_registry.py``) holds the session's lock around each call here and does everything slow
outside it (tokenization, generation, export). Each method feeds the session's ``SessionMachine`` (and the
``ChainMachine`` of the chain concerned) and carries out the effects they return; it never branches on a machine's
state.

A generation's lifecycle:

1. :meth:`Session.prepare` (critical section): admit (``GenerationRequested``: max steps, session still active),
   walk the trie, attach the pending suffix, find the nearest checkpoint and ask its chain whether to extend its
   tip, fork below it, or start a new segment (``ExtensionRequested``). Returns the opaque :class:`BranchHandle`
   and the :class:`EncodePlan` (incremental after a checkpoint, or a full encode with its boundary reason).
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
"""

from __future__ import annotations

import enum
import os
from array import array
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from proxy.controllers.errors import (
    GenerationFinishedError,
    InvalidMessagesError,
    MaxStepsExceededError,
    SessionAbortedError,
    SessionFinalizedError,
    TrajectoryVersionChangedError,
)
from proxy.tokenization.results import TitoFailure
from proxy.trajectory.boundaries import BoundaryReason
from proxy.trajectory.export import ExportOptions, SessionExport
from proxy.trajectory.message_keys import (
    MessageKey,
    MessageKeyError,
    context_key,
    effective_template_kwargs,
    message_key,
    reasoning_variant,
)
from proxy.trajectory.prefix_trie import PrefixTrie, TrieNode, TrieStatistics
from proxy.trajectory.tokens import RoutedChunk, Step, TokenSpan, WorkingTokens, committed_span, context_span
from statemachines import branching
from statemachines import chain as chain_sm
from statemachines import session as session_sm

#: the environment variable read when no max-steps value is configured (spec 5.5)
MAX_STEPS_ENV = "DRESSAGE_PROXY_MAX_STEPS_PER_SESSION"


def max_steps_from_env(environ: Mapping[str, str] | None = None) -> int | None:
    """``DRESSAGE_PROXY_MAX_STEPS_PER_SESSION`` as a positive int; unset, empty or 0 means unlimited."""
    raw = (os.environ if environ is None else environ).get(MAX_STEPS_ENV, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{MAX_STEPS_ENV}={raw!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"{MAX_STEPS_ENV}={raw!r} is negative")
    return value or None


@attrs.frozen
class SessionConfig:
    """Settings of every session of a registry (the CLI wiring of the flags is a later issue)."""

    # Steps a session may hold (generations in flight count as reserved); None: unlimited. Read from
    # DRESSAGE_PROXY_MAX_STEPS_PER_SESSION when not given.
    max_steps_per_session: int | None = attrs.field(factory=max_steps_from_env)
    # The export policy: build mode, export-all-checkpoints, per-token versions, stale-version masking.
    export: ExportOptions = ExportOptions()
    # --ignore-cch-for-prefix-hash: blank cch=... billing hashes in message keys (matching only).
    ignore_cch_for_prefix_hash: bool = False
    # Chat-template kwargs applied under every request's own (they are part of the context key).
    default_template_kwargs: Mapping[str, Any] = attrs.field(factory=dict)
    # Full encodes of requests whose text exceeds this many characters run in a worker thread.
    thread_encode_chars: int = 16_384
    # Exports of sessions holding more tokens than this run in a worker thread.
    thread_export_tokens: int = 65_536


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


class EncodeKind(enum.Enum):
    """How a step's context tokens are produced."""

    INCREMENTAL = "incremental"
    FULL = "full"


@attrs.frozen
class EncodePlan:
    """The TITO/encode decision of a prepare: what to tokenize, outside the lock."""

    kind: EncodeKind
    # The checkpoint an incremental encode appends to (None for a full encode).
    base: Step | None
    # Full: every message. Incremental: the messages after the checkpoint, and those up to it.
    messages: tuple[Any, ...]
    prior_messages: tuple[Any, ...]
    tools: tuple[Any, ...] | None
    template_kwargs: Mapping[str, Any]
    # Set for a full encode: why the step starts a segment.
    boundary_reason: BoundaryReason | None = None
    boundary_detail: str | None = None


def request_keys(messages: Sequence[Any], *, ignore_cch: bool = False) -> tuple[list[MessageKey], list[str | None]]:
    """The trie keys and reasoning variants of a request's messages: pure and O(request text), so the registry
    computes them before taking the session's lock. Raises InvalidMessagesError."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence) or not messages:
        raise InvalidMessagesError("messages must be a non-empty list")
    try:
        keys = [message_key(message, ignore_cch=ignore_cch) for message in messages]
    except MessageKeyError as exc:
        raise InvalidMessagesError(str(exc)) from None
    for key in keys:
        # Keys cache their hash: computing it here keeps the O(text) hashing out of the critical section.
        hash(key)
    return keys, [reasoning_variant(message) for message in messages]


def tokenize_plan(tokenizer: Any, plan: EncodePlan) -> list[int] | TitoFailure:
    """The context ids of a plan (sync, CPU-bound): the TITO fragment after the checkpoint, or the full encode.

    An incremental failure is returned (the caller restarts the segment); a full encode raises ``TitoError``.
    Only the checkpoint's last tokens matter to ``encode_incremental`` (it checks that they end with the end-of-turn
    token), so it gets the base step's last span instead of the materialized prefix (an adapter to its contract).
    """
    tools = list(plan.tools) if plan.tools is not None else None
    kwargs = dict(plan.template_kwargs)
    if plan.kind is EncodeKind.INCREMENTAL:
        result = tokenizer.encode_incremental(
            plan.base.span.last_ids(), list(plan.messages), prior_messages=list(plan.prior_messages), tools=tools,
            chat_template_kwargs=kwargs,
        )
        return list(result.ids) if result.ok else result
    return list(tokenizer.encode_full(list(plan.messages), tools, kwargs))


def _position_of(step: Step | None) -> tuple[int, int] | None:
    """Where a checkpoint sits: (chain, position), None for no checkpoint (a full encode). Steps that share a
    position answer the same prompt over the same checkpoint position, so they are interchangeable in a segment."""
    return None if step is None else (step.chain_id, step.position)


@attrs.define(eq=False)
class _Chain:
    """A chain: its machine and its tip step."""

    chain_id: int
    machine: chain_sm.ChainMachine
    tip: Step | None = None


@attrs.define(eq=False)
class SessionChains:
    """The session's chains by id; the ``ChainPort`` through which the branching rule (``statemachines/
    branching.py``) drives their machines."""

    _chains: dict[int, _Chain] = attrs.field(factory=dict)
    _last_id: int = 0

    def send(self, chain: _Chain, event: object) -> list[object]:
        """Feed the chain's machine."""
        return chain.machine.send(event)

    def new_chain(self, base: Step | None) -> _Chain:
        """A new chain (the base is the first step's own: ``Step.base``)."""
        self._last_id += 1
        chain = _Chain(self._last_id, chain_sm.ChainMachine.new())
        self._chains[chain.chain_id] = chain
        return chain

    def forget(self, chain: _Chain) -> None:
        """The chain owns no step and never will."""
        del self._chains[chain.chain_id]

    def of(self, step: Step) -> _Chain:
        """The chain that holds ``step``."""
        return self._chains[step.chain_id]

    def __iter__(self) -> Iterator[_Chain]:
        return iter(list(self._chains.values()))

    def __len__(self) -> int:
        return len(self._chains)

    def clear(self) -> None:
        """Forget every chain (the session's data is freed)."""
        self._chains.clear()


@attrs.define(eq=False)
class _Generation:
    """A generation's record inside its session; reached only through its handle."""

    generation_id: str
    attach: TrieNode
    # Where its step will attach among the chains (the branching rule's decision at prepare).
    claim: branching.BranchClaim[_Chain, Step]
    boundary_reason: BoundaryReason | None
    boundary_detail: str | None
    turn_id: str | None
    tito_failed: bool = False
    # The request's instance id: the session takes it when the step commits (a failed request leaves nothing).
    instance_id: str | None = None
    # The context tokens this step adds (set after tokenization), and the shared-encoding entry they are held in on
    # the attach node (its signature), given back if the generation fails.
    context: TokenSpan | None = None
    encoding: Any = None
    # Committed or dropped: a handle ends exactly once (architecture invariant 4).
    finished: bool = False
    # The step it committed (None: not committed).
    step_id: int | None = None


@attrs.frozen(eq=False)
class BranchHandle:
    """Opaque: what prepare hands a generation and commit or drop takes back. Never inspect it."""

    session_id: str
    generation_id: str
    _generation: _Generation = attrs.field(repr=False)


@attrs.frozen
class CommitResult:
    """What a commit did."""

    step_id: int
    chain_id: int
    # The assistant node already held a checkpoint with the same message (an idempotent retry refreshed it).
    refreshed: bool
    # The step started a new chain that shares its base's prefix (a sibling committed on the base first, or the
    # base was below a chain's tip).
    forked: bool
    # False when the step did not end with the end-of-turn token: a continuation will start a new segment.
    extendable: bool
    # A refresh that replaced its chain's tip: the step it replaced (exported no more; this step is, in its place).
    replaced_step: int | None = None
    # A refresh of a checkpoint its chain had continued past: this step is the node's newest checkpoint (later
    # continuations fork from it) but no segment holds it; the chain keeps the step it was continued from.
    shadowed: bool = False


@attrs.frozen
class FinalizeResult:
    """What finalize stored (the same answer for every finalize call of the session)."""

    session_id: str
    segments: int
    steps: int
    trajectory_ids: tuple[str, ...]


@attrs.frozen
class ExportJob:
    """Finalize started: export these chains, then report with export_completed or export_failed."""

    export: SessionExport
    # Steps the session committed (every one of them is in exactly one exported chain).
    steps: int


@attrs.frozen
class WaitForExport:
    """Finalize is already exporting: wait for its outcome."""


@attrs.frozen
class HeadView:
    """The session's most recent commit."""

    step_id: int
    chain_id: int
    generation_id: str
    finish_reason: str
    # Messages of its conversation (request plus answer), and its tokens.
    messages: int
    tokens: int


@attrs.frozen
class SessionDebugView:
    """A session at a glance (spec 5.5's debug view): reporting only."""

    session_id: str
    state: str
    instance_id: str | None
    steps: int
    in_flight: int
    rejected_commits: int
    max_steps: int | None
    head: HeadView | None
    # Chains that own a step (or are pending for an in-flight generation), and how many of them can be extended.
    branches: int
    open_branches: int
    # None once the trie was freed (finalized, aborted).
    trie: TrieStatistics | None
    segments: int | None


@attrs.define(eq=False)
class Session:
    """One session's state; every method is one critical section (see the module docstring)."""

    session_id: str
    config: SessionConfig
    # The tokenizer's end-of-turn id: a step not ending with it cannot be extended. None: judge by finish reason.
    end_of_turn_id: int | None = None
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
    _generations: dict[str, _Generation] = attrs.field(factory=dict, init=False)
    _head: Step | None = attrs.field(default=None, init=False)
    _committed: int = attrs.field(default=0, init=False)
    _next_generation: int = attrs.field(default=0, init=False)
    # The epoch and version of the session's stamped steps (the first stamped commit sets it; spec 7).
    version_stamp: VersionStamp | None = attrs.field(default=None, init=False)
    # The session's Idempotency-Key records (``proxy/controllers/idempotency.py``), created by the registry on first
    # use; freed with the trie.
    idempotency: Any = attrs.field(default=None, init=False)

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
        request_keys: tuple[list[MessageKey], list[str | None]] | None = None,
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
        generation = _Generation(
            generation_id=f"{self.session_id}#g{self._next_generation}", attach=attach, claim=claim,
            boundary_reason=reason, boundary_detail=None, turn_id=turn_id, instance_id=instance_id,
        )
        self._generations[generation.generation_id] = generation
        handle = BranchHandle(self.session_id, generation.generation_id, generation)
        return handle, self._plan(generation, messages, context)

    def request_keys(self, messages: Sequence[Any]) -> tuple[list[MessageKey], list[str | None]]:
        """The trie keys and reasoning variants of a request's messages (pure; raises InvalidMessagesError)."""
        return request_keys(messages, ignore_cch=self.config.ignore_cch_for_prefix_hash)

    def _no_checkpoint_reason(
        self, context: TrieNode, keys: Sequence[MessageKey], variants: Sequence[str | None], matched: int
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
    def _plan(generation: _Generation, messages: Sequence[Any], context: TrieNode) -> EncodePlan:
        """The encode decision for the generation's mode."""
        info = context.message
        base = generation.claim.base
        if generation.claim.mode is branching.Mode.NEW_SEGMENT:
            return EncodePlan(EncodeKind.FULL, None, tuple(messages), (), info.tools, info.template_kwargs,
                              generation.boundary_reason, generation.boundary_detail)
        split = base.node.depth
        return EncodePlan(EncodeKind.INCREMENTAL, base, tuple(messages[split:]), tuple(messages[:split]),
                          info.tools, info.template_kwargs)

    def restart_segment(self, handle: BranchHandle, detail: str, messages: Sequence[Any]) -> EncodePlan:
        """The incremental encode failed: the generation moves to a new segment with a full encode."""
        generation = self._live(handle)
        # A new pending chain; or, when the session left ACTIVE meanwhile, no chain (the commit will be rejected):
        # either way the plan is a full encode.
        effects = self.machine.send(session_sm.TitoFailed())
        generation.claim = branching.restart_segment(self._chains, generation.claim, effects)
        generation.boundary_reason, generation.boundary_detail = BoundaryReason.TITO_FAILED, detail
        generation.tito_failed = True
        return self._plan(generation, messages, PrefixTrie.context_of(generation.attach))

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
        generation = handle._generation
        if generation.context is None:
            raise GenerationFinishedError(f"generation {handle.generation_id} commits before its context was set")
        return committed_span(generation.context, generated_ids, logprobs, versions, routed_experts)

    def set_context(self, handle: BranchHandle, ids: Sequence[int], mask: Sequence[int] | None = None) -> WorkingTokens:
        """Record the context tokens the step adds (with the client's mask, if any); returns the generation's private
        token state. Siblings that encoded the same context on the same prompt node share one array."""
        generation = self._live(handle)
        base = generation.claim.base
        signature = ("full",) if base is None else ("after", base.step_id)
        stored = generation.attach.shared_encoding(signature, array("i", ids))
        generation.context, generation.encoding = context_span(stored, mask), signature
        return WorkingTokens(base, generation.context)

    @staticmethod
    def committed_step(handle: BranchHandle) -> int | None:
        """The step the handle's generation committed, or None (not committed: in flight, dropped or rejected)."""
        return handle._generation.step_id

    def _live(self, handle: BranchHandle) -> _Generation:
        """The handle's generation, refusing one that already committed or dropped."""
        generation = handle._generation
        if generation.finished or handle.session_id != self.session_id:
            raise GenerationFinishedError(f"generation {handle.generation_id} already committed or dropped")
        return generation

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
        assistant_message: Any,
        key: MessageKey,
        variant: str | None,
        logprobs_invalid: bool,
        version_stamp: VersionStamp | None = None,
    ) -> CommitResult:
        """Commit the generation's step (``span``: its context tokens then its generated tokens); raises
        SessionFinalizedError when the session left ACTIVE (nothing changes then). With ``version_stamp`` (no
        partial rollout) the step must match the session's earlier stamped steps, else TrajectoryVersionChangedError
        (nothing changes, the handle stays live: drop it); the first stamped commit sets the session's stamp."""
        generation = self._live(handle)
        if generation.context is None:
            raise GenerationFinishedError(f"generation {handle.generation_id} commits before its context was set")
        if version_stamp is not None:
            self.check_version(version_stamp)
        effects = self.machine.send(session_sm.CommitRequested())
        # Whatever the outcome, the handle is spent: a generation commits at most once.
        generation.finished = True
        del self._generations[generation.generation_id]
        for effect in effects:
            if isinstance(effect, session_sm.RejectCommit):
                raise SessionFinalizedError(f"commit rejected: {effect.reason}")
        # Accepted (AcceptCommit).
        extendable = self._extendable(span, finish_reason)
        close = None
        if not extendable:
            length = finish_reason == "length"
            close = chain_sm.CloseReason.LENGTH_EXHAUSTED if length else chain_sm.CloseReason.NO_END_OF_TURN
        boundary_reason = generation.boundary_reason.value if generation.boundary_reason is not None else None
        boundary_detail = generation.boundary_detail
        claim = generation.claim
        old = self._refreshed_step(generation, key, variant)
        refresh = branching.Refresh(self._chains.of(old), old.position) if old is not None else None
        placement = branching.commit(self._chains, claim, close, refresh)
        chain = placement.chain
        replaced = old if placement.placed is branching.Placed.TIP_REFRESHED else None
        if replaced is not None and claim.base is None:
            # The segment still begins for the reason the replaced step began it: a retry of a first turn is the
            # same sample again, not a resample beside it.
            boundary_reason, boundary_detail = replaced.boundary_reason, replaced.boundary_detail
        node, refreshed = self.trie.upsert_assistant(generation.attach, assistant_message, key, variant)
        self._committed += 1
        step = Step(
            step_id=self._committed, base=claim.base, span=span, chain_id=chain.chain_id,
            position=placement.position, node=node,
            generation_id=generation.generation_id, finish_reason=finish_reason, extendable=extendable,
            turn_id=generation.turn_id,
            boundary_reason=boundary_reason, boundary_detail=boundary_detail, tito_failed=generation.tito_failed,
            logprobs_invalid=logprobs_invalid,
        )
        self.trie.set_checkpoint(node, step)
        # The path is committed structure now; the hold only kept it while the generation ran.
        self.trie.release(generation.attach)
        if generation.instance_id is not None and self.instance_id is None:
            self.instance_id = generation.instance_id
        if placement.is_tip:
            chain.tip = step
        if version_stamp is not None and self.version_stamp is None:
            self.version_stamp = version_stamp
        self._head = step
        generation.step_id = step.step_id
        return CommitResult(step.step_id, chain.chain_id, refreshed, placement.forked, extendable,
                            replaced.step_id if replaced is not None else None,
                            placement.placed is branching.Placed.SHADOWED)

    @staticmethod
    def _refreshed_step(generation: _Generation, key: MessageKey, variant: str | None) -> Step | None:
        """The committed step the answer may refresh: the newest checkpoint of the node with the same answer, when
        it sits over the same checkpoint position as the generation's base. Its chain decides what the refresh does
        (replace its tip, shadow a step it continued past, or decline: the step then commits as one of its own)."""
        node = PrefixTrie.find_answer(generation.attach, key, variant)
        old = node.checkpoint if node is not None else None
        if old is None or not branching.same_checkpoint(_position_of(old.base), _position_of(generation.claim.base)):
            return None
        return old

    def _extendable(self, span: TokenSpan, finish_reason: str) -> bool:
        """Does the step end at a turn boundary TITO can extend?"""
        if self.end_of_turn_id is not None:
            return span.generated_count > 0 and span.generated_ids[-1] == self.end_of_turn_id
        return finish_reason != "length"

    def drop(self, handle: BranchHandle) -> bool:
        """The generation ends without committing (failed, cancelled, bad input): release its branch and remove
        the pending trie structure only it needed (its shared encoding too), so the session is as if it had never
        been asked. Idempotent: False when the handle had already committed or dropped. Outside ACTIVE the trie is
        frozen for the export (and freed after it): nothing is removed then."""
        generation = handle._generation
        if generation.finished:
            return False
        generation.finished = True
        del self._generations[generation.generation_id]
        if branching.release(self._chains, generation.claim, self.machine.send(session_sm.GenerationDropped())):
            self._release_prompt(generation)
        return True

    def _release_prompt(self, generation: _Generation) -> None:
        """Give back what the failed generation held in the trie: its encoding entry, then its attach node."""
        if generation.context is not None:
            generation.attach.release_encoding(generation.encoding, generation.context.context_ids)
        self.trie.release(generation.attach)

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
                exported = branching.export(self._chains, self._chains)
                tips = [segment.chain.tip for segment in exported.segments]
                export = SessionExport(
                    session_id=self.session_id,
                    rollout_id=rollout_id if rollout_id is not None else self.session_id,
                    instance_id=instance_id if instance_id is not None else self.instance_id,
                    reward_info=reward_info,
                    tips=tuple(tips),
                )
                self._export_job = ExportJob(export, effect.steps)
                return self._export_job
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
        self.idempotency = None

    # -- reporting ---------------------------------------------------------------------------------------------------

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
        )


__all__ = [
    "MAX_STEPS_ENV", "BranchHandle", "CommitResult", "EncodeKind", "EncodePlan", "ExportJob", "FinalizeResult",
    "HeadView", "Session", "SessionConfig", "SessionDebugView", "VersionStamp", "WaitForExport", "max_steps_from_env",
    "request_keys", "tokenize_plan",
]
