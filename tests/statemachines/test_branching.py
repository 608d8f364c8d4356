"""The branching rule (``statemachines/branching.py``) on real ChainMachines behind a minimal port.

Each test walks one case of the rule and checks what the chains were told and what the caller gets back; the
compositions (test_session_composition.py, test_full_composition.py) and the session's own tests check the rule in
every interleaving.
"""

from __future__ import annotations

import pytest

from statemachines import branching
from statemachines import chain as chain_sm
from statemachines import session as session_sm
from statemachines.branching import Mode, Placed, Refresh

LENGTH = chain_sm.CloseReason.LENGTH_EXHAUSTED


class Chains:
    """Chains by number, the events each one heard, and the bases new chains were made for."""

    def __init__(self) -> None:
        self.machines: dict[int, chain_sm.ChainMachine] = {}
        self.bases: dict[int, str | None] = {}
        self.heard: list[tuple[int, str]] = []

    def send(self, chain: int, event: object) -> list[object]:
        self.heard.append((chain, type(event).__name__))
        return self.machines[chain].send(event)

    def new_chain(self, base: str | None) -> int:
        chain = len(self.bases)
        self.machines[chain], self.bases[chain] = chain_sm.ChainMachine.new(), base
        return chain

    def forget(self, chain: int) -> None:
        del self.machines[chain]

    def state(self, chain: int) -> str:
        return self.machines[chain].snapshot().state.name


def _first_step(chains: Chains, close: chain_sm.CloseReason | None = None) -> int:
    """A chain owning one committed step ("s1")."""
    claim = branching.attach(chains, None)
    return branching.commit(chains, claim, close).chain


def test_no_checkpoint_attaches_to_a_new_pending_chain_whose_first_step_it_commits():
    chains = Chains()
    claim = branching.attach(chains, None)
    assert (claim.mode, claim.chain, claim.base, claim.at, claim.closed_tip) == (Mode.NEW_SEGMENT, 0, None, 0, None)
    assert chains.state(0) == "PENDING"
    placement = branching.commit(chains, claim, None)
    assert (placement.chain, placement.position, placement.placed) == (0, 1, Placed.FIRST_STEP)
    assert placement.is_tip and not placement.forked


def test_the_tip_is_extended_in_place_and_a_sibling_that_loses_the_race_forks_at_commit():
    chains = Chains()
    c = _first_step(chains)
    first = branching.attach(chains, "s1", c, 1)
    second = branching.attach(chains, "s1", c, 1)
    assert first.mode is second.mode is Mode.EXTEND_TIP and first.chain == c
    assert branching.commit(chains, first, None) == branching.Placement(c, 2, Placed.EXTENDED)
    lost = branching.commit(chains, second, None)
    assert (lost.chain, lost.position, lost.placed, lost.forked) == (1, 1, Placed.FORKED, True)
    assert chains.bases[1] == "s1"
    assert chains.heard[-2:] == [(0, "ExtensionCommitted"), (1, "FirstStepCommitted")]


def test_below_the_tip_forks_and_a_closed_tip_starts_a_new_segment_with_its_reason():
    chains = Chains()
    c = _first_step(chains)
    branching.commit(chains, branching.attach(chains, "s1", c, 1), None)
    splice = branching.attach(chains, "s1", c, 1)
    assert (splice.mode, splice.chain, splice.base) == (Mode.FORK, None, "s1")
    assert branching.commit(chains, splice, None).placed is Placed.FORKED

    closed = _first_step(chains, LENGTH)
    after = branching.attach(chains, "s9", closed, 1)
    assert (after.mode, after.closed_tip, after.base) == (Mode.NEW_SEGMENT, LENGTH, None)
    assert chains.state(after.chain) == "PENDING"


def test_a_refresh_takes_the_refreshed_position_and_releases_the_generations_own_chain():
    chains = Chains()
    c = _first_step(chains)
    retry = branching.attach(chains, None)
    placement = branching.commit(chains, retry, None, Refresh(c, 1))
    assert placement == branching.Placement(c, 1, Placed.TIP_REFRESHED)
    # The retry's pending chain owns nothing: discarded.
    assert retry.chain not in chains.machines

    branching.commit(chains, branching.attach(chains, "s1", c, 1), None)
    shadowed = branching.commit(chains, branching.attach(chains, None), None, Refresh(c, 1))
    assert (shadowed.placed, shadowed.is_tip) == (Placed.SHADOWED, False)


def test_a_declined_refresh_commits_as_a_step_of_its_own():
    chains = Chains()
    c = _first_step(chains)
    placement = branching.commit(chains, branching.attach(chains, None), LENGTH, Refresh(c, 1))
    assert placement.placed is Placed.FIRST_STEP and placement.chain != c


def test_release_follows_the_sessions_answer():
    chains = Chains()
    claim = branching.attach(chains, None)
    assert not branching.release(chains, claim, [session_sm.SessionClosed("finalized")])
    assert chains.state(claim.chain) == "PENDING"
    assert branching.release(chains, claim, [session_sm.ReleaseBranch()])
    assert claim.chain not in chains.machines


def test_restart_segment_leaves_the_tip_for_a_new_pending_chain_or_detaches():
    chains = Chains()
    c = _first_step(chains)
    claim = branching.attach(chains, "s1", c, 1)
    assert chains.state(c) == "EXTENDING"
    restarted = branching.restart_segment(chains, claim, [session_sm.RestartSegment()])
    assert (restarted.mode, restarted.base, chains.state(c)) == (Mode.NEW_SEGMENT, None, "OPEN")
    assert chains.state(restarted.chain) == "PENDING"
    assert branching.restart_segment(chains, claim, []) == branching.detached()


def test_export_exports_owning_chains_and_discards_pending_ones():
    chains = Chains()
    c = _first_step(chains)
    pending = branching.attach(chains, None).chain
    export = branching.export(chains, [c, pending])
    assert export.segments == (branching.ExportedChain(c, 1),)
    assert export.discarded == (pending,) and pending not in chains.machines


def test_an_answer_the_rule_has_no_case_for_is_reported():
    class Silent(Chains):
        def send(self, chain, event):
            super().send(chain, event)
            return []

    chains = Silent()
    with pytest.raises(branching.UnexpectedAnswer, match="answered"):
        branching.commit(chains, branching.attach(chains, None), None)


def test_same_checkpoint_means_the_same_position_or_both_none():
    assert branching.same_checkpoint(None, None)
    assert branching.same_checkpoint((1, 2), (1, 2))
    assert not branching.same_checkpoint((1, 2), (1, 1)) and not branching.same_checkpoint(None, (1, 1))
