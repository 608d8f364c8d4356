"""SessionMachine + ChainMachines, level 3: composed with N abstract generations and a trainer, model-checked.

Correct machines: no violation for N = 1..3 (and with a step limit), every row of both tables driven. Planted bugs:
machine variants with one row changed, and a world whose commit does not hold the session's lock; the explorer must
find each with the shortest trace, derived by hand, and prints it (``pytest -s``).
"""

from __future__ import annotations

import attrs
import pytest

from statemachines import chain as chain_sm
from statemachines import session as session_sm
from statemachines.checking.session_world import GenPhase, SessionWorld, session_with_generations
from statemachines.checking.__main__ import main
from statemachines.checking.explorer import explore
from statemachines.core import Branch, Goto, on

# Measured once and documented in docs/statemachines/README.md; a change here must be deliberate.
EXPECTED_COUNTS = {(1, None): (41, 175), (2, None): (582, 2868), (3, None): (19182, 105099), (3, 2): (5474, 30293)}


@pytest.mark.parametrize("n, max_steps", sorted(EXPECTED_COUNTS, key=str), ids=str)
def test_session_composition_with_n_generations_keeps_every_invariant(n, max_steps):
    system = session_with_generations(n, max_steps=max_steps)
    result = system.explore(max_states=200_000)
    print(f"\n{system.name}: {result.states} states, {result.transitions} transitions, depth {result.depth}")
    assert result.violation is None, result.violation.format(system.describe)
    assert result.complete
    assert (result.states, result.transitions) == EXPECTED_COUNTS[(n, max_steps)]


def test_session_composition_exercises_every_row_of_both_tables():
    # Record every (state, event) pair the composition sends, over all reachable states of N = 3; the step limit's
    # refusal (a branch of a row the unlimited run drives) is checked with a limit of 2.
    sent: set = set()
    effects: set = set()

    def recording(base):
        class Recording(base):
            def send(self, event):
                sent.add((self.snapshot().state, type(event)))
                out = super().send(event)
                effects.update(type(effect) for effect in out)
                return out
        return Recording

    machines = dict(session=recording(session_sm.SessionMachine), chain=recording(chain_sm.ChainMachine))
    result = session_with_generations(3, **machines).explore()
    assert result.violation is None
    assert set(session_sm.TABLE.rows) | set(chain_sm.TABLE.rows) == sent
    assert chain_sm.StartNewSegment in effects and session_sm.MaxStepsReached not in effects
    assert {chain_sm.TipRefreshed, chain_sm.StepShadowed, chain_sm.RefreshDeclined} <= effects
    assert session_with_generations(3, max_steps=2, **machines).explore().violation is None
    assert session_sm.MaxStepsReached in effects


def _accept_anyway(state, data, event):
    """Planted bug A: a session being finalized still accepts commits."""
    left = attrs.evolve(data, in_flight=data.in_flight - 1, steps=data.steps + 1)
    return Goto(state, left, [session_sm.AcceptCommit(left.steps)])


class LateCommitSession(session_sm.SessionMachine):
    table = session_sm.TABLE.overriding(
        on(session_sm.State.FINALIZING, session_sm.CommitRequested, _accept_anyway,
           Branch(session_sm.State.FINALIZING, [session_sm.AcceptCommit])),
    )


def test_planted_bug_commit_after_finalize_is_found_with_a_three_step_trace():
    # Shortest: a generation is prepared, the trainer finalizes, the generation commits: 3 steps. The step is
    # accepted by a session that left ACTIVE (invariant 5); its pending chain was abandoned by the export, so the
    # step is also in no exported segment, but invariant 5 is checked first.
    system = session_with_generations(2, session=LateCommitSession)
    violation = system.explore().violation
    assert violation is not None, "the explorer missed the planted bug"
    print("\n" + violation.format(system.describe))
    assert violation.labels == ("g0: prepare (no checkpoint)", "trainer: finalize", "g0: commit")
    assert violation.invariant == "no_commit_after_session_left_active"
    final: SessionWorld = violation.final
    assert final.steps[0].accepted_in == "FINALIZING"


def _overwrite(state, data, event):
    """Planted bug B: a counted commit always advances the tip, even after a sibling moved it."""
    left = attrs.evolve(data, extenders=data.extenders - 1, steps=data.steps + 1)
    target = chain_sm.State.EXTENDING if left.extenders else chain_sm.State.OPEN
    return Goto(target, left, [chain_sm.TipAdvanced(left.steps)])


class OverwritingChain(chain_sm.ChainMachine):
    table = chain_sm.TABLE.overriding(
        on(chain_sm.State.EXTENDING, chain_sm.ExtensionCommitted, _overwrite,
           Branch(chain_sm.State.EXTENDING, [chain_sm.TipAdvanced]),
           Branch(chain_sm.State.OPEN, [chain_sm.TipAdvanced])),
    )


def test_planted_bug_sibling_overwrite_is_found_with_a_six_step_trace():
    # Shortest: a first step, two siblings prepared on it, both commit: the second is put at position 3 although
    # it extends step 1, so the chain's path back from its tip (steps 1, 3) no longer holds its positions (the
    # chain is not one token path). Needs three generations.
    system = session_with_generations(3, chain=OverwritingChain)
    violation = system.explore().violation
    assert violation is not None
    assert violation.labels == (
        "g0: prepare (no checkpoint)", "g0: commit", "g1: prepare on c0 tip", "g2: prepare on c0 tip",
        "g1: commit", "g2: commit",
    )
    assert violation.invariant == "every_committed_step_owned_by_exactly_one_chain"
    assert session_with_generations(2, chain=OverwritingChain).explore().violation is None


def _export_pending(state, data, event):
    """Planted bug C: finalize exports a pending chain (its generation has not committed) instead of abandoning it."""
    return Goto(chain_sm.State.EXPORTED, attrs.evolve(data, steps=1), [chain_sm.ExportSegment(0)])


class ExportingPendingChain(chain_sm.ChainMachine):
    table = chain_sm.TABLE.overriding(
        on(chain_sm.State.PENDING, chain_sm.ExportRequested, _export_pending,
           Branch(chain_sm.State.EXPORTED, [chain_sm.ExportSegment])),
    )


def test_planted_bug_exporting_a_pending_chain_is_found_with_a_two_step_trace():
    # Pending prompt structure must never be exported: a generation is prepared, the trainer finalizes, and the
    # export holds a segment without any committed step.
    system = session_with_generations(1, chain=ExportingPendingChain)
    violation = system.explore().violation
    assert violation is not None
    assert violation.labels == ("g0: prepare (no checkpoint)", "trainer: finalize")
    assert violation.invariant == "every_committed_step_in_exactly_one_exported_segment"
    assert violation.final.exported == ((),) and violation.final.generations[0].phase is GenPhase.PREPARED


def _discard_on_failure(state, data, event):
    """Planted bug D (the behaviour before issue 13): a failed export discards the session and its steps."""
    return Goto(session_sm.State.ABORTED, data, [session_sm.DiscardSession(f"export failed: {event.reason}")])


class DiscardingOnExportFailureSession(session_sm.SessionMachine):
    table = session_sm.TABLE.overriding(
        on(session_sm.State.FINALIZING, session_sm.ExportFailed, _discard_on_failure,
           Branch(session_sm.State.ABORTED, [session_sm.DiscardSession])),
    )


def test_planted_bug_export_failure_discarding_committed_steps_is_found_with_a_four_step_trace():
    # Shortest: one step committed, finalize, its export fails: the committed step is gone with the session.
    system = session_with_generations(1, session=DiscardingOnExportFailureSession)
    violation = system.explore().violation
    assert violation is not None
    assert violation.labels == ("g0: prepare (no checkpoint)", "g0: commit", "trainer: finalize",
                                "trainer: export fails")
    assert violation.invariant == "no_committed_step_lost_by_a_failed_export"


def _replace_anywhere(state, data, event):
    """Planted bug E: a refresh always replaces the tip, even of a chain continued past the refreshed step."""
    return Goto(state, data, [chain_sm.TipRefreshed(event.at)])


class ReplacingChain(chain_sm.ChainMachine):
    table = chain_sm.TABLE.overriding(*(
        on(state, chain_sm.RefreshRequested, _replace_anywhere, Branch(state, [chain_sm.TipRefreshed]))
        for state in (chain_sm.State.OPEN, chain_sm.State.EXTENDING, chain_sm.State.CLOSED)
    ))


def test_planted_bug_a_refresh_below_the_tip_that_replaces_it_is_found_with_a_six_step_trace():
    # Shortest: a first step; a retry of its request is prepared; the chain is extended; the retry commits the
    # same answer as step 1 and is taken as the tip at position 1: step 2 no longer holds a position of its chain
    # (it would be lost from the export). Needs three generations.
    system = session_with_generations(3, chain=ReplacingChain)
    violation = system.explore().violation
    assert violation is not None
    assert violation.labels == (
        "g0: prepare (no checkpoint)", "g0: commit", "g1: prepare (no checkpoint)", "g2: prepare on c0 tip",
        "g2: commit", "g1: commit the same answer as s1",
    )
    assert violation.invariant == "every_committed_step_owned_by_exactly_one_chain"
    assert session_with_generations(2, chain=ReplacingChain).explore().violation is None


# ---- Planted bug F: a commit without the session's lock ------------------------------------------------------------
#
# The lock (proxy/controllers/session_registry.py) makes each commit one critical section: the session's check
# (CommitRequested) and the act (the chain's commit, the step's record) happen in one step of the world. Without it
# (commit_holds_the_lock=False) the commit reads the world in one move and writes its outcome in a later one, over
# whatever ran in between.

# The longest trace a planted bug may take to be found: a shorter one is what makes a failure readable.
SHORT = 6


def test_planted_bug_commit_without_the_lock_is_found_racing_the_finalize_in_four_steps():
    # Shortest: g0 is prepared and its commit reads; the trainer finalizes (the pending chain is abandoned, nothing is
    # exported); the commit writes its step back, over the export: a committed step in no exported segment.
    system = session_with_generations(2, commit_holds_the_lock=False)
    violation = system.explore().violation
    assert violation is not None, "the explorer missed the planted bug"
    print("\n" + violation.format(system.describe))
    assert len(violation) <= SHORT
    assert violation.labels == ("g0: prepare (no checkpoint)", "g0: commit (reads)", "trainer: finalize",
                                "g0: commit (writes)")
    assert violation.invariant == "every_committed_step_in_exactly_one_exported_segment"


def _prepares_first_no_trainer(system):
    """``system``'s successors with the trainer left out and every prepare before any other move (a schedule)."""

    def successors(world):
        moves = [(label, target) for label, target in system.successors(world) if not label.startswith("trainer")]
        return [(label, target) for label, target in moves if ": prepare" in label] or moves

    return successors


def test_planted_bug_two_commits_without_the_lock_interleave_and_one_is_lost():
    # The trainer left out and both generations prepared first: two commits on one session read the same world, and
    # the second write loses the first commit's step, although both generations were answered as committed.
    system = session_with_generations(2, commit_holds_the_lock=False)
    violation = explore(system.initial, _prepares_first_no_trainer(system), system.invariants).violation
    assert violation is not None, "the explorer missed the planted bug"
    print("\n" + violation.format(system.describe))
    assert len(violation) <= SHORT
    assert violation.labels == (
        "g0: prepare (no checkpoint)", "g1: prepare (no checkpoint)", "g0: commit (reads)", "g1: commit (reads)",
        "g0: commit (writes)", "g1: commit (writes)",
    )
    assert violation.invariant == "no_accepted_commit_lost"
    # With the lock, the same schedule keeps every invariant.
    locked = session_with_generations(2)
    assert explore(locked.initial, _prepares_first_no_trainer(locked), locked.invariants).violation is None


def test_the_command_line_explores_the_session_world(capsys):
    assert main(["session", "--generations", "2"]) == 0
    out = capsys.readouterr().out
    assert "SessionMachine + ChainMachines x 2 generation(s): 582 states, 2868 transitions" in out
    assert out.count("no violation") == 2
