"""Pause liveness in the model checker: "every pause is acknowledged once the upstream has answered the aborts",
checked with no help from any client (issue 13's hang).

The worlds carry out ``StartUpstream`` under the rule the controller runs (``generation.waits_for_client``). A variant
rule given to the world (``waits_for_client=``), widened to ``StartUpstream`` (the bug as it was: the driver waited for
its client to read before starting a continuation), plants the hang: the explorer finds it as a liveness violation
with a short trace; with the rule as shipped it holds in every CI bound (``test_full_world.py`` and
``test_generation_world.py`` explore with it).
"""

from __future__ import annotations

import attrs
import pytest

from statemachines import generation as gm
from statemachines.checking.explorer import Progress
from statemachines.checking.full_world import gate_session_generations
from statemachines.checking.generation_world import gate_with_generation_machines
from statemachines.checking.invariants import PAUSE_ACKNOWLEDGED

BUILDS = {"gate + generations": gate_with_generation_machines, "full": gate_session_generations}


def waits_for_client_before_every_request(effect: object) -> bool:
    """The planted rule: the driver also waits for its client before an upstream request (issue 13's hang)."""
    return gm.waits_for_client(effect) or isinstance(effect, gm.StartUpstream)


@pytest.mark.parametrize("partial", [True, False], ids=["partial rollout", "no partial rollout"])
@pytest.mark.parametrize("build", sorted(BUILDS))
def test_planted_bug_driver_waits_for_its_client_before_a_request_is_found_as_a_pause_liveness_violation(
    build, partial
) -> None:
    system = BUILDS[build](1, budget=2, pauses=2, partial_rollout=partial,
                           waits_for_client=waits_for_client_before_every_request)
    violation = system.explore().violation
    assert violation is not None, "the explorer missed the planted bug"
    trace = violation.format(system.describe)
    print("\n" + trace)
    assert violation.invariant == PAUSE_ACKNOWLEDGED
    # prepare, pause, the upstream answers the abort, resume (the next request is held for the client), pause.
    assert len(violation) == 5, trace
    assert violation.labels[-1] == "trainer: pause"
    last = violation.final.gens[0]
    assert last.start_pending is not None and last.machine.state is gm.State.ABORTING


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_the_shipped_rule_keeps_pauses_live_with_two_generations(build) -> None:
    system = BUILDS[build](2, budget=2, pauses=2, partial_rollout=True)
    assert system.progress and system.progress[0].name == PAUSE_ACKNOWLEDGED
    result = system.explore()
    assert result.complete and result.violation is None, result.violation.format(system.describe)


def test_a_client_that_reads_again_ends_the_planted_hang() -> None:
    """The held start is the client's to release: allowed to rely on the client, the pause is acknowledged."""
    system = gate_with_generation_machines(1, budget=2, pauses=2, partial_rollout=True,
                                           waits_for_client=waits_for_client_before_every_request)
    relaxed = [Progress(prop.name, prop.pending, prop.done, lambda label: True) for prop in system.progress]
    result = attrs.evolve(system, progress=tuple(relaxed)).explore()
    assert result.violation is None, result.violation.format(system.describe)
