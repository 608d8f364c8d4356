"""RolloutGate, level 3: the real gate composed with N abstract generations and a trainer, model-checked.

Correct gate: no violation for N = 1..3 (two pause/resume rounds, two tokens per generation). Planted bugs: gate
variants with one row changed; the explorer must find each one, with the shortest possible trace, derived by hand
in each test, ending in the invariant the bug breaks.
"""

from __future__ import annotations

import attrs
import pytest

from statemachines.checking.gate_world import GateWorld, Phase, gate_with_generations
from statemachines.core import Branch, Goto, on
from statemachines.checking.__main__ import main
from statemachines.checking.explorer import DEADLOCK
from statemachines.rollout_gate import (
    TABLE,
    AbortInFlight,
    Admit,
    AlreadyRunning,
    GenerationWantsToStart,
    PauseAcknowledged,
    PauseRequested,
    ResumeRequested,
    RolloutGate,
    State,
)

# Measured once and documented in docs/statemachines/README.md; a change here must be deliberate.
EXPECTED_COUNTS = {1: (39, 112), 2: (331, 1306), 3: (2987, 15010)}


@pytest.mark.parametrize("n", [1, 2, 3])
def test_rollout_gate_composition_with_n_generations_keeps_every_invariant(n):
    system = gate_with_generations(n, pauses=2, max_tokens=2)
    result = system.explore(max_states=100_000)
    print(f"\n{system.name}: {result.states} states, {result.transitions} transitions, depth {result.depth}")
    assert result.violation is None, result.violation.format(system.describe)
    assert result.complete
    assert (result.states, result.transitions) == EXPECTED_COUNTS[n]


def test_rollout_gate_composition_exercises_every_row_of_the_gate_table():
    # A clean result means little if the composition never drives the gate through its table: record every
    # (gate state, event) pair the generations and the trainer send, over all reachable states.
    system = gate_with_generations(2)
    sent = set()

    class Recording(RolloutGate):
        def send(self, event):
            sent.add((self.snapshot().state, type(event)))
            return super().send(event)

    # Recording only observes (the table is the real one): same states as the plain run, every row sent.
    recorded = gate_with_generations(2, gate=Recording).explore()
    assert recorded.violation is None
    assert recorded.states == system.explore().states
    assert sent == set(TABLE.rows)


def _admit_while_pausing(state, gate, event):
    """Planted bug A: the RUNNING row's admission copied into PAUSING."""
    return Goto(state, attrs.evolve(gate, in_flight=gate.in_flight + 1), [Admit(gate.epoch, gate.weight_version)])


class AdmitWhilePausingGate(RolloutGate):
    table = TABLE.overriding(
        on(State.PAUSING, GenerationWantsToStart, _admit_while_pausing, Branch(State.PAUSING, [Admit])),
    )


def test_planted_bug_admit_while_PAUSING_is_found_with_a_three_step_trace():
    # Shortest: PAUSING needs a generation in flight (g0 start, pause), then a second generation starts and is
    # admitted: 3 steps. Invariants 1 and 2 still hold there (it is counted, so the pause waits for it), but the
    # pause now waits for a stream it never aborts: no_stream_admitted_while_pausing.
    system = gate_with_generations(2, gate=AdmitWhilePausingGate)
    violation = system.explore().violation
    assert violation is not None, "the explorer missed the planted bug"
    print("\n" + violation.format(system.describe))
    assert len(violation) <= 3
    assert violation.labels == ("g0: start", "trainer: pause", "g1: start")
    assert violation.invariant == "no_stream_admitted_while_pausing"
    final: GateWorld = violation.final
    assert final.gate.state is State.PAUSING and final.generations[1].phase is Phase.STREAMING


def test_planted_bug_admit_while_PAUSING_needs_two_generations():
    # With one generation nobody can start during the pause: the bug is out of reach, the bound matters.
    assert gate_with_generations(1, gate=AdmitWhilePausingGate).explore().violation is None


def _pause_forgetting_in_flight(state, gate, event):
    """Planted bug B: pause goes straight to PAUSED and forgets what is in flight."""
    return Goto(State.PAUSED, attrs.evolve(gate, in_flight=0), [PauseAcknowledged(gate.epoch, 0, gate.waiting)])


class PauseForgetsInFlightGate(RolloutGate):
    table = TABLE.overriding(
        on(State.RUNNING, PauseRequested, _pause_forgetting_in_flight, Branch(State.PAUSED, [PauseAcknowledged])),
    )


def test_planted_bug_pause_forgetting_in_flight_breaks_invariant_1_in_two_steps():
    # Shortest: g0 start, pause -> PAUSED while g0 streams.
    violation = gate_with_generations(2, gate=PauseForgetsInFlightGate).explore().violation
    assert violation is not None
    assert violation.labels == ("g0: start", "trainer: pause")
    assert violation.invariant == "paused_means_no_generation_streaming"


def _ack_before_the_aborts(state, gate, event):
    """Planted bug C: the pause is acknowledged as soon as the aborts are requested."""
    if not gate.in_flight:
        return Goto(State.PAUSED, gate, [PauseAcknowledged(gate.epoch, 0, gate.waiting)])
    acked = PauseAcknowledged(gate.epoch, 0, gate.waiting)
    return Goto(State.PAUSING, gate, [AbortInFlight(gate.in_flight, gate.epoch), acked])


class EarlyPauseAckGate(RolloutGate):
    table = TABLE.overriding(
        on(
            State.RUNNING, PauseRequested, _ack_before_the_aborts,
            Branch(State.PAUSING, [AbortInFlight, PauseAcknowledged]),
            Branch(State.PAUSED, [PauseAcknowledged]),
        ),
    )


def test_planted_bug_early_pause_ack_breaks_invariant_2_in_two_steps():
    # Shortest: g0 start, pause -> the pause call returns while g0 is still being aborted. The gate is PAUSING,
    # not PAUSED, so only invariant 2 (seen from the trainer) catches it.
    violation = gate_with_generations(2, gate=EarlyPauseAckGate).explore().violation
    assert violation is not None
    assert violation.labels == ("g0: start", "trainer: pause")
    assert violation.invariant == "pause_returns_after_every_stream_is_interrupted_or_finished"


def _resume_ignored(state, gate, event):
    """Planted bug D: resume while PAUSED answered like a resume while RUNNING."""
    return Goto(state, gate, [AlreadyRunning(gate.epoch, gate.weight_version)])


class ResumeIgnoredGate(RolloutGate):
    table = TABLE.overriding(on(State.PAUSED, ResumeRequested, _resume_ignored, Branch(State.PAUSED, [AlreadyRunning])))


def test_planted_bug_ignored_resume_is_found_as_a_deadlock_in_three_steps():
    # No safety invariant breaks (nothing streams), but the system gets stuck: pause (PAUSED at once), g0 start
    # (waits), g0's client gives up; now only no-op resumes remain and the pause never ends: a deadlock.
    violation = gate_with_generations(1, gate=ResumeIgnoredGate).explore().violation
    assert violation is not None
    assert violation.labels == ("trainer: pause", "g0: start", "g0: client gone while waiting")
    assert violation.invariant == DEADLOCK


def test_the_command_line_explores_the_gate_world(capsys):
    assert main(["gate", "--generations", "2"]) == 0
    out = capsys.readouterr().out
    assert "RolloutGate x 2 generation(s), 2 pause(s), 2 token(s): 331 states, 1306 transitions" in out
    assert out.count("no violation") == 2
