"""The full composition: the real RolloutGate, a real SessionMachine with its real ChainMachines, and three real
GenerationMachines, driven by an abstract trainer, SGLang, parser and clients; architecture invariants 1-7 checked.

``gate_session_generations(n)`` builds a ``Composition`` for the explorer. Every step restores the machines from
their snapshots, feeds one event and carries out the effects exactly as the controllers do (``proxy/controllers/
gate.py``, ``generation.py``, ``session.py``): the world never reads a machine's state to decide what to do, it only
keeps the records a controller keeps (the generation's token buffer and open upstream request, what it told the
gate, where its step attaches in the session, the chains' owned steps).

The generation side (records, effects carried out, moves, invariants) is ``generation_world``'s, shared with
``generation_composition``; this module adds the real session side (``_Step``: prepare, commit, drop, finalize and
export, as ``proxy/controllers/session.py`` drives them), the session's invariants, and abstractions 1-12 below.

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
  ``length`` closes its chain (``LENGTH_EXHAUSTED``), one that stops ends at a turn boundary;
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
``BOUND`` is what CI proves (``tests/statemachines/test_full_composition.py``), partial rollout on and off: 3
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
   ``compositions.session_with_generations``'s; they reach a generation only through prepare, commit and drop,
   which are all here.
2. *Prepare is one step* (admission, trie walk, tokenize, ``Prepared``, the gate's answer): the registry makes it one
   unit that completes or rolls back; a disconnect during it is a disconnect in RECEIVED.
3. *SGLang after an abort* may deliver any number of tokens up to the request's limit before its abort finish (the
   real engine delivers at most one: an over-approximation).
4. *Stragglers*: a late token of the last aborted request, until the generation's next request starts or its output
   is parsed (the window with no request open, where a late token must not be taken); stragglers during a later
   request are ``generation_composition``'s.
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
    generations sorted (``generation_world.order``; ``g1`` in a trace is the second in that order before the step).
11. *Resumes load new weights* at ``BOUND`` (no machine compares versions across upstream requests and no request
    spans a resume, so a resume keeping the weights differs only in labels); ``SMALL_BOUND`` has both kinds.
12. *No pause-wait timeout* at ``BOUND``: a timeout ends a waiter as a client leaving while waiting does (release the
    gate wait and the session's admission, commit nothing), only the answer differs; ``SMALL_BOUND`` has them.

``data_reductions=False`` turns 7, 8 and 9 off and ``symmetry=False`` turns 10 off; the tests show that each changes
the count, not the verdict.

A machine's ``send`` is a pure function of (table, snapshot, event), computed once per distinct triple (a memo in
``generation_world.Config``): that changes the run time, not the states.

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
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import attrs

from statemachines import chain as chain_sm
from statemachines import generation as gen_sm
from statemachines import generation_world as gw
from statemachines import rollout_gate as gate_sm
from statemachines import session as session_sm
from statemachines.compositions import ChainRecord  # the session composition's record of a chain
from statemachines.core import Snapshot
from statemachines.explorer import Composition, Invariant
from statemachines.generation_machine import GenerationMachine

# Re-exported: the records and the generation side's invariant names.
from statemachines.generation_world import (  # noqa: F401
    ACCEPTS, AT_MOST_ONCE, BUDGET, GATE_COUNTS, NO_LATE_TOKEN, NO_TOKEN_WHILE_PAUSED, NOT_AFTER_FINALIZE,
    NOT_WHILE_PAUSING, NOTHING_IF_ENDED, PAUSE_RETURNS, PAUSED, PROMPT_TOKENS, REMAINING, SINGLE_VERSION, STAMPED,
    SUCCESS_AFTER_COMMIT, UNMIXED, Client, GateRecord, GenWorld, Move, Trainer, Upstream,
)

# The session side's invariant names; the per-step ones are recorded in World.broken under these names.
LATE_CHANGES_NOTHING = "late_generations_change_nothing"
OWNED_ONCE = "every_committed_step_owned_by_exactly_one_chain"
PATHS = "chains_are_token_paths"
EXPORTED_ONCE = "every_committed_step_in_exactly_one_exported_segment"
SESSION_COUNTS = "session_counts_match_generations"

# The bounds CI proves (tests/statemachines/test_full_composition.py), as keyword arguments of
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
    """How a prepared generation's step attaches to the session (the session controller's ``_Mode``)."""

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
        """Its place in the symmetry order (``generation_world.order``)."""
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
            f"{gw.describe_head(self)} session={self.session.state.name}(steps={self.session.data.steps}, "
            f"in_flight={self.session.data.in_flight}) finalizer={self.finalizer.name} {chains} "
            f"{gw.describe_gens(self)}"
        )


@attrs.frozen(kw_only=True)
class _Config(gw.Config):
    """The bounds, this composition's modelling choices, and the machine classes (variants for planted bugs)."""

    splices: bool
    session: type[session_sm.SessionMachine]
    chain: type[chain_sm.ChainMachine]


class _Step(gw.GenerationStep):
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
            raise gw.Broken(ACCEPTS, f"{type(event).__name__} for the discarded chain c{c}")
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
            return Attachment(Mode.NEW, self.new_chain(0))
        c = next(c for c, record in enumerate(self.chains) if base in record.steps)
        at = self.chains[c].steps.index(base) + 1
        for effect in self.chain_send(c, chain_sm.ExtensionRequested(at)):
            if isinstance(effect, chain_sm.ExtendTip):
                return Attachment(Mode.TIP, c, base, at)
            if isinstance(effect, chain_sm.ForkAt):
                return Attachment(Mode.FORK, -1, base, at)
            if isinstance(effect, chain_sm.StartNewSegment):
                return Attachment(Mode.NEW, self.new_chain(0))
        raise gw.Broken(ACCEPTS, f"c{c}: ExtensionRequested({at}) answered nothing")

    def commit_step(self, i: int, attachment: Attachment, finish: gen_sm.FinishKind) -> None:
        """``Session.commit`` after AcceptCommit: the step becomes a chain's tip (a fork's, if the tip moved)."""
        step_id = len(self.steps) + 1
        self.steps.append(StepRecord(attachment.base))
        close = chain_sm.CloseReason.LENGTH_EXHAUSTED if finish is gen_sm.FinishKind.LENGTH else None
        if attachment.mode is Mode.FORK:
            c = self.new_chain(attachment.base)
            effects = self.chain_send(c, chain_sm.FirstStepCommitted(close))
        else:
            c = attachment.chain
            if attachment.mode is Mode.TIP:
                effects = self.chain_send(c, chain_sm.ExtensionCommitted(attachment.at, close))
            else:
                effects = self.chain_send(c, chain_sm.FirstStepCommitted(close))
            if any(isinstance(e, chain_sm.ForkAt) for e in effects):
                # A sibling moved (or closed) the tip since this generation's prepare: commit into a new chain.
                c = self.new_chain(attachment.base)
                effects = self.chain_send(c, chain_sm.FirstStepCommitted(close))
        if not any(isinstance(e, chain_sm.TipAdvanced) for e in effects):
            raise gw.Broken(ACCEPTS, f"g{i}: the commit's chain answered {list(effects)}")
        record = self.chains[c]
        self.chains[c] = attrs.evolve(record, steps=record.steps + (step_id,))

    def drop(self, i: int) -> None:
        """``Session.drop``: the session counts the generation out; in ACTIVE its chain releases it."""
        attachment = self.gens[i].attachment
        if attachment is None:
            raise gw.Broken(ACCEPTS, f"g{i}: dropped from the session but not admitted (or already out)")
        self.set(i, attachment=None)
        effects = self.session_send(session_sm.GenerationDropped())
        if any(isinstance(e, session_sm.ReleaseBranch) for e in effects) and attachment.mode in (Mode.NEW, Mode.TIP):
            self.chain_send(attachment.chain, chain_sm.GenerationDropped())

    def finalize(self) -> str:
        """``begin_finalize``: every chain exported (invariant 6 checked on the export), then the trie is frozen."""
        self.finalizer = Finalizer.EXPORTING
        segments: list[tuple[int, ...]] = []
        for effect in self.session_send(session_sm.FinalizeRequested()):
            if isinstance(effect, session_sm.ExportSession):
                for c in range(len(self.chains)):
                    if self.chains[c].discarded:
                        continue
                    for chain_effect in self.chain_send(c, chain_sm.ExportRequested()):
                        if isinstance(chain_effect, chain_sm.ExportSegment):
                            if chain_effect.steps != len(self.chains[c].steps):
                                raise gw.Broken(ACCEPTS, f"c{c}: {chain_effect!r} but it owns {self.chains[c].steps}")
                            segments.append(self.chains[c].steps)
        committed = range(1, len(self.steps) + 1)
        if any(not segment for segment in segments) or any(
                sum(k in segment for segment in segments) != 1 for k in committed):
            raise gw.Broken(EXPORTED_ONCE, f"steps {list(committed)} exported as {segments}")
        if self.session.data.steps != len(self.steps):
            raise gw.Broken(ACCEPTS, f"the session counts {self.session.data.steps} steps, the trie {len(self.steps)}")
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
            raise gw.Broken(ACCEPTS, f"g{i}: {effect!r} with {len(g.stamps)} tokens kept, {g.attachment}, {g.finish}")
        attachment = g.attachment
        self.set(i, attachment=None)
        for answer in self.session_send(session_sm.CommitRequested()):
            if isinstance(answer, session_sm.RejectCommit):
                self.feed(i, gen_sm.CommitRejected(answer.reason))
                return
            if isinstance(answer, session_sm.AcceptCommit):
                # Checked against the trainer's own record, whatever the session machine says.
                if self.finalizer is not Finalizer.WORKING:
                    raise gw.Broken(NOT_AFTER_FINALIZE, f"g{i}: commit accepted after finalize ({self.finalizer.name})")
                self.record_commit(i, g, self.finalizer.name)
                self.commit_step(i, attachment, g.finish)
                self.feed(i, gen_sm.CommitAccepted())
                return
        raise gw.Broken(ACCEPTS, f"g{i}: the session answered the commit with nothing")


# ---- The moves -------------------------------------------------------------------------------------------------


def _export_stored(run: _Step) -> None:
    """The store has the segments: the finalize call returns."""
    run.finalizer = Finalizer.FINALIZED
    if not any(isinstance(e, session_sm.Finalized) for e in run.session_send(session_sm.ExportCompleted())):
        raise gw.Broken(ACCEPTS, "ExportCompleted answered without Finalized")


def _finalize_again(run: _Step) -> None:
    """A repeated finalize: it waits for the export in progress, or returns the stored result."""
    effects = run.session_send(session_sm.FinalizeRequested())
    if not any(isinstance(e, (session_sm.AlreadyFinalizing, session_sm.AlreadyFinalized)) for e in effects):
        raise gw.Broken(ACCEPTS, f"a repeated finalize answered {list(effects)}")


def _prepare(run: _Step, i: int, base: Callable[[_Step], int]) -> None:
    """Prepare as one unit: session admission (or its refusal), the base checkpoint, ``Prepared``, the gate."""
    run.set(i, prepared=True)
    effects = run.session_send(session_sm.GenerationRequested())
    if not any(isinstance(e, session_sm.AdmitGeneration) for e in effects):
        run.feed(i, gen_sm.PrepareFailed(400, "session_finalized", "the session was finalized"))
        return
    run.set(i, attachment=run.attach(base(run)))
    run.feed(i, gen_sm.Prepared(PROMPT_TOKENS, run.config.budget))


def _head(run: _Step) -> int:
    """The latest committed step (the tip of its chain)."""
    return len(run.steps)


def _splice(run: _Step) -> int:
    """The first step of the head's chain (below its tip)."""
    head = len(run.steps)
    return next(c.steps[0] for c in run.chains if head in c.steps)


def _prepares(i: int, world: World, config: _Config) -> list[tuple[str, Move]]:
    """Generation ``i``'s prepare moves: a new conversation, the next turn of the head, a splice below it."""
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
) -> Composition:
    """The gate, the session with its chains, ``n`` generation machines of ``budget`` tokens, a trainer with
    ``pauses`` pause/resume rounds and a finalize (see the module docstring). Machine classes may be variants."""
    config = _Config(
        budget=budget, pauses=pauses, partial_rollout=partial_rollout, clients_may_leave=clients_may_leave,
        upstream_failures=upstream_failures, timeouts=timeouts, stragglers=stragglers,
        same_weights_resumes=same_weights_resumes, versions_reported=True, data_reductions=data_reductions,
        one_token_after_abort=False, stale_until_next_request=True, tokens_checked_against_pause=True, gate=gate,
        generation=generation, splices=splices, session=session, chain=chain,
    )
    start = GenWorld(generation.new(partial_rollout=partial_rollout).snapshot())
    initial = World(gate.new("v0").snapshot(), session.new().snapshot(), (), (), (start,) * n, Trainer.TRAINING,
                    pauses, "v0")

    def successors(world: World) -> list[tuple[str, World]]:
        """Every event enabled in ``world``, labelled for traces (a finalize with what it exported)."""
        if world.broken is not None:
            return []
        moves = gw.trainer_moves(world, config)
        if world.finalizer is Finalizer.WORKING:
            moves.append(("trainer: finalize", lambda run: run.finalize()))
        else:
            moves.append(("trainer: finalize again", _finalize_again))
        if world.finalizer is Finalizer.EXPORTING:
            moves.append(("trainer: export stored", _export_stored))
        moves += gw.generation_moves(world, config, lambda i: _prepares(i, world, config))
        return gw.take(world, moves, lambda w: _Step(w, config), symmetry)

    def is_final(world: World) -> bool:
        """Every client answered or gone, no pause call left hanging, the session finalized."""
        return (world.trainer is Trainer.TRAINING and world.finalizer is Finalizer.FINALIZED
                and all(g.client is not Client.WAITING for g in world.gens))

    name = gw.composition_name("RolloutGate + SessionMachine + ChainMachines", n, config)
    return Composition(name, initial, successors, _invariants(config), is_final, World.describe,
                       progress=(gw.pause_progress(),))


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


def _chains_are_paths(world: World) -> bool:
    """Each chain's steps extend one another, starting from the chain's base."""
    for record in world.chains:
        previous = record.base
        for step_id in record.steps:
            if world.steps[step_id - 1].base != previous:
                return False
            previous = step_id
    return True


def _invariants(config: _Config) -> tuple[Invariant, ...]:
    """The generations' invariants (``generation_world.invariants``) with the session's: 5, 6 and its counts."""
    session = (
        gw.not_broken(NOT_AFTER_FINALIZE),
        Invariant(LATE_CHANGES_NOTHING, lambda w: w.finalized_steps in (None, w.session.data.steps)),
        Invariant(OWNED_ONCE, _owned_once),
        Invariant(PATHS, _chains_are_paths),
        gw.not_broken(EXPORTED_ONCE),
    )
    return gw.invariants(config, session, counts=(Invariant(SESSION_COUNTS, _session_counts_match),))


def main(argv: list[str] | None = None) -> int:
    """Explore the full composition at the CI bounds (or the one given), partial rollout on and off; print the counts
    (exit 1 on a violation)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m statemachines.full_composition", description=main.__doc__)
    parser.add_argument("--generations", type=int, default=None, help="explore this bound instead of the CI bounds")
    parser.add_argument("--budget", type=int, default=BOUND["budget"], help=f"default {BOUND['budget']}")
    parser.add_argument("--pauses", type=int, default=BOUND["pauses"], help=f"default {BOUND['pauses']}")
    parser.add_argument("--same-weights-resumes", action="store_true", help="resumes may also keep the weights")
    parser.add_argument("--timeouts", action="store_true", help="pause waits may time out")
    args = parser.parse_args(argv)
    if args.generations is None:
        bounds = [BOUND, SMALL_BOUND]
    else:
        bounds = [{"n": args.generations, "budget": args.budget, "pauses": args.pauses,
                   "same_weights_resumes": args.same_weights_resumes, "timeouts": args.timeouts}]
    failed = False
    for bound in bounds:
        for partial in (True, False):
            system = gate_session_generations(**bound, partial_rollout=partial)
            extras = [name for name in ("same_weights_resumes", "timeouts") if bound.get(name)]
            failed = gw.report(system, "".join(", " + e.replace("_", " ") for e in extras)) or failed
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
