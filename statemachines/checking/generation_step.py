"""The generation side of the worlds: what a generation's controllers keep and do, written once for
``generation_world`` (an abstract session) and ``full_world`` (the real session and chains).

Theory of operation
-------------------
Both worlds run the real RolloutGate and real GenerationMachines, feed one event per step and carry out the
effects exactly as ``proxy/controllers/gate.py`` and ``generation_driver.py`` do: the world never reads a machine's state
to decide what to do, it only keeps the records a controller keeps (``records``). They differ in the session side
only (who admits a generation, how a ``Commit`` is answered, what ``DropFromSession`` releases) and in a few
modelling choices. What they share lives here:

- ``GenerationStep``, one ``step.Step`` of a world: mutable drafts of the generations, the gate and the generation
  machines fed through their pure ``send`` (memoized in ``step.WorldConfig``), and their effects carried out:
  ``AskGate`` answered in the same step (``GateAdmitted`` / ``GateWait``); the gate's broadcast effects as the gate's
  own rule says (``rollout_gate.tell``: ``AbortInFlight`` reaches every in-flight generation as ``AbortRequested``,
  ``AdmitWaiters`` every waiter as ``Resumed``); ``StartUpstream`` reported as ``UpstreamStarted`` (in the same step,
  or with ``rid_in_a_later_step`` in a later move of the driver); tokens accepted (and checked), the parse, the
  answers. A world subclasses it for its session side: ``commit`` answers a ``Commit`` (``record_commit`` then
  ``CommitAccepted``, or ``CommitRejected``), ``drop`` carries out ``DropFromSession``, ``world`` builds its world;
- the moves: the trainer's pause and resume (``trainer_moves``), and each generation's SGLang request, parser,
  client, pause-wait timer and stragglers (``generation_moves``; the world adds its prepare moves);
- the dead-record reduction (``settle``) and the symmetry reduction's order (``order``).

Modelling choices, fixed by each world in its ``Config`` (generation world / full world):

- ``one_token_after_abort``: after an abort SGLang delivers at most one more token (the decode step in flight),
  or any number up to the request's limit (an over-approximation);
- ``stale_until_next_request``: a straggler of the last aborted request may come for good (and is dropped by its
  rid while a later request streams), or only until the next request starts, the output is parsed or the client
  leaves (the window where no request is open);
- ``tokens_checked_against_pause``: no token may be accepted between the pause acknowledgement and the resume;
- ``versions_reported``: SGLang reports the weights of each token (or not: the announced version stamps it);
- ``data_reductions``: token stamps are a count where nothing reads more (and the world may reduce more);
- ``rid_in_a_later_step``: the driver draws the request's rid and reports it (``UpstreamStarted``) in a move of its
  own after ``StartUpstream``, as the controller does when its reader task runs (off by default: the CI bounds
  report it in the same step; the planted abort-before-rid bug needs the window);
- ``drop_in_a_later_step``: the driver carries out ``DropFromSession`` (the session counts the generation out) in a
  move of its own, as the controller's driver task does after the effect was queued: another generation's prepare
  or commit may come first (off by default: the session counts it out in the same step; the conformance test,
  ``tests/conformance/``, turns it and ``rid_in_a_later_step`` on to have the controller's timing);
- ``prepared_in_a_later_step``: the session's admission (``GenerationRequested``, the branch) is a move of its own
  and the end of the prepare a later one, as in the controller, whose prepare awaits the encode after admitting:
  ``Prepared``, or the registry's roll-back (the client left during the encode: the session drops the generation and
  its machine hears ``ClientDisconnected`` in RECEIVED; a refusal after admission, the context window: dropped, then
  ``PrepareFailed``), with other generations' moves in between (off by default: prepare is one move; on in the
  conformance test);
- ``length_may_end_turn``: a request that hits its ``max_new_tokens`` may have made the end-of-turn token its last
  (SGLang reports ``length`` then), so the session keeps the chain open as after a stop (the parse move says which:
  ``parsed (the last token ended the turn)``); off by default: every ``length`` step closes its chain;
- ``waits_for_client``: the driver's rule about its client (``generation.waits_for_client``; a variant rule plants
  the pause-liveness bug).

A little over ~500 lines: every effect a generation's driver carries out has its counterpart here, next to the
moves that produce the events; splitting effects from moves would put one job's two halves in two files.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import attrs

from statemachines import generation as gen_sm
from statemachines import rollout_gate as gate_sm
from statemachines.checking.invariants import (
    ACCEPTS, BUDGET, NO_LATE_TOKEN, NO_TOKEN_WHILE_PAUSED, REMAINING, SINGLE_VERSION, STAMPED, SUCCESS_AFTER_COMMIT,
    UNMIXED,
)
from statemachines.checking.records import Client, GateRecord, GenWorld, Trainer, Upstream, freeze, thaw
from statemachines.checking.step import Broken, Move, Step, WorldConfig
from statemachines.core import Snapshot
from statemachines.generation_machine import GenerationMachine

G = gen_sm.State

# The prompt length every generation is prepared with (only the routed-experts start position depends on it).
PROMPT_TOKENS = 4


@attrs.frozen(kw_only=True)
class Config(WorldConfig):
    """The bounds, the modelling choices (module docstring) and the machine classes (variants for planted bugs);
    a world subclasses it for its session side."""

    budget: int
    pauses: int
    partial_rollout: bool
    clients_may_leave: bool
    upstream_failures: bool
    timeouts: bool
    stragglers: bool
    same_weights_resumes: bool
    versions_reported: bool
    data_reductions: bool
    one_token_after_abort: bool
    stale_until_next_request: bool
    tokens_checked_against_pause: bool
    gate: type[gate_sm.RolloutGate]
    generation: type[GenerationMachine]
    rid_in_a_later_step: bool = False
    drop_in_a_later_step: bool = False
    prepared_in_a_later_step: bool = False
    length_may_end_turn: bool = False
    waits_for_client: Callable[[object], bool] = gen_sm.waits_for_client
    # Memo of each generation's sort key (generations recur in many worlds; their hash is cached).
    orders: dict[GenWorld, tuple] = attrs.field(factory=dict, eq=False)

    def order(self, g: GenWorld) -> tuple:
        """``order(g)``, memoized."""
        found = self.orders.get(g)
        if found is None:
            found = self.orders[g] = order(g)
        return found


class GenerationStep(Step):
    """One step of a world, as the controllers carry it out: mutable copies, written back by ``world()``.

    The world must have ``gate``, ``gens``, ``trainer``, ``pauses_left`` and ``weights``; a subclass copies the
    rest, builds the next world in ``world`` (with ``settled_gens``) and answers the session side's effects.
    """

    config: Config

    def __init__(self, world: Any, config: Config) -> None:
        super().__init__(config)
        self.gate = world.gate
        self.gens: list[Any] = list(world.gens)
        self.touched: set[int] = set()
        self.trainer = world.trainer
        self.pauses_left = world.pauses_left
        self.weights = world.weights
        # The parse of this step found the end-of-turn token last (``length_may_end_turn``): the commit reads it.
        self.turn_ended = False

    def settled_gens(self, sort: bool) -> tuple[GenWorld, ...]:
        """The generations, frozen again: the ended ones settled and, with ``sort``, in the symmetry order."""
        gens = [settle(freeze(g)) if i in self.touched else g for i, g in enumerate(self.gens)]
        if sort:
            gens.sort(key=self.config.order)
        return tuple(gens)

    def set(self, i: int, **changes: object) -> None:
        """Change generation ``i``'s records (in a mutable draft, frozen again by ``world()``)."""
        if i not in self.touched:
            self.gens[i] = thaw(self.gens[i])
            self.touched.add(i)
        draft = self.gens[i]
        for name, value in changes.items():
            setattr(draft, name, value)

    # -- the gate controller ------------------------------------------------------------------------------------

    def gate_send(self, event: object) -> list:
        """Feed the gate; carry out its broadcast effects as its own rule says (``rollout_gate.tell``); return its
        answers (Admit, Wait) to the caller."""
        self.gate, effects = self.config.send(self.config.gate, self.gate, event, "gate")
        answers = []
        for effect in effects:
            if isinstance(effect, (gate_sm.Admit, gate_sm.Wait)):
                answers.append(effect)
                continue
            if isinstance(effect, gate_sm.AlreadyPaused):
                # This pause call returns at once.
                self.trainer = Trainer.PAUSE_RETURNED
                continue
            in_flight = [i for i, g in enumerate(self.gens) if g.gate is GateRecord.IN_FLIGHT]
            waiting = [i for i, g in enumerate(self.gens) if g.gate is GateRecord.WAITING]
            told = gate_sm.tell(effect, in_flight, waiting)
            if told.mismatch is not None:
                raise Broken(ACCEPTS, told.mismatch)
            for i in told.abort:
                self.feed(i, gen_sm.AbortRequested())
            for i in told.resume:
                self.set(i, gate=GateRecord.IN_FLIGHT)
            if told.resumed is not None:
                # The resume call returns; each waiter is in flight before any of them runs.
                self.trainer = Trainer.TRAINING
                for i in told.resume:
                    self.feed(i, gen_sm.Resumed(told.resumed.epoch, told.resumed.weight_version))
            if told.acknowledged is not None:
                # Every pending pause call returns.
                self.trainer = Trainer.PAUSE_RETURNED
            # AlreadyPausing, AlreadyRunning, ResumeRefused: the caller is answered; nothing else changes.
        return answers

    # -- the session side (a composition's) ---------------------------------------------------------------------

    @abc.abstractmethod
    def commit(self, i: int, effect: gen_sm.Commit) -> None:
        """Answer generation ``i``'s ``Commit``: ``record_commit`` then ``CommitAccepted``, or ``CommitRejected``
        (the composition's session side decides)."""

    def drop(self, i: int) -> None:
        """``DropFromSession`` (it never committed): the session counts it out. Nothing to do by default."""

    def record_commit(self, i: int, g: Any, recorded: str) -> None:
        """The session accepted generation ``i``'s commit (``g``: its records before the commit)."""
        if not self.config.partial_rollout and len(set(g.stamps)) > 1:
            raise Broken(SINGLE_VERSION, f"g{i}: commits versions {g.stamps} without partial rollout")
        self.set(i, commits=g.commits + (recorded,))

    # -- a generation controller --------------------------------------------------------------------------------

    def reduced(self, snapshot: Snapshot) -> Snapshot:
        """A generation's snapshot as the world keeps it (a composition may make dead data canonical)."""
        return snapshot

    def feed(self, i: int, event: object) -> None:
        """Feed generation ``i``'s machine and carry out its effects in order."""
        snapshot, effects = self.config.send(self.config.generation, self.gens[i].machine, event, f"g{i}")
        self.set(i, machine=self.reduced(snapshot))
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
            if _held_for_client(effect, config) and g.client is Client.WAITING:
                # The driver first waits for its client to read what earlier requests streamed (before the first
                # request nothing is staged: that wait returns at once); only the client's move goes on.
                self.set(i, start_pending=effect)
            elif config.rid_in_a_later_step:
                # The driver's reader task draws the rid and reports it in a move of its own (a pause may come
                # first: the machine must remember its abort until the rid is known).
                self.set(i, start_pending=effect)
            else:
                self.start_upstream(i, effect)
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
        elif isinstance(effect, gen_sm.AcceptTokens):
            self.accept(i, effect)
        elif isinstance(effect, gen_sm.DiscardPartial):
            if effect.tokens != len(g.stamps):
                raise Broken(ACCEPTS, f"g{i}: {effect!r} but {len(g.stamps)} tokens are kept")
            self.set(i, stamps=())
        elif isinstance(effect, gen_sm.ParseOutput):
            if effect.tokens != len(g.stamps):
                raise Broken(ACCEPTS, f"g{i}: {effect!r} but {len(g.stamps)} tokens are kept")
            # The step is done upstream and no token joins the buffer any more: with the data reductions a
            # single-version buffer is only a count from now on.
            single = len(set(g.stamps)) <= 1 and config.data_reductions
            stamps = ("*",) * len(g.stamps) if single else g.stamps
            stale = None if config.stale_until_next_request else g.stale
            self.set(i, parsing=True, finish=effect.finish, stale=stale, stamps=stamps)
        elif isinstance(effect, gen_sm.Commit):
            self.commit(i, effect)
        elif isinstance(effect, gen_sm.Respond):
            if not g.commits:
                raise Broken(SUCCESS_AFTER_COMMIT, f"g{i}: {effect!r} without a commit")
            self.set(i, client=Client.ANSWERED)
        elif isinstance(effect, gen_sm.RespondError):
            self.set(i, client=Client.ANSWERED)
        elif isinstance(effect, gen_sm.DropFromSession):
            if g.commits:
                raise Broken(ACCEPTS, f"g{i}: dropped from the session after committing")
            if config.drop_in_a_later_step:
                self.set(i, drop_pending=True)
            else:
                self.drop(i)
        elif not isinstance(effect, (gen_sm.DropTokens, gen_sm.AnswerNobody)):
            # ReportFault, or anything new: the composition does not expect it.
            raise Broken(ACCEPTS, f"g{i}: unexpected effect {effect!r}")

    def start_upstream(self, i: int, effect: gen_sm.StartUpstream) -> None:
        """The driver draws the request's rid and reports it (``UpstreamStarted``) before the request goes out."""
        g = self.gens[i]
        config = self.config
        kept, asked = effect.kept_tokens, effect.max_new_tokens
        if kept != len(g.stamps) or not 1 <= asked <= config.budget - kept:
            raise Broken(REMAINING, f"g{i}: {effect!r} with {len(g.stamps)} kept of a budget of {config.budget}")
        if g.upstream is not None:
            raise Broken(ACCEPTS, f"g{i}: {effect!r} while {g.upstream.rid} is open")
        rid = f"r{effect.request}"
        self.set(i, upstream=Upstream(rid, asked), stale=None if config.stale_until_next_request else g.stale,
                 start_pending=None)
        self.feed(i, gen_sm.UpstreamStarted(rid))

    def accept(self, i: int, effect: gen_sm.AcceptTokens) -> None:
        """Record an accepted token, checking when it came, where from and how it is stamped."""
        g = self.gens[i]
        config = self.config
        # The token the world fed (TokensReceived): the rid and the weights that generated it.
        (rid, weights), = effect.tokens
        if config.tokens_checked_against_pause and (
                self.trainer is Trainer.PAUSE_RETURNED or self.gate.state is gate_sm.State.PAUSED):
            raise Broken(NO_TOKEN_WHILE_PAUSED, f"g{i}: token of {rid} accepted while paused")
        if g.upstream is None or g.upstream.rid != rid:
            raise Broken(NO_LATE_TOKEN, f"g{i}: token of {rid} accepted but no request of that rid is open")
        if effect.index != len(g.stamps):
            raise Broken(ACCEPTS, f"g{i}: {effect!r} but {len(g.stamps)} tokens are kept")
        if effect.weight_version != weights:
            raise Broken(STAMPED, f"g{i}: token generated by {weights} stamped {effect.weight_version}")
        if len(g.stamps) + 1 > config.budget:
            raise Broken(BUDGET, f"g{i}: token {effect.index} over the budget of {config.budget}")
        # Checked above against the weights that made it; with partial rollout nothing reads a stamp again but the
        # count; without, the commit checks that the step is single-version.
        stamp = "*" if config.partial_rollout and config.data_reductions else effect.weight_version
        self.set(i, stamps=g.stamps + (stamp,))


def _held_for_client(effect: gen_sm.StartUpstream, config: Config) -> bool:
    """Does the driver hold this start until its client reads (``waits_for_client``; never before the first
    request, when nothing is staged yet)?"""
    return config.waits_for_client(effect) and effect.request > 1


def settle(g: GenWorld) -> GenWorld:
    """An ended generation, reduced to what the invariants still read: its final state, its commits (and its
    session record).

    Once its client is answered or gone and its machine absorbs, nothing is ever fed to it again (it has no move),
    so the rest of its record (token counts, epoch, versions, stamps) only tells apart worlds that behave the same
    from here on. Its machine data is replaced by the same minimal record for every ended generation. Called for
    the generations a step changed, so each generation is settled in the step it ends.
    """
    state = g.machine.state
    if g.client is Client.WAITING or state not in gen_sm.ABSORBING:
        return g
    committed = state is G.RESPONDED
    data = gen_sm.GenerationData(partial_rollout=g.machine.data.partial_rollout, committed=committed,
                                 finish=gen_sm.FinishKind.STOP if committed else None)
    return GenWorld(Snapshot(state, data), prepared=True, client=g.client, commits=g.commits,
                    attachment=g.attachment, drop_pending=g.drop_pending)


# The position of each machine state in its enum, for ordering generations.
_STATE_ORDER = {state: index for index, state in enumerate(G)}


def order(g: GenWorld) -> tuple:
    """A total order on generations for the symmetry reduction: every field, None as the smallest value.

    The generations of a world are identical (same budget, same partial rollout setting, all start in RECEIVED)
    and nothing refers to one by its position, so a world keeps them sorted: one representative per multiset.
    Generations not yet prepared come last, so that in a trace the ones that started keep the low indices.
    """
    data, up, att = g.machine.data, g.upstream, g.attachment
    upstream = () if up is None else (up.rid, up.limit, up.produced, up.version or "", up.aborting, up.straggled)
    return (
        not g.prepared, _STATE_ORDER[g.machine.state], data.tokens, data.request_tokens, data.requests,
        -1 if data.epoch is None else data.epoch, data.weight_version or "", data.request_version or "",
        data.rid or "", data.finish.value if data.finish else "", data.committed, data.budget, data.prompt_tokens,
        data.partial_rollout, g.client.name, g.gate.name, upstream, tuple(s or "" for s in g.stamps), g.parsing,
        g.finish.value if g.finish else "", g.stale or (), () if att is None else att.key, g.commits,
        () if g.start_pending is None else (g.start_pending.request, g.start_pending.kept_tokens), g.drop_pending,
        g.preparing,
    )


# ---- The moves -------------------------------------------------------------------------------------------------

def trainer_moves(world: Any, config: Config) -> list[tuple[str, Move]]:
    """The trainer's pause (bounded rounds) and resume after its pause returned (round k announces ``vk``; with
    ``same_weights_resumes`` it may also keep the weights), and its repeats (idempotent or refused)."""
    moves: list[tuple[str, Move]] = []
    trainer = world.trainer
    if trainer is Trainer.TRAINING and world.pauses_left:
        moves.append(("trainer: pause", _pause))
    if trainer is not Trainer.TRAINING:
        moves.append(("trainer: pause again", lambda run: run.gate_send(gate_sm.PauseRequested())))
    if trainer is Trainer.PAUSE_RETURNED:
        version = f"v{config.pauses - world.pauses_left}"
        moves.append((f"trainer: resume {version}", lambda run: _resume(run, version)))
        if config.same_weights_resumes:
            moves.append(("trainer: resume (same weights)", lambda run: _resume(run, None)))
    else:
        # Too early (pause pending) or while running (a no-op): the same version, nothing may change.
        repeat = gate_sm.ResumeRequested(world.gate.data.weight_version)
        moves.append(("trainer: resume (repeat)", lambda run: run.gate_send(repeat)))
    return moves


def _pause(run: GenerationStep) -> None:
    """The trainer pauses (one of its rounds)."""
    run.trainer = Trainer.PAUSE_PENDING
    run.pauses_left -= 1
    run.gate_send(gate_sm.PauseRequested())


def _resume(run: GenerationStep, version: str | None) -> None:
    """The trainer resumes: it loaded ``version`` while paused and announces it, or kept the weights (None)."""
    if version is not None:
        run.weights = version
    run.gate_send(gate_sm.ResumeRequested(version))


def generation_moves(world: Any, config: Config,
                     prepares: Callable[[int], list[tuple[str, Move]]]) -> list[tuple[str, Move]]:
    """Every generation's moves, labelled ``g<i>: ...``: its prepare moves (``prepares(i)``, the session side's)
    until it is prepared, then those of its upstream request, parser, client, pause-wait timer and stragglers."""
    moves: list[tuple[str, Move]] = []
    for i, g in enumerate(world.gens):
        if g.preparing:
            # Admitted, its prepare not done (``prepared_in_a_later_step``): only the prepare's end (the session
            # side's moves) can come next; nothing was sent, parsed or asked of the gate yet.
            own = prepares(i)
        else:
            own = prepares(i) if g.client is Client.WAITING and not g.prepared else []
            own += _moves_of(i, g, config)
        moves += [(f"g{i}: {label}", move) for label, move in own]
    return moves


def _moves_of(i: int, g: GenWorld, config: Config) -> list[tuple[str, Move]]:
    """The moves of generation ``i``'s upstream, parser, client, timer and stragglers, from its records."""
    moves: list[tuple[str, Move]] = []
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
        moves.append(("parsed", lambda run: _parsed(run, i)))
        if config.length_may_end_turn and g.finish is gen_sm.FinishKind.LENGTH:
            moves.append(("parsed (the last token ended the turn)", lambda run: _parsed(run, i, turn_ended=True)))
        if config.upstream_failures:
            moves.append(("parser fails", lambda run: _parser_fails(run, i)))
    if g.client is Client.WAITING and config.clients_may_leave:
        moves.append(("client gone", lambda run: _client_gone(run, i)))
    if g.start_pending is not None:
        label = "client reads" if _held_for_client(g.start_pending, config) else "driver sends the request"
        moves.append((label, lambda run: run.start_upstream(i, run.gens[i].start_pending)))
    if g.drop_pending:
        moves.append(("driver drops it from the session", lambda run: _driver_drops(run, i)))
    if g.gate is GateRecord.WAITING and config.timeouts:
        moves.append(("pause wait times out", lambda run: run.feed(i, gen_sm.PauseWaitTimedOut())))
    if g.stale is not None and config.stragglers:
        moves.append(("straggler token", lambda run: _straggler(run, i)))
    return moves


def _driver_drops(run: GenerationStep, i: int) -> None:
    """The driver carries out a ``DropFromSession`` held back by ``drop_in_a_later_step``."""
    run.set(i, drop_pending=False)
    run.drop(i)


def _token(run: GenerationStep, i: int) -> None:
    """SGLang generates one token with the weights loaded now."""
    up = run.gens[i].upstream
    version = up.version if up.version is not None else run.weights
    if run.weights != version:
        raise Broken(UNMIXED, f"g{i}: {up.rid} started under {version} generates under {run.weights}")
    straggled = up.aborting and run.config.one_token_after_abort
    run.set(i, upstream=attrs.evolve(up, produced=up.produced + 1, version=version, straggled=straggled))
    token = (up.rid, run.weights)
    run.feed(i, gen_sm.TokensReceived(up.rid, run.weights if run.config.versions_reported else None, (token,)))


def _end(run: GenerationStep, i: int, finish: gen_sm.FinishKind) -> None:
    """The request ends by itself (stop, or its max_new_tokens)."""
    produced = run.gens[i].upstream.produced
    run.set(i, upstream=None)
    run.feed(i, gen_sm.UpstreamFinished(finish, produced))


def _aborted(run: GenerationStep, i: int) -> None:
    """The aborted request ends with its abort finish; a straggler of it may still come later."""
    up = run.gens[i].upstream
    # Only recorded when stragglers are modelled (a record nobody reads would only multiply the states).
    stale = (up.rid, up.version or run.weights) if run.config.stragglers else None
    run.set(i, upstream=None, stale=stale)
    run.feed(i, gen_sm.UpstreamAborted(up.produced))


def _upstream_fails(run: GenerationStep, i: int) -> None:
    """The request fails (connection refused, 5xx, stream cut)."""
    run.set(i, upstream=None)
    run.feed(i, gen_sm.UpstreamFailed())


def _foreign_abort(run: GenerationStep, i: int) -> None:
    """SGLang aborts the request on its own (someone paused or aborted it directly, not through the proxy)."""
    produced = run.gens[i].upstream.produced
    run.set(i, upstream=None)
    run.feed(i, gen_sm.UpstreamAborted(produced))


def _parsed(run: GenerationStep, i: int, turn_ended: bool = False) -> None:
    """The parser is done (its ``Commit`` follows in the same step); ``turn_ended``: module docstring."""
    run.turn_ended = turn_ended
    run.set(i, parsing=False)
    run.feed(i, gen_sm.ParseDone())


def _parser_fails(run: GenerationStep, i: int) -> None:
    """The parser endpoint fails."""
    run.set(i, parsing=False)
    run.feed(i, gen_sm.UpstreamFailed(502, "parser_unavailable"))


def _client_gone(run: GenerationStep, i: int) -> None:
    """The client goes away: the controller's task is cancelled; its reader stops; nothing more is fed after."""
    stale = None if run.config.stale_until_next_request else run.gens[i].stale
    # A start held back for the client is dropped too: its driver stops (the flush fails, nothing more is fed).
    run.set(i, client=Client.GONE, upstream=None, parsing=False, stale=stale, start_pending=None)
    run.feed(i, gen_sm.ClientDisconnected())


def _straggler(run: GenerationStep, i: int) -> None:
    """A token of the last aborted request arrives late (generated before its abort, with its weights)."""
    rid, version = run.gens[i].stale
    run.feed(i, gen_sm.TokensReceived(rid, version if run.config.versions_reported else None, ((rid, version),)))


# ---- Names ---------------------------------------------------------------------------------------------------


def composition_name(machines: str, n: int, config: Config) -> str:
    """``<machines> x 3 GenerationMachine(s), budget 2, 2 pause(s), partial rollout on``."""
    partial = "on" if config.partial_rollout else "off"
    return f"{machines} x {n} GenerationMachine(s), budget {config.budget}, {config.pauses} pause(s), " \
           f"partial rollout {partial}"
