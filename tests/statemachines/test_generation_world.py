"""GenerationMachine, level 3: the real RolloutGate with up to three real GenerationMachines, model-checked.

Correct machines: no violation, complete exploration, pinned state counts, for 1-3 generations with two pause/resume
rounds, partial rollout on and off. Planted bugs (machine variants with one row changed, and one abstract-session
variant): the explorer must find each with the shortest trace, derived by hand in each test.
"""

from __future__ import annotations

import attrs
import pytest

from statemachines import generation as gm
from statemachines import generation_machine as gmm
from statemachines.checking import generation_world as gc
from statemachines.checking import invariants as inv
from statemachines.checking.__main__ import main
from statemachines.checking.records import Trainer
from statemachines.core import Branch, Goto, on
from statemachines.checking.generation_world import DEFAULT_BOUNDS, gate_with_generation_machines
from statemachines.rollout_gate import State as GateState
from tests.statemachines.planted import FullBudgetGeneration, LateTokenGeneration

S = gm.State
# Measured once and documented in docs/statemachines/README.md; a change here must be deliberate.
# (generations, budget, partial rollout) -> (states, transitions).
EXPECTED_COUNTS = {
    (1, 2, True): (287, 1592),
    (1, 2, False): (225, 1195),
    (1, 3, True): (431, 2518),
    (2, 2, True): (5284, 48401),
    (2, 2, False): (2991, 25555),
    (3, 1, True): (14669, 163875),
    (3, 1, False): (11913, 130042),
}


@pytest.mark.parametrize("n, budget, partial", sorted(EXPECTED_COUNTS), ids=str)
def test_generation_composition_keeps_every_invariant(n, budget, partial):
    system = gate_with_generation_machines(n, budget=budget, partial_rollout=partial)
    result = system.explore(max_states=100_000)
    print(f"\n{system.name}: {result.states} states, {result.transitions} transitions, depth {result.depth}")
    assert result.violation is None, result.violation.format(system.describe)
    assert result.complete
    assert (result.states, result.transitions) == EXPECTED_COUNTS[(n, budget, partial)]


def test_generation_composition_default_bounds_are_the_tested_ones():
    assert {(n, budget, partial) for n, budget in DEFAULT_BOUNDS for partial in (True, False)} <= set(EXPECTED_COUNTS)


def test_generation_composition_with_unreported_versions_stamps_the_announced_version():
    # SGLang reports no weight_version: every token is stamped with the version announced at its admission, which
    # the trainer's resume sets to the weights it loaded; the same worlds, the same verdict.
    system = gate_with_generation_machines(2, versions_reported=False)
    result = system.explore()
    assert result.violation is None, result.violation.format(system.describe)
    assert (result.states, result.transitions) == EXPECTED_COUNTS[(2, 2, True)]


def test_generation_composition_symmetry_reduction_changes_the_count_not_the_verdict():
    plain = gate_with_generation_machines(2, budget=1, symmetry=False).explore()
    reduced = gate_with_generation_machines(2, budget=1).explore()
    assert plain.violation is None and reduced.violation is None
    assert reduced.states < plain.states
    assert plain.depth == reduced.depth


# Rows the composition cannot drive, each covered by test_generation_machine.py: InternalError (a controller bug);
# the absorbing states' rows (an ended generation is never fed again, and is settled); COMMITTING's other rows (the
# abstract session answers a commit in the same step, as the shielded critical section does); a second
# AbortRequested (one pause aborts once) and an UpstreamStarted while aborting (the rid is reported in the step that
# started the request).
UNDRIVEN = (
    {(state, gm.InternalError) for state in S}
    | {(state, event) for state in gm.ABSORBING for event in (gm.TokensReceived, gm.ClientDisconnected)}
    | {(S.COMMITTING, gm.TokensReceived), (S.COMMITTING, gm.ClientDisconnected)}
    | {(S.ABORTING, gm.AbortRequested), (S.ABORTING, gm.UpstreamStarted)}
)


def test_generation_composition_drives_every_other_row_of_the_table():
    sent: set = set()
    effects: set = set()

    class Recording(gmm.GenerationMachine):
        def send(self, event):
            sent.add((self.snapshot().state, type(event)))
            out = super().send(event)
            effects.update(type(effect) for effect in out)
            return out

    for partial in (True, False):
        result = gate_with_generation_machines(2, partial_rollout=partial, generation=Recording).explore()
        assert result.violation is None
    assert sent == set(gmm.TABLE.rows) - UNDRIVEN
    # Every branch kind that matters shows up: continuation, restart, length without a request, stragglers.
    assert {gm.StartUpstream, gm.DiscardPartial, gm.DropTokens, gm.AcknowledgeAbortToGate, gm.CancelGateWait} <= effects


# ---- Planted bug 1: a token accepted after the pause acknowledgement ----------------------------------------------


def test_planted_bug_token_after_the_pause_acknowledgement_is_found_in_four_steps():
    # Shortest: g0 streams; the pause aborts it; its abort finish acknowledges (the gate is PAUSED, the pause call
    # returns); a straggler of the aborted request arrives and is recorded.
    system = gate_with_generation_machines(1, generation=LateTokenGeneration)
    violation = system.explore().violation
    assert violation is not None, "the explorer missed the planted bug"
    print("\n" + violation.format(system.describe))
    assert violation.labels == ("g0: prepare", "trainer: pause", "g0: upstream aborted", "g0: straggler token")
    assert violation.invariant == inv.NO_LATE_TOKEN
    final: gc.World = violation.final
    assert final.gate.state is GateState.PAUSED and final.trainer is Trainer.PAUSE_RETURNED
    assert final.gens[0].machine.state is S.INTERRUPTED and final.gens[0].machine.data.tokens == 1


def test_planted_bug_token_after_the_pause_acknowledgement_needs_stragglers_in_the_model():
    # Without stragglers nothing ever sends a token to an INTERRUPTED generation: the bound matters.
    system = gate_with_generation_machines(2, generation=LateTokenGeneration, stragglers=False)
    assert system.explore().violation is None


# ---- Planted bug 2: a continuation that re-requests the full budget -----------------------------------------------


def test_planted_bug_continuation_with_the_full_budget_is_found_at_the_resume():
    # Shortest: g0 streams; the pause aborts it; the token in flight arrives (kept); the abort is acknowledged; the
    # resume continues it asking for 2 more tokens with 1 kept of a budget of 2 (SGLang would then overrun the
    # budget: 3 tokens > 2).
    system = gate_with_generation_machines(1, generation=FullBudgetGeneration)
    violation = system.explore().violation
    assert violation is not None, "the explorer missed the planted bug"
    print("\n" + violation.format(system.describe))
    assert violation.labels == (
        "g0: prepare", "trainer: pause", "g0: token", "g0: upstream aborted", "trainer: resume v1",
    )
    assert violation.invariant == inv.REMAINING
    assert "kept_tokens=1, max_new_tokens=2" in violation.final.broken[1]


def test_planted_bug_continuation_with_the_full_budget_is_out_of_reach_without_partial_rollout():
    # Without partial rollout a resumed generation restarts, and a restart rightly asks for the whole budget.
    system = gate_with_generation_machines(2, generation=FullBudgetGeneration, partial_rollout=False)
    assert system.explore().violation is None


# ---- Planted bug 3: a commit after finalize ------------------------------------------------------------------------


def test_planted_bug_session_accepting_a_commit_after_finalize_is_found_in_five_steps():
    # The abstract session keeps accepting commits after finalize. Shortest: g0 is prepared (before finalize, else
    # prepare is refused), the trainer finalizes, g0 gets its token, upstream stops, g0 parses and commits.
    system = gate_with_generation_machines(1, late_commits_accepted=True)
    violation = system.explore().violation
    assert violation is not None, "the explorer missed the planted bug"
    print("\n" + violation.format(system.describe))
    assert violation.labels == ("g0: prepare", "trainer: finalize", "g0: token", "g0: upstream stops", "g0: parsed")
    assert violation.invariant == inv.NOT_AFTER_FINALIZE
    assert violation.final.gens[0].commits == ("FINALIZED",)


def _rejected_answered_as_committed(state, gen, event):
    """A rejected commit is answered as if it had been stored."""
    return Goto(S.RESPONDED, attrs.evolve(gen, committed=True), [gm.Respond(gen.finish, gen.tokens)])


class RejectedAsCommittedGeneration(gmm.GenerationMachine):
    table = gmm.TABLE.overriding(
        on(S.COMMITTING, gm.CommitRejected, _rejected_answered_as_committed, Branch(S.RESPONDED, [gm.Respond])),
    )


def test_planted_bug_late_generation_answered_as_committed_is_found_in_five_steps():
    # The session rejects the late commit, but the generation answers success: the client believes in a step that
    # was never stored (a late generation must get a clear error, spec section 4).
    system = gate_with_generation_machines(1, generation=RejectedAsCommittedGeneration)
    violation = system.explore().violation
    assert violation is not None, "the explorer missed the planted bug"
    assert violation.labels == ("g0: prepare", "trainer: finalize", "g0: token", "g0: upstream stops", "g0: parsed")
    assert violation.invariant == inv.SUCCESS_AFTER_COMMIT


def test_generation_composition_main_prints_the_counts(capsys):
    assert main(["generation", "--generations", "1"]) == 0
    out = capsys.readouterr().out
    assert "RolloutGate x 1 GenerationMachine(s), budget 2, 2 pause(s), partial rollout on: 287 states" in out
    assert out.count("no violation") == 2


# ---- Planted bug 4: an abort that comes before the request's rid is known is forgotten ----------------------------
#
# The controller's reader task draws a request's rid and reports it (UpstreamStarted) some time after StartUpstream;
# a pause may come first. The machine must remember that abort: UpstreamStarted while ABORTING answers
# AbortUpstream(rid) (the request is cut the moment it exists). rid_in_a_later_step models that window.

# (generations, partial rollout) -> (states, transitions) with the window modelled.
RID_WINDOW_COUNTS = {(1, True): (315, 1724), (1, False): (243, 1278)}


@pytest.mark.parametrize("n, partial", sorted(RID_WINDOW_COUNTS), ids=str)
def test_generation_composition_with_the_rid_reported_later_keeps_every_invariant(n, partial):
    sent: set = set()

    class Recording(gmm.GenerationMachine):
        def send(self, event):
            sent.add((self.snapshot().state, type(event)))
            return super().send(event)

    system = gate_with_generation_machines(n, partial_rollout=partial, rid_in_a_later_step=True, generation=Recording)
    result = system.explore()
    assert result.violation is None, result.violation.format(system.describe)
    assert (result.states, result.transitions) == RID_WINDOW_COUNTS[(n, partial)]
    # The window is reached: a pause's abort arrives before the rid, and the rid then comes to an aborting machine.
    assert (S.ABORTING, gm.UpstreamStarted) in sent


def _started_forgetting_the_abort(state, gen, event):
    """The rid comes to an aborting machine, which names the request but forgets the abort that came first."""
    return Goto(state, attrs.evolve(gen, rid=event.rid), [])


class ForgetsAnEarlyAbortGeneration(gmm.GenerationMachine):
    table = gmm.TABLE.overriding(
        on(S.ABORTING, gm.UpstreamStarted, _started_forgetting_the_abort, Branch(S.ABORTING, when="rid not set")),
    )


def test_planted_bug_abort_before_the_rid_is_known_is_found_in_three_steps():
    # Shortest: g0 is admitted (StartUpstream; its rid is not drawn yet); the trainer pauses (AbortRequested: nothing
    # to cut yet); the driver sends the request: it streams on, uncut, while the pause waits for it.
    system = gate_with_generation_machines(1, rid_in_a_later_step=True, generation=ForgetsAnEarlyAbortGeneration)
    violation = system.explore().violation
    assert violation is not None, "the explorer missed the planted bug"
    print("\n" + violation.format(system.describe))
    assert len(violation) <= 3
    assert violation.labels == ("g0: prepare", "trainer: pause", "g0: driver sends the request")
    assert violation.invariant == inv.ABORT_SENT
    final: gc.World = violation.final
    assert final.gate.state is GateState.PAUSING and final.trainer is Trainer.PAUSE_PENDING
    assert final.gens[0].machine.state is S.ABORTING and not final.gens[0].upstream.aborting


def test_planted_bug_abort_before_the_rid_is_known_needs_the_window_in_the_model():
    # With the rid reported in the step that starts the request, no abort can come first: the model's choices matter.
    assert gate_with_generation_machines(1, generation=ForgetsAnEarlyAbortGeneration).explore().violation is None
