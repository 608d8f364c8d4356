"""A session's chains: each one's ``ChainMachine`` and tip step, and the collection the branching rule
(``statemachines/branching.py``) drives through its ``ChainPort``."""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from proxy.trajectory.tokens import Step
from statemachines import chain as chain_sm


@attrs.define(eq=False)
class SessionChain:
    """One chain of a session: its machine, and its tip step (its segment is the walk back from the tip)."""

    chain_id: int
    machine: chain_sm.ChainMachine
    tip: Step | None = None


@attrs.define(eq=False)
class SessionChains:
    """The session's chains by id: the ``ChainPort`` through which the branching rule (``statemachines/
    branching.py``) drives their machines. Chain ids count up from 1 in creation order and are never reused."""

    # None, the one chain (nearly every session: one segment), or a dict by id from the second: a dict of one chain
    # was 224 bytes of every live session (issue 21 item 5). Read through _by_id.
    _chains: dict[int, SessionChain] | SessionChain | None = None
    _last_id: int = 0

    def _by_id(self) -> dict[int, SessionChain]:
        chains = self._chains
        if chains is None:
            return {}
        return {chains.chain_id: chains} if type(chains) is SessionChain else chains

    def send(self, chain: SessionChain, event: object) -> list[object]:
        """Feed the chain's machine."""
        return chain.machine.send(event)

    def new_chain(self, base: Step | None) -> SessionChain:
        """A new chain (pending). ``base`` is not kept: each committed step records its own (``Step.base``)."""
        self._last_id += 1
        chain = SessionChain(self._last_id, chain_sm.ChainMachine.new())
        if self._chains is None:
            self._chains = chain
        else:
            chains = self._by_id()
            chains[chain.chain_id] = chain
            self._chains = chains
        return chain

    @property
    def last_id(self) -> int:
        """The id of the newest chain created so far (0: none)."""
        return self._last_id

    def rewind_ids(self, last_id: int) -> None:
        """Replay only (``session_replay.py``): the next chain gets ``last_id + 1``, the id it got live (chains of
        generations that never committed left gaps the journal does not hold)."""
        self._last_id = last_id

    def forget(self, chain: SessionChain) -> None:
        """The chain owns no step and never will."""
        chains = self._by_id()
        del chains[chain.chain_id]
        # back to the compact forms (an emptied dict keeps its table)
        self._chains = None if not chains else next(iter(chains.values())) if len(chains) == 1 else chains

    def of(self, step: Step) -> SessionChain:
        """The chain that holds ``step``."""
        chains = self._chains
        if type(chains) is SessionChain and chains.chain_id == step.chain_id:
            return chains
        return self._by_id()[step.chain_id]

    def __iter__(self) -> Iterator[SessionChain]:
        """The chains in creation order; a copy, so a rule may forget chains while it walks them."""
        return iter(list(self._by_id().values()))

    def clear(self) -> None:
        """Forget every chain (the session's data is freed)."""
        self._chains = None


__all__ = ["SessionChain", "SessionChains"]
