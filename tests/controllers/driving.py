"""Drive the session registry the way the chat-completions path will: prepare, "generate", commit.

The model is simulated: for an answer message it emits the template's own rendering of that turn (real tokenizers:
``render_assistant`` tokenized on its own, ending with ``<|im_end|>``; the fake tokenizer: ``model_output``), cut to
``truncate`` tokens for a length-exhausted generation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from proxy.controllers.session_registry import PreparedStep, SessionRegistry
from proxy.trajectory.session_results import CommitResult

from .fakes import model_output


def answer_ids(tokenizer: Any, answer: Mapping[str, Any], kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """What the model generates for ``answer``."""
    if hasattr(tokenizer, "render_assistant"):
        return tokenizer.encode_text(tokenizer.render_assistant(answer, kwargs))
    return model_output(answer)


def logprobs_for(ids: list[int], salt: int = 0) -> list[float]:
    """Distinct, recognizable logprobs."""
    return [-(salt + 1) - i / 1000 for i in range(len(ids))]


@attrs.frozen
class Turn:
    """One generation: what was prepared, sent upstream, generated and committed."""

    prepared: PreparedStep
    context: tuple[int, ...]
    generated: tuple[int, ...]
    result: CommitResult

    @property
    def checkpoint(self) -> tuple[int, ...]:
        """The token state after the turn: context plus generated ids."""
        return self.context + self.generated


async def turn(
    registry: SessionRegistry,
    session_id: str,
    messages: list[dict[str, Any]],
    answer: dict[str, Any],
    *,
    tools: list[dict[str, Any]] | None = None,
    kwargs: dict[str, Any] | None = None,
    truncate: int | None = None,
    version: str = "v0",
    salt: int = 0,
    **prepare: Any,
) -> Turn:
    """Prepare, generate ``answer`` (possibly truncated), commit."""
    prepared = await registry.prepare(session_id, messages, tools=tools, chat_template_kwargs=kwargs, **prepare)
    context = tuple(prepared.input_ids())
    ids = answer_ids(registry.tokenizer, answer, kwargs)
    finish = "stop"
    if truncate is not None:
        ids, finish = ids[:truncate], "length"
    result = await registry.commit(prepared.handle, ids, logprobs_for(ids, salt), [version] * len(ids), None, finish,
                                   answer)
    return Turn(prepared, context, tuple(ids), result)


async def finalize_and_read(registry: SessionRegistry, session_id: str = "s") -> list[dict[str, Any]]:
    """Finalize a session (reward ``{"score": 1.0}``, instance ``"inst"``) and read its exported segments."""
    await registry.finalize(session_id, {"score": 1.0}, "inst")
    return await registry.read(session_id=session_id)


async def drain(registry: SessionRegistry, **ids: Any) -> list[dict[str, Any]]:
    """A whole drain as a trainer does it: read with drain (leased), then acknowledge (deleted); the segments."""
    read = await registry.read(**ids, drain=True)
    if read.lease_id is not None:
        await registry.acknowledge(read.lease_id)
    return list(read)


def segment_by_tip(segments: list[dict[str, Any]], tip: int) -> dict[str, Any]:
    """The exported segment whose last step is ``tip``."""
    (found,) = [segment for segment in segments if segment["tip_step"] == tip]
    return found


def trained_spans(segment: dict[str, Any]) -> dict[int, list[int]]:
    """step id -> the generated ids it contributes as a trained span (mask 1) in this segment."""
    spans = {}
    for record in segment["steps"]:
        if record["trained"]:
            generated = record["concat_token_ids"][record["concat_context_token_count"]:]
            mask = record["concat_response_mask"][record["concat_context_token_count"]:]
            assert all(mask), record
            spans[record["step_id"]] = generated
    return spans
