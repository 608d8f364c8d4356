"""The real RolloutGate and up to three real GenerationMachines, with an abstract SGLang, trainer, session and clients.

``gate_with_generation_machines(n)`` builds a ``Composition`` for the explorer (``python -m statemachines.checking
generation`` explores the tested bounds). Every step restores the machines
from their snapshots, feeds one event and carries out the effects exactly as the controllers will: the world never
reads a machine's state to decide what to do, it only keeps the records a controller keeps (its token buffer, what
it told the gate, whether its parse is pending, its open upstream request).

The generation side (effects carried out, moves) is ``generation_step``'s, shared with ``full_world``, on the one
step mechanism of ``step``; this module adds the abstract session (``_Step.commit``), the trainer's finalize, and its
modelling choices: at most one token after an abort, stragglers for good, versions reported or not.

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
  ``every_open_request_of_an_aborting_generation_is_being_cut`` (an abort that came before the rid is sent with it);
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
sorted (``generation_step.order``: every field of the record; generations not yet prepared last), which explores
one representative per multiset. In a trace, ``g1`` names the second generation of the world *before* that step, in
that order.

Dead-record reduction: a generation that has ended (client answered or gone, machine absorbing) never moves again,
so ``generation_step.settle`` reduces it to its final state and its commits, the only things the invariants still read.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from statemachines import generation as gen_sm
from statemachines import rollout_gate as gate_sm
from statemachines.checking import generation_step as gs
from statemachines.checking.explorer import Composition, Invariant
from statemachines.checking.invariants import ACCEPTS, NOT_AFTER_FINALIZE, generation_invariants, pause_progress
from statemachines.checking.records import Client, GenWorld, Trainer, describe_gens, describe_head
from statemachines.checking.step import Broken, take
from statemachines.core import Snapshot
from statemachines.generation_machine import GenerationMachine


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
        return f"{describe_head(self)} session={self.session} {describe_gens(self)}"


@attrs.frozen(kw_only=True)
class _Config(gs.Config):
    """The bounds, this composition's modelling choices, the machine classes, and the abstract session's switch."""

    # The abstract session accepts commits after finalize: a planted bug for tests.
    late_commits_accepted: bool


class _Step(gs.GenerationStep):
    """One step of the world; the session side is the abstract session."""

    def __init__(self, world: World, config: _Config) -> None:
        super().__init__(world, config)
        self.session = world.session

    def world(self, broken: tuple[str, str] | None = None, *, symmetry: bool = True) -> World:
        """The next world: ended generations settled and, under symmetry, sorted (unless the step broke something)."""
        gens = self.settled_gens(broken is None and symmetry)
        return World(self.gate, gens, self.trainer, self.pauses_left, self.weights, self.session, broken)

    def commit(self, i: int, effect: gen_sm.Commit) -> None:
        """The abstract session: accept while ACTIVE, reject after finalize."""
        g = self.gens[i]
        self.set(i, parsing=False)
        if effect.tokens != len(g.stamps):
            raise Broken(ACCEPTS, f"g{i}: {effect!r} but {len(g.stamps)} tokens are kept")
        if self.session != "ACTIVE" and not self.config.late_commits_accepted:
            self.feed(i, gen_sm.CommitRejected("the session was finalized"))
            return
        self.record_commit(i, g, self.session)
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
    rid_in_a_later_step: bool = False,
    late_commits_accepted: bool = False,
    symmetry: bool = True,
    generation: type[GenerationMachine] = GenerationMachine,
    gate: type[gate_sm.RolloutGate] = gate_sm.RolloutGate,
    waits_for_client: Callable[[object], bool] = gen_sm.waits_for_client,
) -> Composition:
    """The gate, ``n`` generation machines of ``budget`` tokens, a trainer with ``pauses`` rounds, a session.

    ``late_commits_accepted`` makes the abstract session accept commits after finalize, ``waits_for_client`` is the
    driver's rule about its client (a variant plants the pause-liveness bug), ``generation`` and ``gate`` may be
    variant machines: planted bugs for tests. ``rid_in_a_later_step``: module docstring of ``generation_step``.
    """
    config = _Config(
        budget=budget, pauses=pauses, partial_rollout=partial_rollout, clients_may_leave=clients_may_leave,
        upstream_failures=upstream_failures, timeouts=timeouts, stragglers=stragglers, same_weights_resumes=False,
        versions_reported=versions_reported, data_reductions=False, one_token_after_abort=True,
        stale_until_next_request=False, tokens_checked_against_pause=False, gate=gate, generation=generation,
        late_commits_accepted=late_commits_accepted, rid_in_a_later_step=rid_in_a_later_step,
        waits_for_client=waits_for_client,
    )
    start = GenWorld(generation.new(partial_rollout=partial_rollout).snapshot())
    initial = World(gate.new("v0").snapshot(), (start,) * n, Trainer.TRAINING, pauses, "v0")

    def successors(world: World) -> list[tuple[str, World]]:
        """Every event enabled in ``world``, labelled for traces."""
        if world.broken is not None:
            return []
        moves = gs.trainer_moves(world, config)
        if world.session == "ACTIVE":
            moves.append(("trainer: finalize", _finalize))
        moves += gs.generation_moves(world, config, lambda i: [("prepare", lambda run: _prepare(run, i))])
        return take(world, moves, lambda w: _Step(w, config), symmetry)

    def is_final(world: World) -> bool:
        """Every client answered or gone, and no pause call left hanging."""
        return world.trainer is Trainer.TRAINING and all(g.client is not Client.WAITING for g in world.gens)

    name = gs.composition_name("RolloutGate", n, config)
    return Composition(name, initial, successors, _invariants(config), is_final, World.describe,
                       progress=(pause_progress(),))


def _finalize(run: _Step) -> None:
    """The trainer finalizes the session: from now on it rejects commits and refuses prepare."""
    run.session = "FINALIZED"


def _prepare(run: _Step, i: int) -> None:
    """The session prepares the step (refused once finalized)."""
    run.set(i, prepared=True)
    if run.session == "ACTIVE":
        run.feed(i, gen_sm.Prepared(gs.PROMPT_TOKENS, run.config.budget))
    else:
        run.feed(i, gen_sm.PrepareFailed(400, "session_finalized", "the session was finalized"))


def _invariants(config: _Config) -> tuple[Invariant, ...]:
    """The generations' invariants (``invariants.generation_invariants``); the abstract session's is invariant 5."""
    finalize = Invariant(NOT_AFTER_FINALIZE, lambda w: all(c == "ACTIVE" for g in w.gens for c in g.commits))
    return generation_invariants(config, session=(finalize,))


# The bounds explored by default (and by the tests): (generations, token budget). Three generations with a budget
# of 2 are about 80 000 states and half a minute; ``python -m statemachines.checking generation --generations 3
# --budget 2`` explores them.
DEFAULT_BOUNDS = ((1, 2), (2, 2), (3, 1))
