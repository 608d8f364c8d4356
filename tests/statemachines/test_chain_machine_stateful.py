"""ChainMachine, level 2: hypothesis drives the real chain and a small independent model side by side.

The model is written from the chain's contract (spec 5.2-5.4, architecture invariant 6), not from its code: the
steps the chain owns, the position each counted generation prepared on, and the close reason. A counted commit
extends the chain only if its position is still the tip; everything else forks. A refresh (the same answer as the
step at a position) replaces the tip when it ends the same way, is shadowed below the tip when it ends at a turn
boundary, and is declined otherwise; it changes nothing in the chain. Illegal events have rules of their
own (preconditions, never ``assume``) that expect ``IllegalTransition`` and no change.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from statemachines.chain import (
    ChainMachine,
    CloseReason,
    DiscardChain,
    ExportRequested,
    ExportSegment,
    ExtendTip,
    ExtensionCommitted,
    ExtensionRequested,
    FirstStepCommitted,
    ForkAt,
    GenerationDropped,
    RefreshDeclined,
    RefreshRequested,
    StartNewSegment,
    StepShadowed,
    TipAdvanced,
    TipRefreshed,
)
from statemachines.core import IllegalTransition

CLOSES = st.sampled_from([None, None, CloseReason.LENGTH_EXHAUSTED, CloseReason.NO_END_OF_TURN])


class ChainModel:
    """What the chain should be: its phase, its owned steps, the positions counted generations prepared on."""

    def __init__(self) -> None:
        self.phase = "pending"  # pending, live, exported, abandoned
        self.steps = 0
        self.counted: list[int] = []
        self.close: CloseReason | None = None

    @property
    def state(self) -> str:
        if self.phase == "pending":
            return "PENDING"
        if self.phase in ("exported", "abandoned"):
            return self.phase.upper()
        if self.close is not None:
            return "CLOSED"
        return "EXTENDING" if self.counted else "OPEN"


class ChainVersusModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.chain = ChainMachine.new()
        self.model = ChainModel()
        self.last_steps = 0

    def send(self, event, expected: list) -> None:
        assert self.chain.send(event) == expected

    def send_illegal(self, event) -> None:
        before = self.chain.snapshot()
        with pytest.raises(IllegalTransition):
            self.chain.send(event)
        assert self.chain.snapshot() == before

    def live(self) -> bool:
        return self.model.phase == "live"

    @precondition(lambda self: self.model.phase == "pending")
    @rule(close=CLOSES)
    def first_step(self, close):
        m = self.model
        m.phase, m.steps, m.close = "live", 1, close
        self.send(FirstStepCommitted(close), [TipAdvanced(1)])

    @precondition(lambda self: self.model.phase == "pending")
    @rule()
    def pending_generation_fails(self):
        self.model.phase = "abandoned"
        self.send(GenerationDropped(), [DiscardChain()])

    @precondition(lambda self: self.live())
    @rule(data=st.data())
    def request(self, data):
        m = self.model
        at = data.draw(st.integers(1, m.steps), label="at")
        if at < m.steps:
            self.send(ExtensionRequested(at), [ForkAt(at)])
        elif m.close is not None:
            self.send(ExtensionRequested(at), [StartNewSegment(m.close)])
        else:
            m.counted.append(at)
            self.send(ExtensionRequested(at), [ExtendTip(at)])

    @precondition(lambda self: self.live() and self.model.counted)
    @rule(data=st.data(), close=CLOSES)
    def counted_commit(self, data, close):
        m = self.model
        at = m.counted.pop(data.draw(st.integers(0, len(m.counted) - 1), label="which"))
        if at == m.steps and m.close is None:
            m.steps += 1
            m.close = close
            self.send(ExtensionCommitted(at, close), [TipAdvanced(m.steps)])
        else:
            # A sibling moved (or closed) the tip first: the commit forks, nothing is overwritten.
            self.send(ExtensionCommitted(at, close), [ForkAt(at)])

    @precondition(lambda self: self.live() and self.model.counted)
    @rule(data=st.data())
    def counted_drop(self, data):
        m = self.model
        m.counted.pop(data.draw(st.integers(0, len(m.counted) - 1), label="which"))
        self.send(GenerationDropped(), [])

    @precondition(lambda self: self.live())
    @rule(data=st.data(), close=CLOSES)
    def refresh(self, data, close):
        m = self.model
        at = data.draw(st.integers(1, m.steps), label="at")
        if at == m.steps and close == m.close:
            expected = [TipRefreshed(at)]
        elif at < m.steps and close is None:
            expected = [StepShadowed(at)]
        else:
            expected = [RefreshDeclined(at)]
        self.send(RefreshRequested(at, close), expected)

    @precondition(lambda self: not self.live())
    @rule(at=st.integers(1, 3))
    def refresh_of_a_chain_without_a_live_tip_is_illegal(self, at):
        self.send_illegal(RefreshRequested(at))

    @precondition(lambda self: self.model.phase in ("pending", "live"))
    @rule()
    def export(self):
        m = self.model
        if m.phase == "pending":
            m.phase = "abandoned"
            self.send(ExportRequested(), [DiscardChain()])
        else:
            m.phase = "exported"
            self.send(ExportRequested(), [ExportSegment(m.steps)])

    # -- illegal events --------------------------------------------------------------------------------------------

    @precondition(lambda self: not self.live())
    @rule(at=st.integers(0, 4))
    def request_on_a_chain_without_a_live_tip_is_illegal(self, at):
        self.send_illegal(ExtensionRequested(at))

    @precondition(lambda self: self.live())
    @rule(extra=st.integers(1, 3))
    def request_beyond_the_tip_is_illegal(self, extra):
        self.send_illegal(ExtensionRequested(self.model.steps + extra))

    @precondition(lambda self: not self.model.counted)
    @rule(at=st.integers(1, 4))
    def commit_nobody_counted_is_illegal(self, at):
        self.send_illegal(ExtensionCommitted(at))

    @precondition(lambda self: not self.model.counted and self.model.phase != "pending")
    @rule()
    def drop_nobody_counted_is_illegal(self):
        self.send_illegal(GenerationDropped())

    @precondition(lambda self: self.model.phase != "pending")
    @rule()
    def first_step_twice_is_illegal(self):
        self.send_illegal(FirstStepCommitted())

    @precondition(lambda self: self.model.phase in ("exported", "abandoned"))
    @rule()
    def export_twice_is_illegal(self):
        self.send_illegal(ExportRequested())

    # -- invariants ------------------------------------------------------------------------------------------------

    @invariant()
    def chain_matches_the_model(self):
        m = self.model
        stats = self.chain.statistics()
        assert stats.state == m.state
        assert stats.steps == m.steps
        assert stats.extenders == len(m.counted)
        assert stats.close_reason == (m.close.value if m.close else None)

    @invariant()
    def steps_never_decrease(self):
        steps = self.chain.statistics().steps
        assert steps >= self.last_steps
        self.last_steps = steps

    @invariant()
    def counted_generations_prepared_on_existing_steps(self):
        assert all(1 <= at <= self.model.steps for at in self.model.counted)


TestChainVersusModel = ChainVersusModel.TestCase
TestChainVersusModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
