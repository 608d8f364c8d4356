"""The real controllers under hypothesis-chosen interleavings of chats, pauses, resumes, disconnects and finalizes.

Each example is one trio run (pytest-trio, stack-notes 8) on the mock clock (``autojump_clock``): the embedded
engine on ``127.0.0.1:0``, the proxy's gate, session registry and generation controller, clients doing what the chat
route does (``scenario.py``). Hypothesis draws the operations; ``st.random_module()`` varies trio's scheduling order
(trio registers its scheduler's randomness with hypothesis, stack-notes 9), so the same operations also run under
different task orders. Routing replay is on; the proxy is given the engine as its worker (a pause aborts the rid and
reads the request to its abort finish) or not (a pause closes the stream), as drawn.

Checked on every run (``checks.py``): no token received between a pause acknowledgement and the next resume; every
token's version is the engine's when it generated it; a continued response's ids are the concatenation of its pieces
and the engine's own record (and what the client received); routed-expert rows match the token count; budgets never
go negative; every committed step is exported exactly once; nothing is left in flight and no client got a 500.
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.interleavings.checks import check_scenario, coverage
from tests.interleavings.scenario import Scenario, operations, run_scenario

# 25 examples each in CI (a few seconds); DRESSAGE_INTERLEAVINGS_EXAMPLES=500 for a soak run.
EXAMPLES = int(os.environ.get("DRESSAGE_INTERLEAVINGS_EXAMPLES", "25"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def check(scenario: Scenario) -> None:
    check_scenario(scenario)
    for what in coverage(scenario):
        event(what)


@SETTINGS
@given(ops=operations, workers=st.booleans(), seed=st.random_module())
async def test_partial_rollout_under_random_interleavings(qwen3_path: Path, autojump_clock, ops, workers, seed):
    await run_scenario(qwen3_path, ops, partial_rollout=True, workers=workers, check=check)


@SETTINGS
@given(ops=operations, workers=st.booleans(), seed=st.random_module())
async def test_without_partial_rollout_under_random_interleavings(qwen3_path: Path, autojump_clock, ops, workers,
                                                                  seed):
    await run_scenario(qwen3_path, ops, partial_rollout=False, workers=workers, check=check)
