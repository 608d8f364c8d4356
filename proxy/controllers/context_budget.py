"""Context safety (spec 8): how many tokens a step may generate, decided once its prompt is tokenized.

Pure. The rules (``docs/request-path.md`` explains the why):

The window is always known (``proxy/controllers/context_window.py``: ``--context-window``, else the upstream's,
else the tokenizer's), so every upstream request carries an explicit number, never ``null``: a gateway drops
``null`` fields and SGLang's default is 128 tokens (issue 14).

| prompt vs window | request ``max_tokens`` | budget (the GenerationMachine's) | sent upstream as ``max_new_tokens`` |
|---|---|---|---|
| prompt >= window | any | refused: 400 ``context_overflow`` (prompt tokens, window) | nothing is sent |
| room left | absent | ``window - prompt`` | the remaining budget |
| room left, dynamic (default) | N | ``min(N, window - prompt)`` (clamped, not refused) | the remaining budget |
| room left, ``--no-dynamic-max-tokens`` | N | N (SGLang may refuse prompt + N > its context) | the remaining budget |

"Remaining budget" is the machine's ``StartUpstream.max_new_tokens``: the whole budget for the first request, what
is left after the kept tokens for a continuation.
"""

from __future__ import annotations

import attrs

from proxy.api.errors import ApiError

@attrs.frozen
class StepBudget:
    """The token budget of one step."""

    #: the GenerationMachine's budget (>= 1); every upstream request asks for what is left of it
    max_new_tokens: int
    #: the request asked for more than the window leaves and was clamped (for logs and tests)
    clamped: bool = False


def plan_step_budget(
    prompt_tokens: int, requested: int | None, *, context_window: int, dynamic: bool = True
) -> StepBudget:
    """The budget of a step (see the module's table); raises ``ApiError`` ``context_overflow`` (400)."""
    if prompt_tokens < 0 or (requested is not None and requested < 1) or context_window < 1:
        raise ValueError(f"bad budget inputs: prompt {prompt_tokens}, max_tokens {requested}, window {context_window}")
    remaining = context_window - prompt_tokens
    if remaining < 1:
        raise ApiError.context_overflow(prompt_tokens, context_window)
    if requested is None:
        return StepBudget(remaining)
    if dynamic and requested > remaining:
        return StepBudget(remaining, clamped=True)
    return StepBudget(requested)


__all__ = ["StepBudget", "plan_step_budget"]
