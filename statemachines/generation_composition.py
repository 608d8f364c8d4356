"""The real RolloutGate and up to three real GenerationMachines, with an abstract SGLang, trainer, session and clients.

``gate_with_generation_machines(n)`` builds a ``Composition`` for the explorer. Every step restores the machines
from their snapshots, feeds one event and carries out the effects exactly as the controllers will: the world never
reads a machine's state to decide what to do, it only keeps the records a controller keeps (its token buffer, what
it told the gate, whether its parse is pending, its open upstream request).

The world
---------
- the gate (real) and its controller: ``AskGate`` is answered in the same step (``Admit`` -> ``GateAdmitted``,
  ``Wait`` -> ``GateWait``); ``AbortInFlight`` reaches every in-flight generation as ``AbortRequested`` and
  ``AdmitWaiters`` every waiter as ``Resumed``, both in the same step;
- a trainer: at most ``pauses`` pause/resume rounds; it loads new weights while paused (round k resumes announcing
  ``vk``), and may repeat its pause or resume (idempotent or refused);
- SGLang, one abstract request per ``StartUpstream``: it produces tokens with the weights loaded at that moment (up to
  the request's ``max_new_tokens``), stops by itself after its first token, finishes at its limit (length), may fail
  (``upstream_failures``, which also lets SGLang abort a request on its own, as when someone pauses it directly), and
  after an abort delivers at most one more token (the decode step in flight) before its abort finish. An aborted
  request may later deliver a *straggler* token (``stragglers``), which the generation must drop;
- an abstract session: it accepts commits until the trainer finalizes it, rejects them after (refuses prepare too);
- clients: each may go away at any time before its answer (``clients_may_leave``); a waiter's pause wait may time out
  (``timeouts``); the parser may fail (with ``upstream_failures``).

Invariants, checked in every reachable state (architecture.md numbers in brackets); the per-step facts (a token
accepted, a request started, a commit) are checked when they happen and recorded in ``World.broken``:

- [1] ``paused_means_no_generation_streaming``: gate PAUSED -> no generation streams, aborts or holds a request;
- [2] ``pause_returns_after_every_stream_is_interrupted_or_finished``: the trainer's pause call returned -> same;
  ``no_stream_admitted_while_pausing``: gate not RUNNING -> no generation STREAMING or CONTINUING;
  ``no_token_accepted_after_its_abort_was_acknowledged``: every accepted token comes from the open request;
- [3] ``every_token_stamped_with_the_version_that_generated_it``; ``no_upstream_request_mixes_versions``;
  ``without_partial_rollout_every_step_is_single_version``;
- [4] ``each_generation_commits_at_most_once``; ``failed_cancelled_or_rejected_generations_commit_nothing``;
  ``success_answered_only_after_a_commit``;
- [5] ``no_commit_after_finalize``;
- [7] ``budgets_never_go_negative``; ``continuation_never_requests_more_than_the_remaining_budget`` (a request asks
  for 1..budget - kept tokens, and appends exactly the kept tokens);
- ``gate_counts_match_generations`` (the gate's counts, the controllers' records and the machines' states agree) and
  ``machines_accept_every_event`` (no ``IllegalTransition``, no effect that does not fit the world).

Final states (for the deadlock check): every client answered or gone, no pause call pending.

Symmetry reduction (``symmetry=True``, the default): the generations are identical (same budget, same partial
rollout setting, all start in RECEIVED) and nothing in the world refers to a generation by its position, so two
worlds that differ only by the order of their generations are the same world. Each world keeps its generations
sorted (``_order``: every field of the record; generations not yet prepared last), which explores one representative
per multiset. In a trace, ``g1`` names the second generation of the world *before* that step, in that order.

Dead-record reduction: a generation that has ended (client answered or gone, machine absorbing) never moves again,
so ``_settle`` reduces it to its final state and its commits, the only things the invariants still read.
"""

from __future__ import annotations

import enum

import attrs

from statemachines import generation as gen_sm
from statemachines import rollout_gate as gate_sm
from statemachines.core import IllegalTransition, Snapshot, TableError
from statemachines.explorer import Composition, Invariant

# The prompt length every generation is prepared with (only the routed-experts start position depends on it).
PROMPT_TOKENS = 4

# Invariant names (the per-step ones are recorded in World.broken under these names).
PAUSED = "paused_means_no_generation_streaming"
PAUSE_RETURNS = "pause_returns_after_every_stream_is_interrupted_or_finished"
NOT_WHILE_PAUSING = "no_stream_admitted_while_pausing"
NO_LATE_TOKEN = "no_token_accepted_after_its_abort_was_acknowledged"
STAMPED = "every_token_stamped_with_the_version_that_generated_it"
UNMIXED = "no_upstream_request_mixes_versions"
SINGLE_VERSION = "without_partial_rollout_every_step_is_single_version"
AT_MOST_ONCE = "each_generation_commits_at_most_once"
NOTHING_IF_ENDED = "failed_cancelled_or_rejected_generations_commit_nothing"
SUCCESS_AFTER_COMMIT = "success_answered_only_after_a_commit"
NOT_AFTER_FINALIZE = "no_commit_after_finalize"
BUDGET = "budgets_never_go_negative"
REMAINING = "continuation_never_requests_more_than_the_remaining_budget"
COUNTS = "gate_counts_match_generations"
ACCEPTS = "machines_accept_every_event"

G = gen_sm.State
# Machine states that hold an upstream request (the gate counts them in flight), and those the gate counts waiting.
_HOLDING = (G.STREAMING, G.CONTINUING, G.ABORTING)
_WAITING = (G.WAITING, G.INTERRUPTED)


class Trainer(enum.Enum):
    """The trainer's side of pause and resume."""

    TRAINING = "no pause call in progress"
    PAUSE_PENDING = "its pause call waits for PauseAcknowledged"
    PAUSE_RETURNED = "its pause call returned: it loads new weights, then resumes"


class Client(enum.Enum):
    """A generation's client, as the HTTP layer sees it."""

    WAITING = "its request is open"
    ANSWERED = "it got its answer (success or error)"
    GONE = "it went away before its answer"


class GateRecord(enum.Enum):
    """What the gate controller knows of a generation (from the effects it carried out)."""

    NONE = "not counted by the gate"
    IN_FLIGHT = "admitted; counted in flight"
    WAITING = "parked; counted waiting"


@attrs.frozen
class Upstream:
    """An abstract SGLang request: its rid, its max_new_tokens, what it produced, whether it is being aborted."""

    rid: str
    limit: int
    produced: int = 0
    # The weights its first token was generated with (None before any token).
    version: str | None = None
    aborting: bool = False
    # Whether it already delivered the one token in flight after its abort.
    straggled: bool = False


@attrs.frozen(cache_hash=True)
class GenWorld:
    """One generation: its machine and the records its controller keeps."""

    machine: Snapshot
    prepared: bool = False
    client: Client = Client.WAITING
    gate: GateRecord = GateRecord.NONE
    upstream: Upstream | None = None
    # The token buffer: the version stamp of every kept token, in order.
    stamps: tuple[str | None, ...] = ()
    # ParseOutput was carried out; ParseDone (or a parser failure) is pending.
    parsing: bool = False
    # (rid, weights) of its last aborted request: it may still deliver one straggler token.
    stale: tuple[str, str] | None = None
    # The session's state at each accepted commit of this generation.
    commits: tuple[str, ...] = ()


@attrs.frozen(cache_hash=True)
class World:
    """The global state of the composition."""

    gate: Snapshot
    gens: tuple[GenWorld, ...]
    trainer: Trainer
    pauses_left: int
    # The weight version SGLang has loaded (changed by the trainer while paused).
    weights: str
    # The abstract session: "ACTIVE" until the trainer finalizes it, then "FINALIZED".
    session: str = "ACTIVE"
    # (invariant name, what happened) for the first per-step violation or refused event; the world stops there.
    broken: tuple[str, str] | None = None

    def describe(self) -> str:
        """One line: gate, trainer, weights, session, then each generation."""
        gate = self.gate.data
        gens = " ".join(_describe_gen(i, g) for i, g in enumerate(self.gens))
        text = (
            f"gate={self.gate.state.name}(epoch={gate.epoch}, {gate.weight_version}, in_flight={gate.in_flight}, "
            f"waiting={gate.waiting}) trainer={self.trainer.name} weights={self.weights} session={self.session} {gens}"
        )
        return text + (f" BROKEN {self.broken[0]}: {self.broken[1]}" if self.broken else "")


def _describe_gen(i: int, g: GenWorld) -> str:
    """``g0=STREAMING(tokens 1/2, req 1) up=r1:1/2 stamps=v0 client=WAITING``, compactly."""
    data = g.machine.data
    text = f"g{i}={g.machine.state.name}({data.tokens}/{data.budget}, req {data.requests})"
    if g.upstream is not None:
        up = g.upstream
        text += f" up={up.rid}:{up.produced}/{up.limit}{'!' if up.aborting else ''}"
    text += f" stamps={','.join(str(s) for s in g.stamps) or '-'} {g.client.name.lower()}"
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
    timeouts: bool
    stragglers: bool
    versions_reported: bool
    late_commits_accepted: bool
    generation: type[gen_sm.GenerationMachine]
    gate: type[gate_sm.RolloutGate]


class _Step:
    """One step of the world, as the controllers carry it out: mutable copies, written back by ``world()``."""

    def __init__(self, world: World, config: _Config) -> None:
        self.config = config
        self.previous = world
        # The gate, restored only if the step feeds it.
        self._gate: gate_sm.RolloutGate | None = None
        self.gens = list(world.gens)
        self.machines: dict[int, gen_sm.GenerationMachine] = {}
        self.trainer = world.trainer
        self.pauses_left = world.pauses_left
        self.weights = world.weights
        self.session = world.session
        # The token being fed, as (rid, weights that generated it): what AcceptToken is checked against.
        self.token: tuple[str | None, str] | None = None

    def world(self, *, symmetry: bool = False) -> World:
        """Write the machines back and build the next world (ended generations settled; sorted under symmetry)."""
        gens = [_settle(attrs.evolve(g, machine=self.machines[i].snapshot())) if i in self.machines else g
                for i, g in enumerate(self.gens)]
        if symmetry:
            gens.sort(key=_order)
        gate = self.previous.gate if self._gate is None else self._gate.snapshot()
        return World(gate, tuple(gens), self.trainer, self.pauses_left, self.weights, self.session)

    @property
    def gate(self) -> gate_sm.RolloutGate:
        """The gate's machine, restored once per step."""
        if self._gate is None:
            self._gate = self.config.gate.from_snapshot(self.previous.gate)
        return self._gate

    def set(self, i: int, **changes: object) -> None:
        """Change generation ``i``'s records."""
        self.gens[i] = attrs.evolve(self.gens[i], **changes)

    # -- the gate controller ------------------------------------------------------------------------------------

    def gate_send(self, event: object) -> list:
        """Feed the gate; carry out its broadcast effects; return its answers (Admit, Wait) to the caller."""
        try:
            effects = self.gate.send(event)
        except (IllegalTransition, TableError) as error:
            raise _Broken(ACCEPTS, f"{type(error).__name__}: {error}") from None
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

    # -- a generation controller --------------------------------------------------------------------------------

    def machine(self, i: int) -> gen_sm.GenerationMachine:
        """Generation ``i``'s machine, restored once per step."""
        if i not in self.machines:
            self.machines[i] = self.config.generation.from_snapshot(self.gens[i].machine)
        return self.machines[i]

    def feed(self, i: int, event: object) -> None:
        """Feed generation ``i``'s machine and carry out its effects in order."""
        try:
            effects = self.machine(i).send(event)
        except (IllegalTransition, TableError) as error:
            raise _Broken(ACCEPTS, f"g{i}: {type(error).__name__}: {error}") from None
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
            # The controller draws the rid and reports it before the request goes out.
            rid = f"r{effect.request}"
            self.set(i, upstream=Upstream(rid, asked))
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
            self.set(i, parsing=True)
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
        elif not isinstance(effect, gen_sm.DropToken):
            # ReportFault, or anything new: the composition does not expect it.
            raise _Broken(ACCEPTS, f"g{i}: unexpected effect {effect!r}")

    def accept(self, i: int, effect: gen_sm.AcceptToken) -> None:
        """Record an accepted token, checking where it came from and how it is stamped."""
        g = self.gens[i]
        rid, weights = self.token
        if g.upstream is None or g.upstream.rid != rid:
            raise _Broken(NO_LATE_TOKEN, f"g{i}: token of {rid} accepted but no request of that rid is open")
        if effect.index != len(g.stamps):
            raise _Broken(ACCEPTS, f"g{i}: {effect!r} but {len(g.stamps)} tokens are kept")
        if effect.weight_version != weights:
            raise _Broken(STAMPED, f"g{i}: token generated by {weights} stamped {effect.weight_version}")
        if len(g.stamps) + 1 > self.config.budget:
            raise _Broken(BUDGET, f"g{i}: token {effect.index} over the budget of {self.config.budget}")
        self.set(i, stamps=g.stamps + (effect.weight_version,))

    def commit(self, i: int, effect: gen_sm.Commit) -> None:
        """The abstract session: accept while ACTIVE, reject after finalize."""
        g = self.gens[i]
        self.set(i, parsing=False)
        if effect.tokens != len(g.stamps):
            raise _Broken(ACCEPTS, f"g{i}: {effect!r} but {len(g.stamps)} tokens are kept")
        if self.session != "ACTIVE" and not self.config.late_commits_accepted:
            self.feed(i, gen_sm.CommitRejected("the session was finalized"))
            return
        if not self.config.partial_rollout and len(set(g.stamps)) > 1:
            raise _Broken(SINGLE_VERSION, f"g{i}: commits versions {g.stamps} without partial rollout")
        self.set(i, commits=g.commits + (self.session,))
        self.feed(i, gen_sm.CommitAccepted())


def gate_with_generation_machines(
    n: int,
    *,
    budget: int = 2,
    pauses: int = 2,
    partial_rollout: bool = True,
    clients_may_leave: bool = True,
    upstream_failures: bool = True,
    timeouts: bool = True,
    stragglers: bool = True,
    versions_reported: bool = True,
    late_commits_accepted: bool = False,
    symmetry: bool = True,
    generation: type[gen_sm.GenerationMachine] = gen_sm.GenerationMachine,
    gate: type[gate_sm.RolloutGate] = gate_sm.RolloutGate,
) -> Composition:
    """The gate, ``n`` generation machines of ``budget`` tokens, a trainer with ``pauses`` rounds, a session.

    ``late_commits_accepted`` makes the abstract session accept commits after finalize: a planted bug for tests.
    """
    config = _Config(budget, pauses, partial_rollout, clients_may_leave, upstream_failures, timeouts, stragglers,
                     versions_reported, late_commits_accepted, generation, gate)
    start = GenWorld(generation.new(partial_rollout=partial_rollout).snapshot())
    initial = World(gate.new("v0").snapshot(), (start,) * n, Trainer.TRAINING, pauses, "v0")

    def step(world: World, move) -> World:
        """Run one move in a fresh step; a per-step violation becomes the world's ``broken``."""
        run = _Step(world, config)
        try:
            move(run)
        except _Broken as broken:
            # Keep what the step did up to the violation (machines included) for the trace.
            return attrs.evolve(run.world(), broken=(broken.invariant, broken.detail))
        return run.world(symmetry=symmetry)

    def successors(world: World) -> list[tuple[str, World]]:
        """Every event enabled in ``world``, labelled for traces."""
        if world.broken is not None:
            return []
        moves = []
        trainer = world.trainer
        # The trainer: pause (bounded rounds), resume with new weights after the pause returned, finalize, repeats.
        if trainer is Trainer.TRAINING and world.pauses_left:
            moves.append(("trainer: pause", step(world, _pause)))
        if trainer is not Trainer.TRAINING:
            moves.append(("trainer: pause again", step(world, lambda run: run.gate_send(gate_sm.PauseRequested()))))
        if trainer is Trainer.PAUSE_RETURNED:
            version = f"v{pauses - world.pauses_left}"
            moves.append((f"trainer: resume {version}", step(world, lambda run: _resume(run, version))))
        else:
            # Too early (pause pending) or while running (a no-op): the same version, nothing may change.
            repeat = gate_sm.ResumeRequested(world.gate.data.weight_version)
            moves.append(("trainer: resume (repeat)", step(world, lambda run: run.gate_send(repeat))))
        if world.session == "ACTIVE":
            moves.append(("trainer: finalize", step(world, _finalize)))
        for i, g in enumerate(world.gens):
            moves += [(f"g{i}: {label}", step(world, move)) for label, move in _generation_moves(i, g, config)]
        return moves

    def is_final(world: World) -> bool:
        """Every client answered or gone, and no pause call left hanging."""
        return world.trainer is Trainer.TRAINING and all(g.client is not Client.WAITING for g in world.gens)

    switches = [f"budget {budget}", f"{pauses} pause(s)", f"partial rollout {'on' if partial_rollout else 'off'}"]
    name = f"RolloutGate x {n} GenerationMachine(s), " + ", ".join(switches)
    return Composition(name, initial, successors, _invariants(), is_final, World.describe)


def _settle(g: GenWorld) -> GenWorld:
    """An ended generation, reduced to what the invariants still read: its final state and its commits.

    Once its client is answered or gone and its machine absorbs, nothing is ever fed to it again (it has no move),
    so the rest of its record (token counts, epoch, versions, stamps) only tells apart worlds that behave the same
    from here on. Its machine data is replaced by the same minimal record for every ended generation. Called for
    the generations a step fed, so each generation is settled once, in the step it ends.
    """
    state = g.machine.state
    if g.client is Client.WAITING or state not in gen_sm.ABSORBING:
        return g
    return GenWorld(Snapshot(state, _ended_data(g, state)), prepared=True, client=g.client, commits=g.commits)


def _ended_data(g: GenWorld, state: gen_sm.State) -> gen_sm.GenerationData:
    """The minimal data an ended generation keeps: its partial rollout setting, and whether it committed."""
    committed = state is G.RESPONDED
    finish = gen_sm.FinishKind.STOP if committed else None
    return gen_sm.GenerationData(partial_rollout=g.machine.data.partial_rollout, committed=committed, finish=finish)


# The position of each machine state in its enum, for ordering generations.
_STATE_ORDER = {state: index for index, state in enumerate(G)}


def _order(g: GenWorld) -> tuple:
    """A total order on generations for the symmetry reduction: every field, None as the smallest value.

    Generations not yet prepared come last, so that in a trace the ones that started keep the low indices.
    """
    data, up = g.machine.data, g.upstream
    upstream = () if up is None else (up.rid, up.limit, up.produced, up.version or "", up.aborting, up.straggled)
    return (
        not g.prepared, _STATE_ORDER[g.machine.state], data.tokens, data.request_tokens, data.requests,
        -1 if data.epoch is None else data.epoch, data.weight_version or "", data.request_version or "",
        data.rid or "", data.finish.value if data.finish else "", data.committed, data.budget, data.prompt_tokens,
        data.partial_rollout, g.client.name, g.gate.name, upstream, tuple(s or "" for s in g.stamps), g.parsing,
        g.stale or (), g.commits,
    )


# ---- The moves -------------------------------------------------------------------------------------------------


def _pause(run: _Step) -> None:
    """The trainer pauses (one of its rounds)."""
    run.trainer = Trainer.PAUSE_PENDING
    run.pauses_left -= 1
    run.gate_send(gate_sm.PauseRequested())


def _resume(run: _Step, version: str) -> None:
    """The trainer loaded ``version`` while paused, and resumes announcing it."""
    run.weights = version
    run.gate_send(gate_sm.ResumeRequested(version))


def _finalize(run: _Step) -> None:
    """The trainer finalizes the session: from now on it rejects commits and refuses prepare."""
    run.session = "FINALIZED"


def _generation_moves(i: int, g: GenWorld, config: _Config) -> list[tuple[str, object]]:
    """The moves of generation ``i``'s client, upstream, parser and timer, from the controller's records."""
    moves: list[tuple[str, object]] = []
    if g.client is Client.WAITING and not g.prepared:
        moves.append(("prepare", lambda run: _prepare(run, i)))
    up = g.upstream
    if up is not None:
        if up.produced < up.limit and not (up.aborting and up.straggled):
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
        moves.append(("parsed", lambda run: run.feed(i, gen_sm.ParseDone())))
        if config.upstream_failures:
            moves.append(("parser fails", lambda run: _parser_fails(run, i)))
    if g.client is Client.WAITING and config.clients_may_leave:
        moves.append(("client gone", lambda run: _client_gone(run, i)))
    if g.gate is GateRecord.WAITING and config.timeouts:
        moves.append(("pause wait times out", lambda run: run.feed(i, gen_sm.PauseWaitTimedOut())))
    if g.stale is not None and config.stragglers:
        moves.append(("straggler token", lambda run: _straggler(run, i)))
    return moves


def _prepare(run: _Step, i: int) -> None:
    """The session prepares the step (refused once finalized)."""
    run.set(i, prepared=True)
    if run.session == "ACTIVE":
        run.feed(i, gen_sm.Prepared(PROMPT_TOKENS, run.config.budget))
    else:
        run.feed(i, gen_sm.PrepareFailed(400, "session_finalized", "the session was finalized"))


def _token(run: _Step, i: int) -> None:
    """SGLang generates one token with the weights loaded now."""
    up = run.gens[i].upstream
    version = up.version if up.version is not None else run.weights
    if run.weights != version:
        raise _Broken(UNMIXED, f"g{i}: {up.rid} started under {version} generates under {run.weights}")
    run.set(i, upstream=attrs.evolve(up, produced=up.produced + 1, version=version, straggled=up.aborting))
    run.token = (up.rid, run.weights)
    run.feed(i, gen_sm.TokenReceived(up.rid, run.weights if run.config.versions_reported else None))


def _end(run: _Step, i: int, finish: gen_sm.FinishKind) -> None:
    """The request ends by itself (stop, or its max_new_tokens)."""
    produced = run.gens[i].upstream.produced
    run.set(i, upstream=None)
    run.feed(i, gen_sm.UpstreamFinished(finish, produced))


def _aborted(run: _Step, i: int) -> None:
    """The aborted request ends with its abort finish; a straggler of it may still come later."""
    up = run.gens[i].upstream
    # Only recorded when stragglers are modelled (a record nobody reads would only multiply the states).
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


def _parser_fails(run: _Step, i: int) -> None:
    """The parser endpoint fails."""
    run.set(i, parsing=False)
    run.feed(i, gen_sm.UpstreamFailed(502, "parser_unavailable"))


def _client_gone(run: _Step, i: int) -> None:
    """The client goes away: the controller's task is cancelled; its reader stops; nothing more is fed after."""
    run.set(i, client=Client.GONE, upstream=None, parsing=False)
    run.feed(i, gen_sm.ClientDisconnected())


def _straggler(run: _Step, i: int) -> None:
    """A token of the last aborted request arrives late (generated before its abort, with its weights)."""
    rid, version = run.gens[i].stale
    run.token = (rid, version)
    run.feed(i, gen_sm.TokenReceived(rid, version if run.config.versions_reported else None))


# ---- The invariants --------------------------------------------------------------------------------------------


def _holding(world: World) -> bool:
    """Does any generation stream, abort, or hold an open upstream request?"""
    return any(g.machine.state in _HOLDING or g.upstream is not None for g in world.gens)


def _counts_match(world: World) -> bool:
    """The gate's counts, the gate controller's records and the machines' states agree."""
    gate = world.gate.data
    records_in_flight = sum(g.gate is GateRecord.IN_FLIGHT for g in world.gens)
    records_waiting = sum(g.gate is GateRecord.WAITING for g in world.gens)
    machines_in_flight = sum(g.machine.state in _HOLDING for g in world.gens)
    machines_waiting = sum(g.machine.state in _WAITING for g in world.gens)
    return gate.in_flight == records_in_flight == machines_in_flight and (
        gate.waiting == records_waiting == machines_waiting
    )


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
        _not_broken(NO_LATE_TOKEN),
        _not_broken(STAMPED),
        _not_broken(UNMIXED),
        _not_broken(SINGLE_VERSION),
        Invariant(AT_MOST_ONCE, lambda w: all(len(g.commits) <= 1 for g in w.gens)),
        Invariant(NOTHING_IF_ENDED, lambda w: not any(g.machine.state in ended and g.commits for g in w.gens)),
        _not_broken(SUCCESS_AFTER_COMMIT),
        Invariant(NOT_AFTER_FINALIZE, lambda w: all(c == "ACTIVE" for g in w.gens for c in g.commits)),
        Invariant(BUDGET, lambda w: (w.broken is None or w.broken[0] != BUDGET) and all(
            g.machine.data.remaining >= 0 and len(g.stamps) <= g.machine.data.budget for g in w.gens)),
        _not_broken(REMAINING),
        Invariant(COUNTS, _counts_match),
    )


# The bounds explored by default (and by the tests): (generations, token budget). Three generations with a budget
# of 2 are about 80 000 states and half a minute; ``--generations 3 --budget 2`` explores them.
DEFAULT_BOUNDS = ((1, 2), (2, 2), (3, 1))


def main(argv: list[str] | None = None) -> int:
    """Explore the composition, partial rollout on and off, and print the counts (exit 1 on a violation)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m statemachines.generation_composition", description=main.__doc__)
    parser.add_argument("--generations", type=int, default=None,
                        help="explore exactly this many generations (default: 1, 2 and 3, as the tests do)")
    parser.add_argument("--budget", type=int, default=None, help="token budget per generation (default 2; 1 for 3)")
    parser.add_argument("--pauses", type=int, default=2, help="pause/resume rounds (default 2)")
    args = parser.parse_args(argv)
    if args.generations is None:
        bounds = [(n, args.budget or budget) for n, budget in DEFAULT_BOUNDS]
    else:
        bounds = [(args.generations, args.budget or 2)]
    failed = False
    for n, budget in bounds:
        for partial in (True, False):
            system = gate_with_generation_machines(n, budget=budget, pauses=args.pauses, partial_rollout=partial)
            found = system.explore()
            print(
                f"{system.name}: {found.states} states, {found.transitions} transitions, depth {found.depth}, "
                f"{'complete' if found.complete else 'bounded'}, "
                f"{'no violation' if found.violation is None else 'VIOLATION'}"
            )
            if found.violation is not None:
                failed = True
                print(found.violation.format(system.describe))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
