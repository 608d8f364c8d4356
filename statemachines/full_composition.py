"""The full composition: the real RolloutGate, a real SessionMachine with its real ChainMachines, and three real
GenerationMachines, driven by an abstract trainer, SGLang, parser and clients; architecture invariants 1-7 checked.

``gate_session_generations(n)`` builds a ``Composition`` for the explorer. Every step restores the machines from
their snapshots, feeds one event and carries out the effects exactly as the controllers do (``proxy/controllers/
gate.py``, ``generation.py``, ``session.py``): the world never reads a machine's state to decide what to do, it only
keeps the records a controller keeps (the generation's token buffer and open upstream request, what it told the
gate, where its step attaches in the session, the chains' owned steps).

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
   drains) are ``compositions.session_with_generations``'s; they reach a generation only through prepare, commit and
   drop, which are all here.
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
    generations sorted (``_order``; ``g1`` in a trace is the second in that order before the step).
11. *Resumes load new weights* at ``BOUND`` (no machine compares versions across upstream requests and no request
    spans a resume, so a resume keeping the weights differs only in labels); ``SMALL_BOUND`` has both kinds.
12. *No pause-wait timeout* at ``BOUND``: a timeout ends a waiter as a client leaving while waiting does (release the
    gate wait and the session's admission, commit nothing), only the answer differs; ``SMALL_BOUND`` has them.

``data_reductions=False`` turns 7, 8 and 9 off and ``symmetry=False`` turns 10 off; the tests show that each changes
the count, not the verdict.

A machine's ``send`` is a pure function of (table, snapshot, event), computed once per distinct triple (a memo in
``_Config``): that changes the run time, not the states.

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
from statemachines import rollout_gate as gate_sm
from statemachines import session as session_sm
from statemachines.core import IllegalTransition, Machine, Snapshot, TableError
from statemachines.explorer import Composition, Invariant
from statemachines.generation_composition import Client, GateRecord, Trainer, Upstream

# The prompt length every generation is prepared with (only the routed-experts start position depends on it).
PROMPT_TOKENS = 4

# Invariant names; the per-step ones are recorded in World.broken under these names.
PAUSED = "paused_means_no_generation_streaming"
PAUSE_RETURNS = "pause_returns_after_every_stream_is_interrupted_or_finished"
NOT_WHILE_PAUSING = "no_stream_admitted_while_pausing"
NO_TOKEN_WHILE_PAUSED = "no_token_accepted_between_pause_acknowledgement_and_resume"
NO_LATE_TOKEN = "no_token_accepted_after_its_abort_was_acknowledged"
STAMPED = "every_token_stamped_with_the_version_that_generated_it"
UNMIXED = "no_upstream_request_mixes_versions"
SINGLE_VERSION = "without_partial_rollout_every_step_is_single_version"
AT_MOST_ONCE = "each_generation_commits_at_most_once"
NOTHING_IF_ENDED = "failed_cancelled_or_rejected_generations_commit_nothing"
SUCCESS_AFTER_COMMIT = "success_answered_only_after_a_commit"
NOT_AFTER_FINALIZE = "no_commit_after_finalize"
LATE_CHANGES_NOTHING = "late_generations_change_nothing"
OWNED_ONCE = "every_committed_step_owned_by_exactly_one_chain"
PATHS = "chains_are_token_paths"
EXPORTED_ONCE = "every_committed_step_in_exactly_one_exported_segment"
BUDGET = "budgets_never_go_negative"
REMAINING = "continuation_never_requests_more_than_the_remaining_budget"
GATE_COUNTS = "gate_counts_match_generations"
SESSION_COUNTS = "session_counts_match_generations"
ACCEPTS = "machines_accept_every_event"

# The bounds CI proves (tests/statemachines/test_full_composition.py), as keyword arguments of
# ``gate_session_generations``; partial rollout on and off for each.
BOUND = {"n": 3, "budget": 2, "pauses": 2}
SMALL_BOUND = {"n": 2, "budget": 2, "pauses": 2, "same_weights_resumes": True, "timeouts": True}

G = gen_sm.State
# Machine states that hold an upstream request (the gate counts them in flight), and those the gate counts waiting.
_HOLDING = (G.STREAMING, G.CONTINUING, G.ABORTING)
_WAITING = (G.WAITING, G.INTERRUPTED)


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


@attrs.frozen
class ChainRecord:
    """A chain: its machine, the step its first step extends (0: none), the step ids it owns, in order."""

    machine: Snapshot
    base: int
    steps: tuple[int, ...] = ()
    # Forgotten by the controller after DiscardChain.
    discarded: bool = False


@attrs.frozen
class StepRecord:
    """A committed step: the step it extends (0: none)."""

    base: int


@attrs.frozen(cache_hash=True)
class GenWorld:
    """One generation: its machine and the records its controllers keep."""

    machine: Snapshot
    prepared: bool = False
    client: Client = Client.WAITING
    gate: GateRecord = GateRecord.NONE
    upstream: Upstream | None = None
    # The token buffer: the version stamp of every kept token, in order.
    stamps: tuple[str | None, ...] = ()
    # ParseOutput was carried out; ParseDone (or a parser failure) is pending. The finish kind it was given.
    parsing: bool = False
    finish: gen_sm.FinishKind | None = None
    # (rid, weights) of the last aborted request, until the next request starts: one straggler may still come.
    stale: tuple[str, str] | None = None
    # Set while the session counts the generation (admitted, not committed or dropped).
    attachment: Attachment | None = None
    # The finalizer's state at each accepted commit of this generation.
    commits: tuple[str, ...] = ()


@attrs.define
class _GenDraft:
    """A mutable copy of a ``GenWorld`` while a step changes it (same fields; built and frozen once per step)."""

    machine: Snapshot
    prepared: bool
    client: Client
    gate: GateRecord
    upstream: Upstream | None
    stamps: tuple[str | None, ...]
    parsing: bool
    finish: gen_sm.FinishKind | None
    stale: tuple[str, str] | None
    attachment: Attachment | None
    commits: tuple[str, ...]


def _draft(g: GenWorld) -> _GenDraft:
    return _GenDraft(g.machine, g.prepared, g.client, g.gate, g.upstream, g.stamps, g.parsing, g.finish, g.stale,
                     g.attachment, g.commits)


def _frozen(g: _GenDraft) -> GenWorld:
    return GenWorld(g.machine, g.prepared, g.client, g.gate, g.upstream, g.stamps, g.parsing, g.finish, g.stale,
                    g.attachment, g.commits)


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
        gate = self.gate.data
        chains = " ".join(f"c{i}={c.machine.state.name}{list(c.steps)}" for i, c in enumerate(self.chains))
        gens = " ".join(_describe_gen(i, g) for i, g in enumerate(self.gens))
        text = (
            f"gate={self.gate.state.name}(epoch={gate.epoch}, {gate.weight_version}, in_flight={gate.in_flight}, "
            f"waiting={gate.waiting}) trainer={self.trainer.name} weights={self.weights} "
            f"session={self.session.state.name}(steps={self.session.data.steps}, "
            f"in_flight={self.session.data.in_flight}) finalizer={self.finalizer.name} {chains} {gens}"
        )
        return text + (f" BROKEN {self.broken[0]}: {self.broken[1]}" if self.broken else "")


def _describe_gen(i: int, g: GenWorld) -> str:
    """``g0=STREAMING(1/2, req 1) up=r1:1/2 stamps=v0 tip@c0 waiting``, compactly."""
    data = g.machine.data
    text = f"g{i}={g.machine.state.name}({data.tokens}/{data.budget}, req {data.requests})"
    if g.upstream is not None:
        up = g.upstream
        text += f" up={up.rid}:{up.produced}/{up.limit}{'!' if up.aborting else ''}"
    text += f" stamps={','.join(str(s) for s in g.stamps) or '-'}"
    att = g.attachment
    if att is not None:
        text += {Mode.NEW: f" new@c{att.chain}", Mode.TIP: f" tip@c{att.chain}:{att.at}",
                 Mode.FORK: f" fork@s{att.base}", Mode.LATE: " late"}[att.mode]
    text += f" {g.client.name.lower()}"
    return text + (f" commits={list(g.commits)}" if g.commits else "")


class _Broken(Exception):
    """A per-step violation: the step's world is recorded with ``broken`` set."""

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(detail)
        self.invariant = invariant
        self.detail = detail


@attrs.frozen
class _Config:
    """The composition's bounds and the machine classes (variants for planted bugs)."""

    budget: int
    pauses: int
    partial_rollout: bool
    clients_may_leave: bool
    upstream_failures: bool
    stragglers: bool
    timeouts: bool
    same_weights_resumes: bool
    splices: bool
    # Abstractions 7, 8 and 9 (off only to show that they change the count, not the verdict).
    data_reductions: bool
    gate: type[gate_sm.RolloutGate]
    session: type[session_sm.SessionMachine]
    chain: type[chain_sm.ChainMachine]
    generation: type[gen_sm.GenerationMachine]
    # Memo of the machines' pure step: (class, snapshot, event) -> (snapshot, effects) or a refusal.
    sent: dict[tuple[type, Snapshot, object], tuple[Snapshot, tuple] | str] = attrs.field(factory=dict, eq=False)
    # Memo of each generation's sort key (generations recur in many worlds; their hash is cached).
    orders: dict[GenWorld, tuple] = attrs.field(factory=dict, eq=False)

    def send(self, cls: type[Machine], snapshot: Snapshot, event: object, who: str) -> tuple[Snapshot, tuple]:
        """``cls.from_snapshot(snapshot).send(event)`` as a pure function, memoized; a refusal is ``_Broken``."""
        key = (cls, snapshot, event)
        found = self.sent.get(key)
        if found is None:
            try:
                machine = cls.from_snapshot(snapshot)
                effects = tuple(machine.send(event))
                found = (machine.snapshot(), effects)
            except (IllegalTransition, TableError) as error:
                found = f"{type(error).__name__}: {error}"
            self.sent[key] = found
        if isinstance(found, str):
            raise _Broken(ACCEPTS, f"{who}: {found}")
        return found

    def order(self, g: GenWorld) -> tuple:
        """``_order(g)``, memoized."""
        found = self.orders.get(g)
        if found is None:
            found = self.orders[g] = _order(g)
        return found


class _Step:
    """One step of the world, as the controllers carry it out: mutable copies, written back by ``world()``."""

    def __init__(self, world: World, config: _Config) -> None:
        self.config = config
        self.gate = world.gate
        self.session = world.session
        self.chains = list(world.chains)
        self.steps = list(world.steps)
        self.gens = list(world.gens)
        self.touched: set[int] = set()
        self.trainer = world.trainer
        self.pauses_left = world.pauses_left
        self.weights = world.weights
        self.finalizer = world.finalizer
        self.finalized_steps = world.finalized_steps
        # The token being fed, as (rid, weights that generated it): what AcceptToken is checked against.
        self.token: tuple[str | None, str] | None = None

    def world(self, broken: tuple[str, str] | None = None, *, symmetry: bool = True) -> World:
        """The next world: ended generations settled and, under symmetry, sorted (unless the step broke something)."""
        gens = [_settle(_frozen(g)) if i in self.touched else g for i, g in enumerate(self.gens)]
        if broken is None and symmetry:
            gens.sort(key=self.config.order)
        return World(self.gate, self.session, tuple(self.chains), tuple(self.steps), tuple(gens), self.trainer,
                     self.pauses_left, self.weights, self.finalizer, self.finalized_steps, broken)

    def set(self, i: int, **changes: object) -> None:
        """Change generation ``i``'s records (in a mutable draft, frozen again by ``world()``)."""
        if i not in self.touched:
            self.gens[i] = _draft(self.gens[i])
            self.touched.add(i)
        draft = self.gens[i]
        for name, value in changes.items():
            setattr(draft, name, value)

    # -- the gate controller ------------------------------------------------------------------------------------

    def gate_send(self, event: object) -> list:
        """Feed the gate; carry out its broadcast effects; return its answers (Admit, Wait) to the caller."""
        self.gate, effects = self.config.send(self.config.gate, self.gate, event, "gate")
        answers = []
        for effect in effects:
            if isinstance(effect, (gate_sm.Admit, gate_sm.Wait)):
                answers.append(effect)
            elif isinstance(effect, gate_sm.AbortInFlight):
                holding = [i for i, g in enumerate(self.gens) if g.gate is GateRecord.IN_FLIGHT]
                if effect.count != len(holding):
                    raise _Broken(ACCEPTS, f"{effect!r} but {len(holding)} generation(s) in flight")
                for i in holding:
                    self.feed(i, gen_sm.AbortRequested())
            elif isinstance(effect, gate_sm.AdmitWaiters):
                waiters = [i for i, g in enumerate(self.gens) if g.gate is GateRecord.WAITING]
                if effect.count != len(waiters):
                    raise _Broken(ACCEPTS, f"{effect!r} but {len(waiters)} generation(s) wait")
                # The resume call returns; each waiter is in flight before any of them runs.
                self.trainer = Trainer.TRAINING
                for i in waiters:
                    self.set(i, gate=GateRecord.IN_FLIGHT)
                for i in waiters:
                    self.feed(i, gen_sm.Resumed(effect.epoch, effect.weight_version))
            elif isinstance(effect, (gate_sm.PauseAcknowledged, gate_sm.AlreadyPaused)):
                # Every pending pause call returns.
                self.trainer = Trainer.PAUSE_RETURNED
            # AlreadyPausing, AlreadyRunning, ResumeRefused: the caller is answered; nothing else changes.
        return answers

    # -- the session controller ---------------------------------------------------------------------------------

    def session_send(self, event: object) -> tuple:
        self.session, effects = self.config.send(self.config.session, self.session, event, "session")
        return effects

    def chain_send(self, c: int, event: object) -> tuple:
        record = self.chains[c]
        if record.discarded:
            raise _Broken(ACCEPTS, f"{type(event).__name__} for the discarded chain c{c}")
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
        raise _Broken(ACCEPTS, f"c{c}: ExtensionRequested({at}) answered nothing")

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
            raise _Broken(ACCEPTS, f"g{i}: the commit's chain answered {list(effects)}")
        record = self.chains[c]
        self.chains[c] = attrs.evolve(record, steps=record.steps + (step_id,))

    def drop(self, i: int) -> None:
        """``Session.drop``: the session counts the generation out; in ACTIVE its chain releases it."""
        attachment = self.gens[i].attachment
        if attachment is None:
            raise _Broken(ACCEPTS, f"g{i}: dropped from the session but not admitted (or already out)")
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
                                raise _Broken(ACCEPTS, f"c{c}: {chain_effect!r} but it owns {self.chains[c].steps}")
                            segments.append(self.chains[c].steps)
        committed = range(1, len(self.steps) + 1)
        if any(not segment for segment in segments) or any(
                sum(k in segment for segment in segments) != 1 for k in committed):
            raise _Broken(EXPORTED_ONCE, f"steps {list(committed)} exported as {segments}")
        if self.session.data.steps != len(self.steps):
            raise _Broken(ACCEPTS, f"the session counts {self.session.data.steps} steps, the trie {len(self.steps)}")
        self.finalized_steps = len(self.steps)
        # Frozen from now on: nothing reads the chains, the steps or the attachments again (abstraction 6).
        self.chains, self.steps = [], []
        for i, g in enumerate(self.gens):
            if g.attachment is not None:
                self.set(i, attachment=Attachment(Mode.LATE))
        return f"{len(segments)} segment(s), {len(committed)} step(s)"

    # -- a generation controller --------------------------------------------------------------------------------

    def feed(self, i: int, event: object) -> None:
        """Feed generation ``i``'s machine and carry out its effects in order."""
        snapshot, effects = self.config.send(self.config.generation, self.gens[i].machine, event, f"g{i}")
        if self.config.data_reductions:
            snapshot = _forget_dead_data(_forget_counters(snapshot))
        self.set(i, machine=snapshot)
        for effect in effects:
            self.carry_out(i, effect)

    def carry_out(self, i: int, effect: object) -> None:
        """What generation ``i``'s controller does for one effect."""
        g = self.gens[i]
        config = self.config
        if isinstance(effect, gen_sm.AskGate):
            for answer in self.gate_send(gate_sm.GenerationWantsToStart()):
                if isinstance(answer, gate_sm.Admit):
                    self.set(i, gate=GateRecord.IN_FLIGHT)
                    self.feed(i, gen_sm.GateAdmitted(answer.epoch, answer.weight_version))
                else:
                    self.set(i, gate=GateRecord.WAITING)
                    self.feed(i, gen_sm.GateWait(answer.epoch))
        elif isinstance(effect, gen_sm.StartUpstream):
            kept, asked = effect.kept_tokens, effect.max_new_tokens
            if kept != len(g.stamps) or not 1 <= asked <= config.budget - kept:
                raise _Broken(REMAINING, f"g{i}: {effect!r} with {len(g.stamps)} kept of a budget of {config.budget}")
            if g.upstream is not None:
                raise _Broken(ACCEPTS, f"g{i}: {effect!r} while {g.upstream.rid} is open")
            # The controller draws the rid and reports it before the request goes out; older stragglers are gone.
            rid = f"r{effect.request}"  # r1, then r2 for every later request (abstraction 7)
            self.set(i, upstream=Upstream(rid, asked), stale=None)
            self.feed(i, gen_sm.UpstreamStarted(rid))
        elif isinstance(effect, gen_sm.AbortUpstream):
            if g.upstream is not None and g.upstream.rid == effect.rid:
                self.set(i, upstream=attrs.evolve(g.upstream, aborting=True))
        elif isinstance(effect, gen_sm.AcknowledgeAbortToGate):
            self.set(i, gate=GateRecord.WAITING)
            self.gate_send(gate_sm.GenerationAbortAcknowledged())
        elif isinstance(effect, gen_sm.ReleaseGate):
            self.set(i, gate=GateRecord.NONE)
            self.gate_send(gate_sm.GenerationFinished())
        elif isinstance(effect, gen_sm.CancelGateWait):
            self.set(i, gate=GateRecord.NONE)
            self.gate_send(gate_sm.WaiterCancelled())
        elif isinstance(effect, gen_sm.AcceptToken):
            self.accept(i, effect)
        elif isinstance(effect, gen_sm.DiscardPartial):
            if effect.tokens != len(g.stamps):
                raise _Broken(ACCEPTS, f"g{i}: {effect!r} but {len(g.stamps)} tokens are kept")
            self.set(i, stamps=())
        elif isinstance(effect, gen_sm.ParseOutput):
            if effect.tokens != len(g.stamps):
                raise _Broken(ACCEPTS, f"g{i}: {effect!r} but {len(g.stamps)} tokens are kept")
            # The step is done upstream: stragglers are no longer modelled (abstraction 4), and no token is added to
            # the buffer, so a single-version buffer is only a count from now on (abstraction 9).
            single = len(set(g.stamps)) <= 1 and config.data_reductions
            stamps = ("*",) * len(g.stamps) if single else g.stamps
            self.set(i, parsing=True, finish=effect.finish, stale=None, stamps=stamps)
        elif isinstance(effect, gen_sm.Commit):
            self.commit(i, effect)
        elif isinstance(effect, gen_sm.Respond):
            if not g.commits:
                raise _Broken(SUCCESS_AFTER_COMMIT, f"g{i}: {effect!r} without a commit")
            self.set(i, client=Client.ANSWERED)
        elif isinstance(effect, gen_sm.RespondError):
            self.set(i, client=Client.ANSWERED)
        elif isinstance(effect, gen_sm.DropFromSession):
            if g.commits:
                raise _Broken(ACCEPTS, f"g{i}: dropped from the session after committing")
            self.drop(i)
        elif not isinstance(effect, gen_sm.DropToken):
            # ReportFault, or anything new: the composition does not expect it.
            raise _Broken(ACCEPTS, f"g{i}: unexpected effect {effect!r}")

    def accept(self, i: int, effect: gen_sm.AcceptToken) -> None:
        """Record an accepted token, checking when it came, where from and how it is stamped."""
        g = self.gens[i]
        rid, weights = self.token
        if self.trainer is Trainer.PAUSE_RETURNED or self.gate.state is gate_sm.State.PAUSED:
            raise _Broken(NO_TOKEN_WHILE_PAUSED, f"g{i}: token of {rid} accepted while paused")
        if g.upstream is None or g.upstream.rid != rid:
            raise _Broken(NO_LATE_TOKEN, f"g{i}: token of {rid} accepted but no request of that rid is open")
        if effect.index != len(g.stamps):
            raise _Broken(ACCEPTS, f"g{i}: {effect!r} but {len(g.stamps)} tokens are kept")
        if effect.weight_version != weights:
            raise _Broken(STAMPED, f"g{i}: token generated by {weights} stamped {effect.weight_version}")
        if len(g.stamps) + 1 > self.config.budget:
            raise _Broken(BUDGET, f"g{i}: token {effect.index} over the budget of {self.config.budget}")
        # Checked above against the weights that made it; with partial rollout nothing reads a stamp again but the
        # count (abstraction 9); without, the commit checks that the step is single-version.
        reduced = self.config.partial_rollout and self.config.data_reductions
        stamp = "*" if reduced else effect.weight_version
        self.set(i, stamps=g.stamps + (stamp,))

    def commit(self, i: int, effect: gen_sm.Commit) -> None:
        """``SessionRegistry.commit``: the session accepts (the step joins a chain) or rejects; answer the machine."""
        g = self.gens[i]
        self.set(i, parsing=False)
        if effect.tokens != len(g.stamps) or g.attachment is None or g.finish is None:
            raise _Broken(ACCEPTS, f"g{i}: {effect!r} with {len(g.stamps)} tokens kept, {g.attachment}, {g.finish}")
        attachment = g.attachment
        self.set(i, attachment=None)
        for answer in self.session_send(session_sm.CommitRequested()):
            if isinstance(answer, session_sm.RejectCommit):
                self.feed(i, gen_sm.CommitRejected(answer.reason))
                return
            if isinstance(answer, session_sm.AcceptCommit):
                # Checked against the trainer's own record, whatever the session machine says.
                if self.finalizer is not Finalizer.WORKING:
                    raise _Broken(NOT_AFTER_FINALIZE, f"g{i}: commit accepted after finalize ({self.finalizer.name})")
                if not self.config.partial_rollout and len(set(g.stamps)) > 1:
                    raise _Broken(SINGLE_VERSION, f"g{i}: commits versions {g.stamps} without partial rollout")
                self.set(i, commits=g.commits + (self.finalizer.name,))
                self.commit_step(i, attachment, g.finish)
                self.feed(i, gen_sm.CommitAccepted())
                return
        raise _Broken(ACCEPTS, f"g{i}: the session answered the commit with nothing")


# ---- The moves -------------------------------------------------------------------------------------------------

Move = Callable[[_Step], object]


def _pause(run: _Step) -> None:
    """The trainer pauses (one of its rounds)."""
    run.trainer = Trainer.PAUSE_PENDING
    run.pauses_left -= 1
    run.gate_send(gate_sm.PauseRequested())


def _resume(run: _Step, version: str | None) -> None:
    """The trainer resumes: it loaded ``version`` while paused and announces it, or kept the weights (None)."""
    if version is not None:
        run.weights = version
    run.gate_send(gate_sm.ResumeRequested(version))


def _export_stored(run: _Step) -> None:
    """The store has the segments: the finalize call returns."""
    run.finalizer = Finalizer.FINALIZED
    if not any(isinstance(e, session_sm.Finalized) for e in run.session_send(session_sm.ExportCompleted())):
        raise _Broken(ACCEPTS, "ExportCompleted answered without Finalized")


def _finalize_again(run: _Step) -> None:
    """A repeated finalize: it waits for the export in progress, or returns the stored result."""
    effects = run.session_send(session_sm.FinalizeRequested())
    if not any(isinstance(e, (session_sm.AlreadyFinalizing, session_sm.AlreadyFinalized)) for e in effects):
        raise _Broken(ACCEPTS, f"a repeated finalize answered {list(effects)}")


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


def _token(run: _Step, i: int) -> None:
    """SGLang generates one token with the weights loaded now."""
    up = run.gens[i].upstream
    version = up.version if up.version is not None else run.weights
    if run.weights != version:
        raise _Broken(UNMIXED, f"g{i}: {up.rid} started under {version} generates under {run.weights}")
    run.set(i, upstream=attrs.evolve(up, produced=up.produced + 1, version=version))
    run.token = (up.rid, run.weights)
    run.feed(i, gen_sm.TokenReceived(up.rid, run.weights))


def _end(run: _Step, i: int, finish: gen_sm.FinishKind) -> None:
    """The request ends by itself (stop, or its max_new_tokens)."""
    produced = run.gens[i].upstream.produced
    run.set(i, upstream=None)
    run.feed(i, gen_sm.UpstreamFinished(finish, produced))


def _aborted(run: _Step, i: int) -> None:
    """The aborted request ends with its abort finish; a straggler of it may still come later."""
    up = run.gens[i].upstream
    stale = (up.rid, up.version or run.weights) if run.config.stragglers else None
    run.set(i, upstream=None, stale=stale)
    run.feed(i, gen_sm.UpstreamAborted(up.produced))


def _upstream_fails(run: _Step, i: int) -> None:
    """The request fails (connection refused, 5xx, stream cut)."""
    run.set(i, upstream=None)
    run.feed(i, gen_sm.UpstreamFailed())


def _foreign_abort(run: _Step, i: int) -> None:
    """SGLang aborts the request on its own (someone paused or aborted it directly, not through the proxy)."""
    produced = run.gens[i].upstream.produced
    run.set(i, upstream=None)
    run.feed(i, gen_sm.UpstreamAborted(produced))


def _parsed(run: _Step, i: int) -> None:
    run.set(i, parsing=False)
    run.feed(i, gen_sm.ParseDone())


def _parser_fails(run: _Step, i: int) -> None:
    run.set(i, parsing=False)
    run.feed(i, gen_sm.UpstreamFailed(502, "parser_unavailable"))


def _client_gone(run: _Step, i: int) -> None:
    """The client goes away: the controller's task is cancelled; its reader stops; nothing more is fed after."""
    run.set(i, client=Client.GONE, upstream=None, parsing=False, stale=None)
    run.feed(i, gen_sm.ClientDisconnected())


def _straggler(run: _Step, i: int) -> None:
    """A token of the last aborted request arrives late (generated before its abort, with its weights)."""
    rid, version = run.gens[i].stale
    run.token = (rid, version)
    run.feed(i, gen_sm.TokenReceived(rid, version))


def _generation_moves(i: int, g: GenWorld, world: World, config: _Config) -> list[tuple[str, Move]]:
    """The moves of generation ``i``'s client, upstream, parser, from the controllers' records."""
    moves: list[tuple[str, Move]] = []
    if g.client is Client.WAITING and not g.prepared:
        moves.append(("prepare (new conversation)", lambda run: _prepare(run, i, lambda _: 0)))
        if world.steps:
            moves.append(("prepare (next turn of the head)", lambda run: _prepare(run, i, _head)))
            head = len(world.steps)
            if config.splices and any(head in c.steps and c.steps.index(head) for c in world.chains):
                moves.append(("prepare (splice below the head)", lambda run: _prepare(run, i, _splice)))
    up = g.upstream
    if up is not None:
        if up.produced < up.limit:
            moves.append(("token", lambda run: _token(run, i)))
        if up.produced:
            moves.append(("upstream stops", lambda run: _end(run, i, gen_sm.FinishKind.STOP)))
        if up.produced == up.limit:
            moves.append(("upstream hits max_new_tokens", lambda run: _end(run, i, gen_sm.FinishKind.LENGTH)))
        if up.aborting:
            moves.append(("upstream aborted", lambda run: _aborted(run, i)))
        if config.upstream_failures:
            moves.append(("upstream fails", lambda run: _upstream_fails(run, i)))
            if not up.aborting:
                moves.append(("upstream aborted outside the proxy", lambda run: _foreign_abort(run, i)))
    if g.parsing:
        moves.append(("parsed", lambda run: _parsed(run, i)))
        if config.upstream_failures:
            moves.append(("parser fails", lambda run: _parser_fails(run, i)))
    if g.client is Client.WAITING and config.clients_may_leave:
        moves.append(("client gone", lambda run: _client_gone(run, i)))
    if g.gate is GateRecord.WAITING and config.timeouts:
        moves.append(("pause wait times out", lambda run: run.feed(i, gen_sm.PauseWaitTimedOut())))
    if g.stale is not None:
        moves.append(("straggler token", lambda run: _straggler(run, i)))
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
    generation: type[gen_sm.GenerationMachine] = gen_sm.GenerationMachine,
) -> Composition:
    """The gate, the session with its chains, ``n`` generation machines of ``budget`` tokens, a trainer with
    ``pauses`` pause/resume rounds and a finalize (see the module docstring). Machine classes may be variants."""
    config = _Config(budget, pauses, partial_rollout, clients_may_leave, upstream_failures, stragglers, timeouts,
                     same_weights_resumes, splices, data_reductions, gate, session, chain, generation)
    start = GenWorld(generation.new(partial_rollout=partial_rollout).snapshot())
    initial = World(gate.new("v0").snapshot(), session.new().snapshot(), (), (), (start,) * n, Trainer.TRAINING,
                    pauses, "v0")

    def step(world: World, move: Move) -> tuple[World, object]:
        """Run one move in a fresh step; a per-step violation becomes the world's ``broken``."""
        run = _Step(world, config)
        try:
            note = move(run)
        except _Broken as broken:
            # Keep what the step did up to the violation (machines included) for the trace.
            return run.world((broken.invariant, broken.detail)), None
        return run.world(symmetry=symmetry), note

    def successors(world: World) -> list[tuple[str, World]]:
        """Every event enabled in ``world``, labelled for traces."""
        if world.broken is not None:
            return []
        moves: list[tuple[str, Move]] = []
        trainer = world.trainer
        if trainer is Trainer.TRAINING and world.pauses_left:
            moves.append(("trainer: pause", _pause))
        if trainer is not Trainer.TRAINING:
            moves.append(("trainer: pause again", lambda run: run.gate_send(gate_sm.PauseRequested())))
        if trainer is Trainer.PAUSE_RETURNED:
            version = f"v{pauses - world.pauses_left}"
            moves.append((f"trainer: resume {version}", lambda run: _resume(run, version)))
            if same_weights_resumes:
                moves.append(("trainer: resume (same weights)", lambda run: _resume(run, None)))
        else:
            # Too early (pause pending) or while running (a no-op): the same version, nothing may change.
            repeat = gate_sm.ResumeRequested(world.gate.data.weight_version)
            moves.append(("trainer: resume (repeat)", lambda run: run.gate_send(repeat)))
        if world.finalizer is Finalizer.WORKING:
            moves.append(("trainer: finalize", lambda run: run.finalize()))
        else:
            moves.append(("trainer: finalize again", _finalize_again))
        if world.finalizer is Finalizer.EXPORTING:
            moves.append(("trainer: export stored", _export_stored))
        for i, g in enumerate(world.gens):
            moves += [(f"g{i}: {label}", move) for label, move in _generation_moves(i, g, world, config)]
        out = []
        for label, move in moves:
            target, note = step(world, move)
            out.append((f"{label} ({note})" if note else label, target))
        return out

    def is_final(world: World) -> bool:
        """Every client answered or gone, no pause call left hanging, the session finalized."""
        return (world.trainer is Trainer.TRAINING and world.finalizer is Finalizer.FINALIZED
                and all(g.client is not Client.WAITING for g in world.gens))

    switches = [f"budget {budget}", f"{pauses} pause(s)", f"partial rollout {'on' if partial_rollout else 'off'}"]
    name = f"RolloutGate + SessionMachine + ChainMachines x {n} GenerationMachine(s), " + ", ".join(switches)
    return Composition(name, initial, successors, _invariants(), is_final, World.describe)


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


def _settle(g: GenWorld) -> GenWorld:
    """An ended generation, reduced to what the invariants still read: its final state and its commits."""
    state = g.machine.state
    if g.client is Client.WAITING or state not in gen_sm.ABSORBING:
        return g
    committed = state is G.RESPONDED
    data = gen_sm.GenerationData(partial_rollout=g.machine.data.partial_rollout, committed=committed,
                                 finish=gen_sm.FinishKind.STOP if committed else None)
    return GenWorld(Snapshot(state, data), prepared=True, client=g.client, commits=g.commits,
                    attachment=g.attachment)


# The position of each machine state in its enum, for ordering generations.
_STATE_ORDER = {state: index for index, state in enumerate(G)}


def _order(g: GenWorld) -> tuple:
    """A total order on generations for the symmetry reduction: every field, None as the smallest value.

    Generations not yet prepared come last, so that in a trace the ones that started keep the low indices.
    """
    data, up, att = g.machine.data, g.upstream, g.attachment
    upstream = () if up is None else (up.rid, up.limit, up.produced, up.version or "", up.aborting)
    attachment = () if att is None else (att.mode.name, att.chain, att.base, att.at)
    return (
        not g.prepared, _STATE_ORDER[g.machine.state], data.tokens, data.request_tokens, data.requests,
        -1 if data.epoch is None else data.epoch, data.weight_version or "", data.request_version or "",
        data.rid or "", data.finish.value if data.finish else "", data.committed, data.budget, data.prompt_tokens,
        data.partial_rollout, g.client.name, g.gate.name, upstream, tuple(s or "" for s in g.stamps), g.parsing,
        g.finish.value if g.finish else "", g.stale or (), attachment, g.commits,
    )


# ---- The invariants --------------------------------------------------------------------------------------------


def _holding(world: World) -> bool:
    """Does any generation stream, abort, or hold an open upstream request?"""
    return any(g.machine.state in _HOLDING or g.upstream is not None for g in world.gens)


def _gate_counts_match(world: World) -> bool:
    """The gate's counts, the gate controller's records and the machines' states agree."""
    gate = world.gate.data
    records = [g.gate for g in world.gens]
    states = [g.machine.state for g in world.gens]
    return gate.in_flight == records.count(GateRecord.IN_FLIGHT) == sum(s in _HOLDING for s in states) and (
        gate.waiting == records.count(GateRecord.WAITING) == sum(s in _WAITING for s in states))


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


def _not_broken(name: str) -> Invariant:
    """An invariant checked when its fact happens, recorded in ``World.broken``."""
    return Invariant(name, lambda w: w.broken is None or w.broken[0] != name)


def _invariants() -> tuple[Invariant, ...]:
    """Every invariant, in the order they are checked (the first broken one is reported)."""
    ended = (G.FAILED, G.CANCELLED, G.REJECTED)
    return (
        _not_broken(ACCEPTS),
        Invariant(PAUSED, lambda w: w.gate.state is not gate_sm.State.PAUSED or not _holding(w)),
        Invariant(PAUSE_RETURNS, lambda w: w.trainer is not Trainer.PAUSE_RETURNED or not _holding(w)),
        Invariant(NOT_WHILE_PAUSING, lambda w: w.gate.state is gate_sm.State.RUNNING or not any(
            g.machine.state in (G.STREAMING, G.CONTINUING) for g in w.gens)),
        _not_broken(NO_TOKEN_WHILE_PAUSED),
        _not_broken(NO_LATE_TOKEN),
        _not_broken(STAMPED),
        _not_broken(UNMIXED),
        _not_broken(SINGLE_VERSION),
        Invariant(AT_MOST_ONCE, lambda w: all(len(g.commits) <= 1 for g in w.gens)),
        Invariant(NOTHING_IF_ENDED, lambda w: not any(g.machine.state in ended and g.commits for g in w.gens)),
        _not_broken(SUCCESS_AFTER_COMMIT),
        _not_broken(NOT_AFTER_FINALIZE),
        Invariant(LATE_CHANGES_NOTHING, lambda w: w.finalized_steps in (None, w.session.data.steps)),
        Invariant(OWNED_ONCE, _owned_once),
        Invariant(PATHS, _chains_are_paths),
        _not_broken(EXPORTED_ONCE),
        Invariant(BUDGET, lambda w: (w.broken is None or w.broken[0] != BUDGET) and all(
            0 <= len(g.stamps) <= g.machine.data.budget and g.machine.data.remaining >= 0 for g in w.gens)),
        _not_broken(REMAINING),
        Invariant(GATE_COUNTS, _gate_counts_match),
        Invariant(SESSION_COUNTS, _session_counts_match),
    )


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
            found = system.explore()
            extras = [name for name in ("same_weights_resumes", "timeouts") if bound.get(name)]
            print(
                f"{system.name}{''.join(', ' + e.replace('_', ' ') for e in extras)}: {found.states} states, "
                f"{found.transitions} transitions, depth {found.depth}, "
                f"{'complete' if found.complete else 'bounded'}, "
                f"{'no violation' if found.violation is None else 'VIOLATION'}"
            )
            if found.violation is not None:
                failed = True
                print(found.violation.format(system.describe))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
