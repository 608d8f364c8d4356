"""Context safety (spec 8): how many tokens a step may generate, decided once its prompt is tokenized.

Pure. The rules (``docs/request-path.md`` explains the why):

| ``--context-window`` | request ``max_tokens`` | budget (the GenerationMachine's) | sent upstream as ``max_new_tokens`` |
|---|---|---|---|
| set, prompt >= window | any | refused: 400 ``context_overflow`` (prompt tokens, window) | nothing is sent |
| set | absent | ``window - prompt`` | the remaining budget |
| set, dynamic (default) | N | ``min(N, window - prompt)`` | the remaining budget |
| set, ``--no-dynamic-max-tokens`` | N | N (SGLang may refuse prompt + N > its context) | the remaining budget |
| not set | N | N | the remaining budget |
| not set | absent | unbounded (:data:`UNBOUNDED`) | ``null``: until the context ends, every request |

"Remaining budget" is the machine's ``StartUpstream.max_new_tokens``: the whole budget for the first request, what
is left after the kept tokens for a continuation. An unbounded budget is sent as ``null`` in every request: SGLang
then generates until its context ends, which is the same end for a continuation (its input is the prompt plus the
kept tokens), so ``null`` composes exactly.
"""

from __future__ import annotations

import attrs

from proxy.api.errors import ApiError

#: the budget of a step with neither max_tokens nor a context window (the machine needs a number); never sent
UNBOUNDED = 2**31 - 1


@attrs.frozen
class StepBudget:
    """The token budget of one step."""

    #: the GenerationMachine's budget (>= 1)
    max_new_tokens: int
    #: False: no limit is known; every upstream request gets ``max_new_tokens: null``
    bounded: bool = True
    #: the request asked for more than the window leaves and was clamped (for logs and tests)
    clamped: bool = False

    def wire_value(self, remaining: int) -> int | None:
        """``max_new_tokens`` for an upstream request that may generate ``remaining`` tokens."""
        return remaining if self.bounded else None


def plan_step_budget(
    prompt_tokens: int, requested: int | None, *, context_window: int | None, dynamic: bool = True
) -> StepBudget:
    """The budget of a step (see the module's table); raises ``ApiError`` ``context_overflow`` (400)."""
    if prompt_tokens < 0 or (requested is not None and requested < 1):
        raise ValueError(f"bad budget inputs: prompt {prompt_tokens}, max_tokens {requested}")
    if context_window is None:
        if requested is None:
            return StepBudget(UNBOUNDED, bounded=False)
        return StepBudget(requested)
    remaining = context_window - prompt_tokens
    if remaining < 1:
        raise ApiError.context_overflow(prompt_tokens, context_window)
    if requested is None:
        return StepBudget(remaining)
    if dynamic and requested > remaining:
        return StepBudget(remaining, clamped=True)
    return StepBudget(requested)


__all__ = ["UNBOUNDED", "StepBudget", "plan_step_budget"]
