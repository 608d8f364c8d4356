"""The running side of the conformance check: the interleaving tests' real stack and operations
(``tests/interleavings/scenario.py``), limited to what the checked world models, with every machine observed.

The full composition models one session, up to three generations of one token budget, a trainer with a bounded
number of pause rounds and a finalize, and conversations that start anew or continue the session's head (the latest
committed step). So a conformance scenario has one session, one ``max_tokens`` for all its chats (the world's
budget: 1, 2 or 24), at most three chats and two pauses, and:

- each chat says something of its own (``count (c0)``, ``more (c2)``): two chats never send the same messages, so no
  commit is an idempotent retry of another (a refresh, outside this world);
- a next turn waits until no generation runs (nothing can commit meanwhile), then continues the head, as the world's
  ``prepare (next turn of the head)`` does;
- the trainer's pauses are awaited (a pause in the background lets the trainer resume before its pause call
  returned, which the world's trainer never does);
- partial rollout is on: without it, the session's version stamp (spec 7) refuses steps that the world, which does
  not model stamps, accepts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import trio
from hypothesis import strategies as st

from statemachines.core import OBSERVER
from tests.conformance.traces import MachineTrace, Recorder
from tests.interleavings.scenario import (
    Chat,
    Client,
    Disconnect,
    Finalize,
    Pause,
    Resume,
    Scenario,
    Sleep,
    run_scenario,
)

#: The session of every conformance chat.
SESSION = "s0"
MAX_CHATS = 3
MAX_PAUSES = 2
# How often a next turn looks whether the generations ended (mock seconds).
_POLL = 0.01


@attrs.define(eq=False)
class ConformanceScenario(Scenario):
    """The interleaving tests' scenario, with conversations the world can follow (module docstring)."""

    sessions: tuple[str, ...] = (SESSION,)

    async def conversation(self, client: Client) -> list[dict[str, Any]]:
        """A first turn of its own, or the next turn of the head once no generation runs."""
        if client.op.next_turn:
            while self.controller.statistics().active:
                await trio.sleep(_POLL)
            view = self.services.sessions.debug_view(client.session)
            head = view.head if view is not None else None
            answered = [other for other in self.clients if head is not None and other.generation is not None
                        and other.generation.prepared.generation_id == head.generation_id]
            if answered:
                last = answered[0]
                return [*last.messages, last.generation.output.message.to_openai(),
                        {"role": "user", "content": f"more ({client.name})"}]
        return [{"role": "user", "content": f"count ({client.name})"}]


@attrs.frozen
class Run:
    """A conformance example: the world's budget and the operations."""

    budget: int
    ops: tuple[Any, ...]

    @property
    def pauses(self) -> int:
        """The pause rounds the world needs: one per pause call (a repeated one costs nothing)."""
        return sum(isinstance(op, Pause) for op in self.ops)


@st.composite
def runs(draw: st.DrawFn) -> Run:
    """A budget and operations within the world's bounds (module docstring)."""
    # Budgets of 1 and 2 end by length (a pause may leave nothing, part, or all of it to continue); 24 lets the
    # engine's reply stop by itself.
    budget = draw(st.sampled_from([1, 2, 2, 24]))
    chat = st.builds(Chat, session=st.just(0), stream=st.booleans(), max_tokens=st.just(budget),
                     next_turn=st.booleans())
    pause = st.builds(Pause, k=st.integers(1, min(budget, 3)), background=st.just(False))
    resume = st.builds(Resume, new_weights=st.booleans(), update_seconds=st.sampled_from([0.0, 0.2]))
    sleep = st.builds(Sleep, seconds=st.sampled_from([0.0, 0.01, 0.03, 0.05, 0.125, 0.5]))
    opening = draw(st.lists(st.tuples(chat, st.builds(Sleep, seconds=st.sampled_from([0.0, 0.01, 0.03]))),
                            min_size=1, max_size=2))
    # Often a pause right after the opening chats, while they stream.
    early = [draw(pause)] if draw(st.booleans()) else []
    rest = draw(st.lists(st.one_of(chat, chat, pause, pause, resume, sleep, sleep,
                                   st.builds(Disconnect, client=st.integers(0, MAX_CHATS - 1)),
                                   st.builds(Finalize, session=st.just(0))), max_size=8))
    ops, chats, pauses = [], 0, 0
    for op in [op for pair in opening for op in pair] + early + rest:
        # Beyond the bounds, an operation is left out (rather than the example rejected).
        chats += isinstance(op, Chat)
        pauses += isinstance(op, Pause)
        if not (isinstance(op, Chat) and chats > MAX_CHATS or isinstance(op, Pause) and pauses > MAX_PAUSES):
            ops.append(op)
    return Run(budget, tuple(ops))


async def record_run(tokenizer_path: Path, run: Run, *, workers: bool, encode_off_loop: bool = False
                     ) -> list[MachineTrace]:
    """Run the real stack on ``run`` (partial rollout on), every machine observed; the traces of its machines."""
    recorder = Recorder()
    token = OBSERVER.set(recorder)
    try:
        await run_scenario(tokenizer_path, list(run.ops), partial_rollout=True, workers=workers,
                           check=lambda scenario: None, scenario=ConformanceScenario,
                           encode_off_loop=encode_off_loop)
    finally:
        OBSERVER.reset(token)
    return recorder.traces()


__all__ = ["ConformanceScenario", "MAX_CHATS", "MAX_PAUSES", "Run", "SESSION", "record_run", "runs"]
