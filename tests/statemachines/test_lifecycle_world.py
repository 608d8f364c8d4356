"""ServiceLifecycle, level 3: the gate world with the process's lifecycle (graceful shutdown), model-checked.

The real lifecycle and the real gate, a trainer, up to two stop signals, the grace timer and the store's flush, and
N abstract generations (``statemachines/checking/gate_world.py``). Correct machines: no violation for N = 1, 2 (3 is
in ``python -m statemachines.checking gate --lifecycle``). Planted bugs: lifecycle variants with one row changed,
each found with the shortest trace, derived by hand, ending in the property it breaks.
"""

from __future__ import annotations

import attrs
import pytest

from statemachines.checking.gate_world import GateWorld, Phase, gate_with_generations
from statemachines.core import Branch, Goto, on
from statemachines.service_lifecycle import (
    TABLE,
    AdmitGeneration,
    GenerationWantsToStart,
    GraceExpired,
    ServiceLifecycle,
    State,
)

# Measured once and documented in docs/model-checking.md; a change here must be deliberate.
EXPECTED_COUNTS = {1: (265, 959), 2: (2185, 9473)}


@pytest.mark.parametrize("n", [1, 2])
def test_lifecycle_with_the_gate_and_n_generations_keeps_every_invariant_and_always_stops(n):
    system = gate_with_generations(n, lifecycle=ServiceLifecycle)
    result = system.explore(max_states=100_000)
    print(f"\n{system.name}: {result.states} states, {result.transitions} transitions, depth {result.depth}")
    assert result.violation is None, result.violation.format(system.describe)
    assert result.complete
    assert (result.states, result.transitions) == EXPECTED_COUNTS[n]


def test_lifecycle_world_exercises_every_row_of_the_lifecycle_table():
    sent = set()

    class Recording(ServiceLifecycle):
        def send(self, event):
            sent.add((self.snapshot().state, type(event)))
            return super().send(event)

    # Recording only observes (the table is the real one); every row is sent, the refused guard's pair included.
    recorded = gate_with_generations(2, lifecycle=Recording).explore()
    assert recorded.violation is None
    assert recorded.states == gate_with_generations(2, lifecycle=ServiceLifecycle).explore().states
    assert sent == set(TABLE.rows)


def _admit_while_draining(state, data, event):
    """Planted bug A: the SERVING row's admission copied into DRAINING."""
    return Goto(state, attrs.evolve(data, in_flight=data.in_flight + 1), [AdmitGeneration()])


class AdmitWhileDraining(ServiceLifecycle):
    table = TABLE.overriding(
        on(State.DRAINING, GenerationWantsToStart, _admit_while_draining, Branch(State.DRAINING, [AdmitGeneration])),
    )


def test_planted_bug_admit_while_DRAINING_is_found_with_a_three_step_trace():
    # Shortest: DRAINING needs a generation in flight (g0 start, stop), then g1 starts and is admitted.
    system = gate_with_generations(2, lifecycle=AdmitWhileDraining)
    violation = system.explore().violation
    assert violation is not None, "the explorer missed the planted bug"
    print("\n" + violation.format(system.describe))
    assert violation.labels == ("g0: start", "process: stop signal 1", "g1: start")
    assert violation.invariant == "no_admission_after_draining_began"


def _grace_expires_without_a_cut(state, data, event):
    """Planted bug B: the grace runs out but nothing is cut."""
    return Goto(State.CLOSING, data, [])


class GraceCutsNothing(ServiceLifecycle):
    table = TABLE.overriding(
        on(State.DRAINING, GraceExpired, _grace_expires_without_a_cut, Branch(State.CLOSING)),
    )


def test_planted_bug_grace_that_cuts_nothing_leaves_a_paused_waiter_and_the_stop_never_completes():
    # A generation parked by a pause is ended only by the trainer's resume, its client, or the cut: without the cut
    # the stop depends on the trainer or the client, which the progress property does not rely on.
    system = gate_with_generations(1, lifecycle=GraceCutsNothing)
    violation = system.explore().violation
    assert violation is not None, "the explorer missed the planted bug"
    print("\n" + violation.format(system.describe))
    assert violation.invariant == "every_stop_reaches_stopped_without_the_trainer_or_clients"
    final: GateWorld = violation.final
    assert final.lifecycle.state is State.CLOSING and final.generations[0].phase is Phase.WAITING


def test_the_correct_lifecycle_cuts_a_paused_waiter_when_the_grace_runs_out():
    # The same situation with the real table: the waiter is cut (its gate wait cancelled) and the process stops.
    system = gate_with_generations(1, lifecycle=ServiceLifecycle)
    world = system.initial
    for label in ("trainer: pause", "g0: start", "process: stop signal 1", "process: grace expired",
                  "g0: answered shutting_down", "process: store flushed"):
        world = dict(system.successors(world))[label]
        assert world.broken is None, world.describe()
    assert world.lifecycle.state is State.STOPPED and world.generations[0].phase is Phase.DONE
    assert world.gate.data.waiting == 0
