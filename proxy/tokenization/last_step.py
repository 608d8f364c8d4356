"""Last-step build mode: one full re-render of a branch's final message list, with a loss mask over assistant turns.

The final message list (ending with the last assistant message) is rendered with the model's template, without a
generation prompt, and ended where the model's last turn ended (the family's ``close_last_step_text``; ChatML: cut
after the last ``<|im_end|>``, the junction newline after it was never generated; GLM: the role token the model
stops on is appended). Where each assistant turn's generated region lies is the family's ``last_step_spans``; what
follows describes the ChatML families, ``proxy/tokenization/glm.py`` describes GLM's.

Loss mask: 1 on the tokens each assistant turn *generates* -- reasoning, content, tool calls and the closing
``<|im_end|>`` -- and 0 everywhere else. The role header ``<|im_start|>assistant\\n`` is never masked, nor is the
family's thinking prefix when the rendered turn starts with it, because that prefix is part of the generation
prompt the model was given (Qwen3.5 thinking on: ``<think>\\n``; both families with ``enable_thinking=False``: the
empty ``<think>\\n\\n</think>\\n\\n``). Spans are located on token ids (``<|im_start|>`` followed by
``assistant\\n``) and byte offsets, never by searching decoded text; a token is masked when its bytes lie entirely
inside a turn's generated region, so a token straddling the prompt/generation boundary (Qwen3.5's ``\\n\\n`` of an
empty think block) stays 0. A render whose turn count does not match the messages (a message containing
special-token text such as ``<|im_start|>``) is refused with :class:`LastStepError`.

Consequence of the templates: the re-render drops the reasoning of assistant turns before the last user query
(Qwen3 also the empty think block of non-final turns), so those turns are trained on a text the model never
produced with that context. Concat mode does not have this problem; last-step is for short trajectories.

Logprobs are all-or-none: they are attached only when every assistant turn has a recorded generation whose ids
equal that turn's masked tokens exactly; otherwise ``logprobs`` is None and ``logprobs_absent_reason`` says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from proxy.tokenization.messages import MessageError, normalize_messages
from proxy.tokenization.results import LastStepError, TitoError, TitoFailureReason
from proxy.tokenization.tito import TitoTokenizer

__all__ = ["LastStepError", "LastStepSample", "TurnGeneration", "build_last_step"]


@attrs.frozen
class TurnGeneration:
    """What the model generated for one assistant turn: ids (ending with end-of-turn) and one logprob per id."""

    ids: tuple[int, ...] = attrs.field(converter=tuple)
    logprobs: tuple[float, ...] = attrs.field(converter=tuple)

    @logprobs.validator
    def _same_length(self, _attribute: Any, value: tuple[float, ...]) -> None:
        if len(value) != len(self.ids):
            raise ValueError(f"{len(value)} logprobs for {len(self.ids)} generated ids")


@attrs.frozen
class LastStepSample:
    """A last-step training sample."""

    ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    """1 on generated assistant tokens, 0 elsewhere; same length as ``ids``."""
    logprobs: tuple[float, ...] | None
    """0.0 at unmasked positions and the recorded logprobs at masked ones; None unless every turn aligned."""
    assistant_spans: tuple[tuple[int, int], ...]
    """Token range ``[start, end)`` of the masked region of each assistant message, in message order."""
    logprobs_absent_reason: str | None = None
    """Why ``logprobs`` is None (None when they are attached)."""


def build_last_step(
    tokenizer: TitoTokenizer,
    messages: Sequence[Any],
    tools: Sequence[Mapping[str, Any]] | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    generated_ids: Sequence[int] | None = None,
    generated_logprobs: Sequence[float] | None = None,
    *,
    turn_generations: Sequence[TurnGeneration | None] | None = None,
) -> LastStepSample:
    """Re-render ``messages`` (ending with an assistant message) into a masked sample.

    ``generated_ids``/``generated_logprobs`` describe the final assistant turn; ``turn_generations`` (one entry per
    assistant message, None where unknown) describes all of them and takes precedence. Raises
    :class:`~proxy.tokenization.results.TitoError` for bad messages or a template error and
    :class:`LastStepError` when the render cannot be masked. CPU-bound: run it off the event loop.
    """
    try:
        normalized = normalize_messages(messages)
    except MessageError as exc:
        raise TitoError.of(TitoFailureReason.INVALID_MESSAGE, str(exc)) from None
    if not normalized or normalized[-1]["role"] != "assistant":
        raise LastStepError("the final message list must end with an assistant message")
    text = tokenizer.render_full(messages, tools, chat_template_kwargs, add_generation_prompt=False)
    text = tokenizer.close_last_step_text(text, normalized[-1])
    ids = tokenizer.encode_text(text)
    spans = tokenizer.last_step_spans(ids, normalized, bool(tools), chat_template_kwargs)
    mask = [0] * len(ids)
    for first, end in spans:
        mask[first:end] = [1] * (end - first)
    n_assistant = sum(1 for m in normalized if m["role"] == "assistant")
    if len(spans) != n_assistant:
        raise LastStepError(f"found {len(spans)} assistant turns in the render for {n_assistant} assistant messages")

    logprobs, reason = _attach_logprobs(ids, spans, n_assistant, generated_ids, generated_logprobs, turn_generations)
    return LastStepSample(tuple(ids), tuple(mask), logprobs, tuple(spans), reason)


def _attach_logprobs(
    ids: list[int],
    spans: list[tuple[int, int]],
    n_assistant: int,
    generated_ids: Sequence[int] | None,
    generated_logprobs: Sequence[float] | None,
    turn_generations: Sequence[TurnGeneration | None] | None,
) -> tuple[tuple[float, ...] | None, str | None]:
    """All-or-none logprobs: every assistant turn must have a generation equal to its masked tokens."""
    if turn_generations is None:
        if generated_ids is None or generated_logprobs is None:
            return None, "no generated ids and logprobs given"
        turn_generations = [None] * (n_assistant - 1) + [TurnGeneration(generated_ids, generated_logprobs)]
    if len(turn_generations) != n_assistant:
        raise ValueError(f"{len(turn_generations)} turn generations for {n_assistant} assistant messages")
    logprobs = [0.0] * len(ids)
    for turn, ((start, end), generation) in enumerate(zip(spans, turn_generations)):
        if generation is None:
            return None, f"assistant turn {turn} has no recorded generation"
        if tuple(ids[start:end]) != generation.ids:
            return None, f"assistant turn {turn}: the generated ids differ from the re-render"
        logprobs[start:end] = generation.logprobs
    return tuple(logprobs), None
