"""Pause liveness in the model checker: "every pause is acknowledged once the upstream has answered the aborts",
checked with no help from any client (issue 13's hang).

The compositions carry out ``StartUpstream`` under the rule the controller runs (``generation.waits_for_client``).
Widened to ``StartUpstream`` (the bug as it was: the driver waited for its client to read before starting a
continuation), the explorer finds the hang as a liveness violation with a short trace; with the rule as shipped it
holds in every CI bound (``test_full_composition.py`` and ``test_generation_composition.py`` explore with it).
"""

from __future__ import annotations

import attrs
import pytest

from statemachines import generation as gm
from statemachines import generation_world as gw
from statemachines.explorer import Progress
from statemachines.full_composition import gate_session_generations
from statemachines.generation_composition import gate_with_generation_machines

BUILDS = {"gate + generations": gate_with_generation_machines, "full": gate_session_generations}


@pytest.mark.parametrize("partial", [True, False], ids=["partial rollout", "no partial rollout"])
@pytest.mark.parametrize("build", sorted(BUILDS))
def test_planted_bug_driver_waits_for_its_client_before_a_request_is_found_as_a_pause_liveness_violation(
    monkeypatch, build, partial
) -> None:
    monkeypatch.setattr(gm, "WAITS_FOR_CLIENT", (gm.StartUpstream,))
    system = BUILDS[build](1, budget=2, pauses=2, partial_rollout=partial)
    violation = system.explore().violation
    assert violation is not None
    trace = violation.format(system.describe)
    print(trace)
    assert violation.invariant == gw.PAUSE_ACKNOWLEDGED
    # prepare, pause, the upstream answers the abort, resume (the next request is held for the client), pause.
    assert len(violation) == 5, trace
    assert violation.labels[-1] == "trainer: pause"
    last = violation.final.gens[0]
    assert last.start_pending is not None and last.machine.state is gm.State.ABORTING


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_the_shipped_rule_keeps_pauses_live_with_two_generations(build) -> None:
    system = BUILDS[build](2, budget=2, pauses=2, partial_rollout=True)
    assert system.progress and system.progress[0].name == gw.PAUSE_ACKNOWLEDGED
    result = system.explore()
    assert result.complete and result.violation is None, result.violation.format(system.describe)


def test_a_client_that_reads_again_ends_the_planted_hang(monkeypatch) -> None:
    """The held start is the client's to release: allowed to rely on the client, the pause is acknowledged."""
    monkeypatch.setattr(gm, "WAITS_FOR_CLIENT", (gm.StartUpstream,))
    system = gate_with_generation_machines(1, budget=2, pauses=2, partial_rollout=True)
    relaxed = [Progress(prop.name, prop.pending, prop.done, lambda label: True) for prop in system.progress]
    result = attrs.evolve(system, progress=tuple(relaxed)).explore()
    assert result.violation is None, result.violation.format(system.describe)
