"""The full composition: the real RolloutGate, a real SessionMachine with its real ChainMachines, and three real
GenerationMachines, driven by an abstract trainer, SGLang, parser and clients; architecture invariants 1-7 checked.

``gate_session_generations(n)`` builds a ``Composition`` for the explorer. Every step restores the machines from
their snapshots, feeds one event and carries out the effects exactly as the controllers do (``proxy/controllers/
gate.py``, ``generation.py``, ``session.py``): the world never reads a machine's state to decide what to do, it only
keeps the records a controller keeps (the generation's token buffer and open upstream request, what it told the
gate, where its step attaches in the session, the chains' owned steps).

The generation side (effects carried out, moves) is ``generation_step``'s, shared with ``generation_world``, on the
one step mechanism of ``step``; the records are ``records``' and the invariants ``invariants``'. This module adds the
real session side (``_Step``: prepare, commit, drop, finalize and
export, as ``proxy/trajectory/session.py`` drives them), the session's invariants, and abstractions 1-12 below.

The world
---------
- the gate (real) and its controller: ``AskGate`` is answered in the same step; ``AbortInFlight`` reaches every
  in-flight generation as ``AbortRequested`` and ``AdmitWaiters`` every waiter as ``Resumed``, in the same step;
- the session (real) and its chains (real), driven as ``Session.prepare / commit / drop / begin_finalize`` drive
  them: prepare sends ``GenerationRequested`` (a closed session refuses: ``PrepareFailed``), then the generation's
  base checkpoint is asked (``ExtensionRequested``: extend the tip, fork, or a new segment after a closed tip);
  the machine's ``Commit`` is ``CommitRequested`` then the chain's ``ExtensionCommitted`` / ``FirstStepCommitted``
  (a sibling that moved the tip makes it fork into a new chain), fed back as ``CommitAccepted`` / ``CommitRejected``;
  ``DropFromSession`` is ``GenerationDropped`` (and the chain's, on ``ReleaseBranch``); a step that ends by
  ``length`` closes its chain (``LENGTH_EXHAUSTED``, unless ``length_may_end_turn`` lets its last token end the
  turn), one that stops ends at a turn boundary;
- a trainer: at most ``pauses`` pause/resume rounds; after its pause call returned it resumes announcing the weights
  it loaded (round k: ``vk``) or, with ``same_weights_resumes``, keeping the weights (``ResumeRequested(None)``); it
  may repeat a pause, a resume or a finalize (idempotent or refused); it finalizes the session once (every chain
  exported: ``ExportRequested``); the export is stored in a later step (``ExportCompleted``);
- SGLang, one abstract request per ``StartUpstream``: tokens made with the weights loaded at that moment, up to the
  request's ``max_new_tokens``; it stops by itself after its first token, finishes at its limit (length), may fail
  or abort the request on its own (``upstream_failures``); an aborted request ends with its abort finish; a token of
  the last aborted request may arrive late (a *straggler*, which the generation must drop);
- the parser: done, or failing (with ``upstream_failures``); clients: each may go away at any time before its answer;
  with ``timeouts``, a waiter's pause wait may time out.

The bound
---------
``BOUND`` is what CI proves (``tests/statemachines/test_full_world.py``), partial rollout on and off: 3
generations of one session, a token budget of 2 each (an interrupted generation can continue with a kept token and
ask for the one left), 2 pause/resume rounds each loading new weights (v0, v1, v2), one finalize, client disconnects,
upstream, SGLang-side abort and parser failures, stragglers. ``SMALL_BOUND`` adds what the big one leaves out, with 2
generations: resumes that keep the weights, and pause-wait timeouts.

Abstractions (the argument for each is in docs/model-checking.md)
-----------------------------------------------------------------
1. *The conversation*: a generation is prepared as a new conversation (no checkpoint: a new segment), as the next
   turn of the head (the tip of the chain holding the latest committed step), or, with ``splices``, on the first step
   of the head's chain below its tip (a fork at prepare). Concurrent siblings on one tip fork at commit; a closed tip
   starts a new segment. Richer trees (any chain's tip, TITO failures, step limits, session abort, a failed export,
   drains, the same answer committed again over the same checkpoint: a refresh) are
   ``session_world.session_with_generations``'s; they reach a generation only through prepare, commit and drop,
   which are all here.
2. *Prepare is one step* (admission, trie walk, tokenize, ``Prepared``, the gate's answer): the registry makes it one
   unit that completes or rolls back; a disconnect during it is a disconnect in RECEIVED. The session does see the
   roll-back (admitted, then dropped), with other generations' prepares in between while the encode runs:
   ``prepared_in_a_later_step`` (on in the conformance test) splits the unit there, admission then ``Prepared``,
   the client gone or a refusal after admission (``generation_step``'s module docstring).
3. *SGLang after an abort* may deliver any number of tokens up to the request's limit before its abort finish (the
   real engine delivers at most one: an over-approximation).
4. *Stragglers*: a late token of the last aborted request, until the generation's next request starts or its output
   is parsed (the window with no request open, where a late token must not be taken); stragglers during a later
   request are ``generation_world``'s.
5. *Ended generations* (client answered or gone, machine absorbing) keep only their final state and commits.
6. *After finalize* the trie is frozen: invariant 6 is checked on the export in the finalize step itself, then the
   chains, steps and attachments are forgotten (only a rejected commit or a drop can follow, which read none of it;
   an accepted commit is caught by invariant 5 in its step).
7. *Write-only counters*: a generation's ``epoch`` (0 once admitted) and ``requests`` (1 once a request started) are
   made canonical after each step; the machine only copies them into effects and checks that they are set. Rids are
   ``r1`` for the first request, ``r2`` for every later one.
8. *Dead data in PARSING*: the generation's fields no later row reads (rid, versions, request counts) are canonical.
9. *Token stamps*: each accepted token's stamp is checked against the weights that made it when it is accepted;
   afterwards, with partial rollout, only the count is kept; at parse, a single-version buffer becomes a count.
10. *Symmetry*: the generations are identical and nothing refers to one by position, so each world keeps its
    generations sorted (``generation_step.order``; ``g1`` in a trace is the second in that order before the step).
11. *Resumes load new weights* at ``BOUND`` (no machine compares versions across upstream requests and no request
    spans a resume, so a resume keeping the weights differs only in labels); ``SMALL_BOUND`` has both kinds.
12. *No pause-wait timeout* at ``BOUND``: a timeout ends a waiter as a client leaving while waiting does (release the
    gate wait and the session's admission, commit nothing), only the answer differs; ``SMALL_BOUND`` has them.

``data_reductions=False`` turns 7, 8 and 9 off and ``symmetry=False`` turns 10 off; the tests show that each changes
the count, not the verdict.

A machine's ``send`` is a pure function of (table, snapshot, event), computed once per distinct triple (a memo in
``step.WorldConfig``): that changes the run time, not the states.

Invariants (architecture.md numbers in brackets); per-step facts are checked when they happen and recorded in
``World.broken``; the others in every reachable state:

- [1] ``paused_means_no_generation_streaming``;
- [2] ``pause_returns_after_every_stream_is_interrupted_or_finished``; ``no_stream_admitted_while_pausing``;
  ``no_token_accepted_between_pause_acknowledgement_and_resume``; ``no_token_accepted_after_its_abort_was_
  acknowledged`` (every accepted token comes from the open request);
- [3] ``every_token_stamped_with_the_version_that_generated_it``; ``no_upstream_request_mixes_versions``;
  ``without_partial_rollout_every_step_is_single_version``;
- [4] ``each_generation_commits_at_most_once``; ``failed_cancelled_or_rejected_generations_commit_nothing``;
  ``success_answered_only_after_a_commit``;
- [5] ``no_commit_after_finalize`` (no commit accepted once the trainer called finalize, whatever the session
  machine says); ``late_generations_change_nothing`` (the session's step count never moves after finalize);
- [6] ``every_committed_step_owned_by_exactly_one_chain``; ``chains_are_token_paths``;
  ``every_committed_step_in_exactly_one_exported_segment`` (at the export: no loss, no duplication, no empty
  segment);
- [7] ``budgets_never_go_negative``; ``continuation_never_requests_more_than_the_remaining_budget``;
- bookkeeping: ``gate_counts_match_generations``, ``session_counts_match_generations``,
  ``machines_accept_every_event``; plus the deadlock check (final: every client answered or gone, no pause call
  pending, the session finalized).

Just over 500 lines: a hundred of them are this docstring, the argument for each abstraction, kept beside the code
it describes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import attrs

from statemachines import branching
from statemachines import chain as chain_sm
from statemachines import generation as gen_sm
from statemachines import rollout_gate as gate_sm
from statemachines import session as session_sm
from statemachines.checking import generation_step as gs
from statemachines.checking.explorer import Composition, Invariant
from statemachines.checking.invariants import (
    ACCEPTS, EXPORTED_ONCE, LATE_CHANGES_NOTHING, NOT_AFTER_FINALIZE, OWNED_ONCE, PATHS, SESSION_COUNTS,
    chains_are_paths, generation_invariants, not_broken, pause_progress,
)
from statemachines.checking.records import ChainRecord, Client, GenWorld, Trainer, describe_gens, describe_head
from statemachines.checking.step import Broken, Move, StepObserver, take
from statemachines.core import Snapshot
from statemachines.generation_machine import GenerationMachine

# The bounds CI proves (tests/statemachines/test_full_world.py), as keyword arguments of
# ``gate_session_generations``; partial rollout on and off for each.
BOUND = {"n": 3, "budget": 2, "pauses": 2}
SMALL_BOUND = {"n": 2, "budget": 2, "pauses": 2, "same_weights_resumes": True, "timeouts": True}

G = gen_sm.State


class Finalizer(enum.Enum):
    """The trainer's side of finalize."""

    WORKING = "the rollout runs; finalize not called"
    EXPORTING = "finalize called: every chain exported, the segments are being stored"
    FINALIZED = "the export is stored; the finalize call returned"


class Mode(enum.Enum):
    """How a prepared generation's step attaches to the session (``branching.Mode``, and LATE)."""

    NEW = "its own pending chain: a new segment (full encode)"
    TIP = "counted on a chain whose tip it extends"
    FORK = "commits into a new chain forked at its base step"
    LATE = "admitted before finalize; the trie is frozen, its commit will be rejected"


@attrs.frozen
class Attachment:
    """Where a generation admitted by the session attaches: mode, chain index, base step id, base position."""

    mode: Mode
    chain: int = -1
    # The step its step extends (0: none), and that step's position in its chain (the ExtensionRequested ``at``).
    base: int = 0
    at: int = 0

    @property
    def key(self) -> tuple:
        """Its place in the symmetry order (``generation_step.order``)."""
        return (self.mode.name, self.chain, self.base, self.at)

    @property
    def label(self) -> str:
        """``new@c0``, ``tip@c0:1``, ``fork@s2`` or ``late``, for traces."""
        return {Mode.NEW: f"new@c{self.chain}", Mode.TIP: f"tip@c{self.chain}:{self.at}",
                Mode.FORK: f"fork@s{self.base}", Mode.LATE: "late"}[self.mode]


@attrs.frozen
class StepRecord:
    """A committed step: the step it extends (0: none)."""

    base: int


@attrs.frozen(cache_hash=True)
class World:
    """The global state of the full composition."""

    gate: Snapshot
    session: Snapshot
    chains: tuple[ChainRecord, ...]
    steps: tuple[StepRecord, ...]
    gens: tuple[GenWorld, ...]
    trainer: Trainer
    pauses_left: int
    # The weight version SGLang has loaded (changed by the trainer while paused).
    weights: str
    finalizer: Finalizer = Finalizer.WORKING
    # The steps the session held when it was finalized (None before): nothing may change them afterwards.
    finalized_steps: int | None = None
    # (invariant name, what happened) for the first per-step violation or refused event; the world stops there.
    broken: tuple[str, str] | None = None

    def describe(self) -> str:
        """One line: gate, trainer, weights, session, chains, then each generation."""
        chains = " ".join(f"c{i}={c.machine.state.name}{list(c.steps)}" for i, c in enumerate(self.chains))
        return (
            f"{describe_head(self)} session={self.session.state.name}(steps={self.session.data.steps}, "
            f"in_flight={self.session.data.in_flight}) finalizer={self.finalizer.name} {chains} "
            f"{describe_gens(self)}"
        )


@attrs.frozen(kw_only=True)
class _Config(gs.Config):
    """The bounds, this composition's modelling choices, and the machine classes (variants for planted bugs)."""

    splices: bool
    session: type[session_sm.SessionMachine]
    chain: type[chain_sm.ChainMachine]


class _Step(gs.GenerationStep):
    """One step of the world; the session side is the real session and its chains, driven as ``Session`` does."""

    def __init__(self, world: World, config: _Config) -> None:
        super().__init__(world, config)
        self.session = world.session
        self.chains = list(world.chains)
        self.steps = list(world.steps)
        self.finalizer = world.finalizer
        self.finalized_steps = world.finalized_steps

    def world(self, broken: tuple[str, str] | None = None, *, symmetry: bool = True) -> World:
        """The next world: ended generations settled and, under symmetry, sorted (unless the step broke something)."""
        gens = self.settled_gens(broken is None and symmetry)
        return World(self.gate, self.session, tuple(self.chains), tuple(self.steps), gens, self.trainer,
                     self.pauses_left, self.weights, self.finalizer, self.finalized_steps, broken)

    def reduced(self, snapshot: Snapshot) -> Snapshot:
        """Abstractions 7 and 8 (with ``data_reductions``)."""
        return _forget_dead_data(_forget_counters(snapshot)) if self.config.data_reductions else snapshot

    # -- the session controller ---------------------------------------------------------------------------------

    def session_send(self, event: object) -> tuple:
        self.session, effects = self.config.send(self.config.session, self.session, event, "session")
        return effects

    def chain_send(self, c: int, event: object) -> tuple:
        record = self.chains[c]
        if record.discarded:
            raise Broken(ACCEPTS, f"{type(event).__name__} for the discarded chain c{c}")
        snapshot, effects = self.config.send(self.config.chain, record.machine, event, f"c{c}")
        self.chains[c] = attrs.evolve(record, machine=snapshot)
        if any(isinstance(e, chain_sm.DiscardChain) for e in effects):
            self.chains[c] = attrs.evolve(self.chains[c], discarded=True)
        return effects

    def new_chain(self, base: int) -> int:
        self.chains.append(ChainRecord(self.config.chain.new().snapshot(), base))
        return len(self.chains) - 1

    def attach(self, base: int) -> Attachment:
        """``Session.prepare`` after admission: ask the chain of the base checkpoint (0: none), as the trie says."""
        if not base:
            return _attachment(_ruled(self, branching.attach, None))
        c = next(c for c, record in enumerate(self.chains) if base in record.steps)
        at = self.chains[c].steps.index(base) + 1
        return _attachment(_ruled(self, branching.attach, base, c, at))

    def commit_step(self, i: int, attachment: Attachment, finish: gen_sm.FinishKind) -> None:
        """``Session.commit`` after AcceptCommit: the step becomes a chain's tip (a fork's, if the tip moved)."""
        step_id = len(self.steps) + 1
        self.steps.append(StepRecord(attachment.base))
        length = finish is gen_sm.FinishKind.LENGTH and not self.turn_ended
        close = chain_sm.CloseReason.LENGTH_EXHAUSTED if length else None
        c = _ruled(self, branching.commit, _claim(attachment), close).chain
        record = self.chains[c]
        self.chains[c] = attrs.evolve(record, steps=record.steps + (step_id,))

    def drop(self, i: int) -> None:
        """``Session.drop``: the session counts the generation out; in ACTIVE its chain releases it."""
        attachment = self.gens[i].attachment
        if attachment is None:
            raise Broken(ACCEPTS, f"g{i}: dropped from the session but not admitted (or already out)")
        self.set(i, attachment=None)
        _ruled(self, branching.release, _claim(attachment), self.session_send(session_sm.GenerationDropped()))

    def finalize(self) -> str:
        """``begin_finalize``: every chain exported (invariant 6 checked on the export), then the trie is frozen."""
        self.finalizer = Finalizer.EXPORTING
        segments: list[tuple[int, ...]] = []
        for effect in self.session_send(session_sm.FinalizeRequested()):
            if isinstance(effect, session_sm.ExportSession):
                live = [c for c, record in enumerate(self.chains) if not record.discarded]
                for segment in _ruled(self, branching.export, live).segments:
                    owned = self.chains[segment.chain].steps
                    if segment.steps != len(owned):
                        raise Broken(ACCEPTS, f"c{segment.chain}: exported {segment.steps} step(s) but owns {owned}")
                    segments.append(owned)
        committed = range(1, len(self.steps) + 1)
        if any(not segment for segment in segments) or any(
                sum(k in segment for segment in segments) != 1 for k in committed):
            raise Broken(EXPORTED_ONCE, f"steps {list(committed)} exported as {segments}")
        if self.session.data.steps != len(self.steps):
            raise Broken(ACCEPTS, f"the session counts {self.session.data.steps} steps, the trie {len(self.steps)}")
        self.finalized_steps = len(self.steps)
        # Frozen from now on: nothing reads the chains, the steps or the attachments again (abstraction 6).
        self.chains, self.steps = [], []
        for i, g in enumerate(self.gens):
            if g.attachment is not None:
                self.set(i, attachment=Attachment(Mode.LATE))
        return f"{len(segments)} segment(s), {len(committed)} step(s)"

    def commit(self, i: int, effect: gen_sm.Commit) -> None:
        """``SessionRegistry.commit``: the session accepts (the step joins a chain) or rejects; answer the machine."""
        g = self.gens[i]
        self.set(i, parsing=False)
        if effect.tokens != len(g.stamps) or g.attachment is None or g.finish is None:
            raise Broken(ACCEPTS, f"g{i}: {effect!r} with {len(g.stamps)} tokens kept, {g.attachment}, {g.finish}")
        attachment = g.attachment
        self.set(i, attachment=None)
        for answer in self.session_send(session_sm.CommitRequested()):
            if isinstance(answer, session_sm.RejectCommit):
                self.feed(i, gen_sm.CommitRejected(answer.reason))
                return
            if isinstance(answer, session_sm.AcceptCommit):
                # Checked against the trainer's own record, whatever the session machine says.
                if self.finalizer is not Finalizer.WORKING:
                    raise Broken(NOT_AFTER_FINALIZE, f"g{i}: commit accepted after finalize ({self.finalizer.name})")
                self.record_commit(i, g, self.finalizer.name)
                self.commit_step(i, attachment, g.finish)
                self.feed(i, gen_sm.CommitAccepted())
                return
        raise Broken(ACCEPTS, f"g{i}: the session answered the commit with nothing")


class _StepChains:
    """A step's chains as the branching rule's ``ChainPort`` (chains by index, bases by step id, 0: none)."""

    def __init__(self, run: _Step) -> None:
        self.run = run

    def send(self, c: int, event: object) -> tuple:
        return self.run.chain_send(c, event)

    def new_chain(self, base: int | None) -> int:
        return self.run.new_chain(base or 0)

    def forget(self, c: int) -> None:
        # ``chain_send`` marked it already: the controller forgets a chain on DiscardChain.
        self.run.chains[c] = attrs.evolve(self.run.chains[c], discarded=True)


def _ruled(run: _Step, rule: Callable, *args: object):
    """Run a ``branching`` rule on the step's chains; an answer the rule has no case for breaks the world."""
    try:
        return rule(_StepChains(run), *args)
    except branching.UnexpectedAnswer as error:
        raise Broken(ACCEPTS, str(error)) from None


# The session controller's claim for each attachment mode (a late generation holds no chain any more).
_MODES = {Mode.NEW: branching.Mode.NEW_SEGMENT, Mode.TIP: branching.Mode.EXTEND_TIP, Mode.FORK: branching.Mode.FORK}


def _claim(attachment: Attachment) -> branching.BranchClaim[int, int]:
    """An attachment as the branching rule's claim (chain -1, base 0: none)."""
    if attachment.mode is Mode.LATE:
        return branching.detached()
    chain = attachment.chain if attachment.chain >= 0 else None
    return branching.BranchClaim(_MODES[attachment.mode], chain, attachment.base or None, attachment.at)


def _attachment(claim: branching.BranchClaim[int, int]) -> Attachment:
    """The attachment that holds ``claim``."""
    mode = next(mode for mode, value in _MODES.items() if value is claim.mode)
    return Attachment(mode, claim.chain if claim.chain is not None else -1, claim.base or 0, claim.at)


# ---- The moves -------------------------------------------------------------------------------------------------


def _export_stored(run: _Step) -> None:
    """The store has the segments: the finalize call returns."""
    run.finalizer = Finalizer.FINALIZED
    if not any(isinstance(e, session_sm.Finalized) for e in run.session_send(session_sm.ExportCompleted())):
        raise Broken(ACCEPTS, "ExportCompleted answered without Finalized")


def _finalize_again(run: _Step) -> None:
    """A repeated finalize: it waits for the export in progress, or returns the stored result."""
    effects = run.session_send(session_sm.FinalizeRequested())
    if not any(isinstance(e, (session_sm.AlreadyFinalizing, session_sm.AlreadyFinalized)) for e in effects):
        raise Broken(ACCEPTS, f"a repeated finalize answered {list(effects)}")


def _prepare(run: _Step, i: int, base: Callable[[_Step], int]) -> None:
    """Prepare as one unit: session admission (or its refusal), the base checkpoint, ``Prepared``, the gate. With
    ``prepared_in_a_later_step`` the unit ends after the admission: ``Prepared`` (or the roll-back) is a later move."""
    run.set(i, prepared=True)
    effects = run.session_send(session_sm.GenerationRequested())
    if not any(isinstance(e, session_sm.AdmitGeneration) for e in effects):
        run.feed(i, gen_sm.PrepareFailed(400, "session_finalized", "the session was finalized"))
        return
    run.set(i, attachment=run.attach(base(run)))
    if run.config.prepared_in_a_later_step:
        run.set(i, preparing=True)
    else:
        run.feed(i, gen_sm.Prepared(gs.PROMPT_TOKENS, run.config.budget))


def _prepared(run: _Step, i: int) -> None:
    """The encode is done: ``Prepared`` (and the gate's answer)."""
    run.set(i, preparing=False)
    run.feed(i, gen_sm.Prepared(gs.PROMPT_TOKENS, run.config.budget))


def _rolled_back(run: _Step, i: int, event: object) -> None:
    """The prepare fails after the session admitted it: the registry drops it from the session (itself, not through
    the machine's ``DropFromSession``), then the machine hears why (in RECEIVED)."""
    run.set(i, preparing=False)
    if isinstance(event, gen_sm.ClientDisconnected):
        run.set(i, client=Client.GONE)
    run.drop(i)
    run.feed(i, event)


def _head(run: _Step) -> int:
    """The latest committed step (the tip of its chain)."""
    return len(run.steps)


def _splice(run: _Step) -> int:
    """The first step of the head's chain (below its tip)."""
    head = len(run.steps)
    return next(c.steps[0] for c in run.chains if head in c.steps)


def _prepares(i: int, world: World, config: _Config) -> list[tuple[str, Move]]:
    """Generation ``i``'s prepare moves: a new conversation, the next turn of the head, a splice below it; with
    ``prepared_in_a_later_step``, once admitted, the prepare's end: done, the client gone during the encode, or
    refused after admission (the reply does not fit the context window)."""
    if world.gens[i].preparing:
        moves = [("prepared", lambda run: _prepared(run, i)),
                 ("refused after admission", lambda run: _rolled_back(
                     run, i, gen_sm.PrepareFailed(400, "context_length_exceeded", "no room for a reply")))]
        if config.clients_may_leave:
            moves.append(("client gone while preparing", lambda run: _rolled_back(
                run, i, gen_sm.ClientDisconnected())))
        return moves
    moves: list[tuple[str, Move]] = [("prepare (new conversation)", lambda run: _prepare(run, i, lambda _: 0))]
    if world.steps:
        moves.append(("prepare (next turn of the head)", lambda run: _prepare(run, i, _head)))
        head = len(world.steps)
        if config.splices and any(head in c.steps and c.steps.index(head) for c in world.chains):
            moves.append(("prepare (splice below the head)", lambda run: _prepare(run, i, _splice)))
    return moves


def gate_session_generations(
    n: int = BOUND["n"],
    *,
    budget: int = BOUND["budget"],
    pauses: int = BOUND["pauses"],
    partial_rollout: bool = True,
    clients_may_leave: bool = True,
    upstream_failures: bool = True,
    stragglers: bool = True,
    timeouts: bool = False,
    same_weights_resumes: bool = False,
    splices: bool = True,
    symmetry: bool = True,
    data_reductions: bool = True,
    gate: type[gate_sm.RolloutGate] = gate_sm.RolloutGate,
    session: type[session_sm.SessionMachine] = session_sm.SessionMachine,
    chain: type[chain_sm.ChainMachine] = chain_sm.ChainMachine,
    generation: type[GenerationMachine] = GenerationMachine,
    waits_for_client: Callable[[object], bool] = gen_sm.waits_for_client,
    rid_in_a_later_step: bool = False,
    drop_in_a_later_step: bool = False,
    prepared_in_a_later_step: bool = False,
    length_may_end_turn: bool = False,
    observer: StepObserver | None = None,
) -> Composition:
    """The gate, the session with its chains, ``n`` generation machines of ``budget`` tokens, a trainer with
    ``pauses`` pause/resume rounds and a finalize (see the module docstring). Machine classes and the driver's rule
    about its client (``waits_for_client``) may be variants: planted bugs. ``rid_in_a_later_step`` and
    ``drop_in_a_later_step`` give the driver's request starts and session drops moves of their own (the
    controller's timing; module docstring of ``generation_step``), ``length_may_end_turn`` lets a ``length`` step
    end its turn (same docstring); ``observer`` watches the moves (``step``)."""
    config = _Config(
        budget=budget, pauses=pauses, partial_rollout=partial_rollout, clients_may_leave=clients_may_leave,
        upstream_failures=upstream_failures, timeouts=timeouts, stragglers=stragglers,
        same_weights_resumes=same_weights_resumes, versions_reported=True, data_reductions=data_reductions,
        one_token_after_abort=False, stale_until_next_request=True, tokens_checked_against_pause=True, gate=gate,
        generation=generation, splices=splices, session=session, chain=chain, waits_for_client=waits_for_client,
        rid_in_a_later_step=rid_in_a_later_step, drop_in_a_later_step=drop_in_a_later_step,
        prepared_in_a_later_step=prepared_in_a_later_step, observer=observer, length_may_end_turn=length_may_end_turn,
    )
    start = GenWorld(generation.new(partial_rollout=partial_rollout).snapshot())
    initial = World(gate.new("v0").snapshot(), session.new().snapshot(), (), (), (start,) * n, Trainer.TRAINING,
                    pauses, "v0")

    def successors(world: World) -> list[tuple[str, World]]:
        """Every event enabled in ``world``, labelled for traces (a finalize with what it exported)."""
        if world.broken is not None:
            return []
        moves = gs.trainer_moves(world, config)
        if world.finalizer is Finalizer.WORKING:
            moves.append(("trainer: finalize", lambda run: run.finalize()))
        else:
            moves.append(("trainer: finalize again", _finalize_again))
        if world.finalizer is Finalizer.EXPORTING:
            moves.append(("trainer: export stored", _export_stored))
        moves += gs.generation_moves(world, config, lambda i: _prepares(i, world, config))
        return take(world, moves, lambda w: _Step(w, config), symmetry)

    def is_final(world: World) -> bool:
        """Every client answered or gone, no pause call left hanging, the session finalized."""
        return (world.trainer is Trainer.TRAINING and world.finalizer is Finalizer.FINALIZED
                and all(g.client is not Client.WAITING for g in world.gens))

    name = gs.composition_name("RolloutGate + SessionMachine + ChainMachines", n, config)
    return Composition(name, initial, successors, _invariants(config), is_final, World.describe,
                       progress=(pause_progress(),))


def _forget_counters(snapshot: Snapshot) -> Snapshot:
    """A generation's snapshot with its write-only counters made canonical (abstraction 7): ``epoch`` (0 once
    admitted) and ``requests`` (1 once a request was started). The machine only copies them into effects
    (``StartUpstream.epoch`` and ``.request``, ``Commit.requests``) and checks that they are set."""
    data = snapshot.data
    if data.requests <= 1 and data.epoch in (None, 0):
        return snapshot
    epoch = None if data.epoch is None else 0
    return Snapshot(snapshot.state, attrs.evolve(data, requests=min(data.requests, 1), epoch=epoch))


def _forget_dead_data(snapshot: Snapshot) -> Snapshot:
    """In PARSING, the data no later row of the table reads made canonical (abstraction 8): the step is done
    upstream; what is left is parse, commit (``tokens``, ``finish``) and the releases (which read nothing)."""
    if snapshot.state is not G.PARSING:
        return snapshot
    data = snapshot.data
    dead = attrs.evolve(data, request_tokens=data.tokens, requests=1, epoch=0, weight_version=None,
                        request_version=None, rid=None)
    return snapshot if dead == data else Snapshot(snapshot.state, dead)


# ---- The invariants --------------------------------------------------------------------------------------------


def _session_counts_match(world: World) -> bool:
    """The session counts exactly the generations it admitted that have not committed or dropped."""
    return world.session.data.in_flight == sum(g.attachment is not None for g in world.gens)


def _owned_once(world: World) -> bool:
    """Every committed step is owned by exactly one chain (until the trie is frozen at finalize)."""
    return all(sum(k in c.steps for c in world.chains) == 1 for k in range(1, len(world.steps) + 1))


def _invariants(config: _Config) -> tuple[Invariant, ...]:
    """The generations' invariants (``invariants.generation_invariants``) with the session's: 5, 6 and its counts."""
    session = (
        not_broken(NOT_AFTER_FINALIZE),
        Invariant(LATE_CHANGES_NOTHING, lambda w: w.finalized_steps in (None, w.session.data.steps)),
        Invariant(OWNED_ONCE, _owned_once),
        Invariant(PATHS, chains_are_paths),
        not_broken(EXPORTED_ONCE),
    )
    return generation_invariants(config, session, counts=(Invariant(SESSION_COUNTS, _session_counts_match),))
