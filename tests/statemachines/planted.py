"""Planted-bug variants of the GenerationMachine shared by the world tests (``test_generation_world.py``,
``test_full_world.py``): each world must find them, so they are written once."""

from __future__ import annotations

import attrs

from statemachines import generation as gm
from statemachines import generation_machine as gmm
from statemachines.core import Branch, Goto, on

S = gm.State


class LateTokenGeneration(gmm.GenerationMachine):
    """INTERRUPTED takes tokens as STREAMING does: a straggler of the aborted request is recorded."""

    table = gmm.TABLE.overriding(
        on(S.INTERRUPTED, gm.TokensReceived, gmm._token,
           Branch(S.INTERRUPTED, [gm.AcceptTokens]), Branch(S.INTERRUPTED, [gm.DropTokens]),
           Branch(S.FAILED, [gm.CancelGateWait, gm.DropFromSession, gm.RespondError])),
    )


def _continue_with_the_full_budget(state, gen, event):
    """The continuation asks for ``budget`` new tokens instead of ``budget - tokens``."""
    if gen.partial_rollout and gen.tokens and gen.remaining:
        started = attrs.evolve(gen, requests=gen.requests + 1, epoch=event.epoch, weight_version=event.weight_version,
                               request_tokens=0, request_version=None, rid=None)
        request = gm.StartUpstream(started.requests, event.epoch, event.weight_version, gen.tokens, gen.budget,
                                   gen.prompt_tokens + gen.tokens - 1)
        return Goto(S.CONTINUING, started, [request])
    return gmm._resumed(state, gen, event)


class FullBudgetGeneration(gmm.GenerationMachine):
    """A continuation after a pause re-requests the full budget instead of what is left of it."""

    table = gmm.TABLE.overriding(
        on(S.INTERRUPTED, gm.Resumed, _continue_with_the_full_budget,
           *gmm.TABLE.rows[(S.INTERRUPTED, gm.Resumed)].branches),
    )
