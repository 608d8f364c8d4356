"""``SessionChains`` keeps one chain without a dict and a dict from the second (issue 21 item 5): whatever the order
of new chains and forgotten ones, it answers as a plain dict by id would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
import pytest

from proxy.trajectory.session_chains import SessionChain, SessionChains


class _AtChain:
    """What ``SessionChains.of`` reads from a step: its chain id."""

    def __init__(self, chain_id: int) -> None:
        self.chain_id = chain_id


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 7)), max_size=40))
def test_chains_answer_as_a_dict_by_id_would(operations):
    chains, model = SessionChains(), {}
    for create, pick in operations:
        if create or not model:
            chain = chains.new_chain(None)
            assert chain.chain_id == chains.last_id and chain.chain_id not in model
            model[chain.chain_id] = chain
        else:
            gone = list(model)[pick % len(model)]
            chains.forget(model.pop(gone))
            with pytest.raises(KeyError):
                chains.of(_AtChain(gone))
        assert list(chains) == list(model.values())
        assert all(chains.of(_AtChain(chain_id)) is chain for chain_id, chain in model.items())
    chains.clear()
    assert list(chains) == []


def test_one_chain_is_held_without_a_dict():
    chains = SessionChains()
    first = chains.new_chain(None)
    assert type(chains._chains) is SessionChain
    second = chains.new_chain(None)
    assert chains._chains == {1: first, 2: second}
    chains.forget(first)
    assert chains._chains is second
