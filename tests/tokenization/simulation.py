"""Run a :class:`Script` through TITO the way the proxy will, with a model that emits the template's own rendering.

Also holds a small independent model of the two templates' history rewriting (:func:`predict_text_stable`,
:func:`predict_bpe_resplit`), written from reading the templates, which the property tests compare with what the
real templates do.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import attrs

from proxy.tokenization import TitoFragment, TitoTokenizer
from proxy.tokenization.messages import flatten_content

from .strategies import Script


#: families whose chat template is another's byte for byte: the predictions below are models of the template
SAME_TEMPLATE_AS = {"qwen3_6": "qwen3_5"}


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


@attrs.frozen
class Step:
    """One model call of the episode."""

    messages: tuple[dict[str, Any], ...]
    """The request's messages (the prompt)."""
    context: tuple[int, ...]
    """The ids sent upstream: full encode for the first step, checkpoint + fragment after that."""
    context_text: str
    """The text those ids stand for (rendered pieces joined, before NFC)."""
    fragment: TitoFragment | None
    completion: str
    generated: tuple[int, ...]

    @property
    def checkpoint(self) -> tuple[int, ...]:
        return self.context + self.generated


@attrs.frozen
class Simulation:
    script: Script
    steps: tuple[Step, ...]

    @property
    def generated_starts(self) -> tuple[int, ...]:
        """Index of the first generated token of every step, in the final checkpoint."""
        return tuple(len(step.context) for step in self.steps)


def simulate(tito: TitoTokenizer, script: Script) -> Simulation:
    """Drive TITO over the script; every incremental encode must succeed."""
    kwargs, tools = script.kwargs, script.tools
    messages = list(script.opening)
    context = tuple(tito.encode_full(messages, tools, kwargs))
    context_text = tito.render_full(messages, tools, kwargs)
    fragment = None
    steps = []
    for assistant, follow_up in script.steps:
        completion = tito.render_assistant_after(messages, assistant, kwargs)
        generated = tuple(tito.encode_text(completion))
        steps.append(Step(tuple(messages), context, context_text, fragment, completion, generated))
        messages.append(assistant)
        if not follow_up:
            break
        result = tito.encode_incremental(
            context + generated, follow_up, prior_messages=messages, tools=tools, chat_template_kwargs=kwargs
        )
        assert isinstance(result, TitoFragment), result
        fragment = result
        messages.extend(follow_up)
        context = context + generated + result.ids
        context_text = context_text + completion + result.text
    return Simulation(script, tuple(steps))


def last_query_index(family: str, messages: list[dict[str, Any]]) -> int:
    """Index of the last user message that is a real query (not a wrapped tool response), as the templates see
    it; -1 when there is none."""
    family = SAME_TEMPLATE_AS.get(family, family)
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message["role"] != "user":
            continue
        content = flatten_content(message.get("content"))
        if family == "qwen3_5":
            content = content.strip()
        if not (content.startswith("<tool_response>") and content.endswith("</tool_response>")):
            return index
    return -1


def predict_text_stable(family: str, thinking: bool | None, messages: list[dict[str, Any]]) -> bool:
    """Whether the full render of ``messages`` (history of a request) reproduces every earlier assistant turn as
    the model generated it, so the TITO text equals the full render.

    Qwen3.5 keeps the think block of assistant turns after the last query and drops it before. Qwen3 keeps it only
    after the last query *and* when the reasoning is non-empty; in thinking-off mode the prompt's empty think
    block is never reproduced for a non-final turn.
    """
    family = SAME_TEMPLATE_AS.get(family, family)
    lqi = last_query_index(family, messages)
    assistants = [(i, m) for i, m in enumerate(messages) if m["role"] == "assistant"]
    if family == "qwen3_5":
        return all(i > lqi for i, _ in assistants)
    if thinking is False:
        return not assistants
    return all(i > lqi and bool(m.get("reasoning_content")) for i, m in assistants)


def predict_bpe_resplit(family: str, thinking: bool | None, messages: list[dict[str, Any]]) -> bool:
    """Whether a text-stable history still tokenizes differently: Qwen3.5 in thinking mode, an assistant turn
    with empty reasoning (prompt ends ``<think>\\n``, the model emits ``\\n</think>``, a whole-text encode merges
    the two newlines)."""
    family = SAME_TEMPLATE_AS.get(family, family)
    if family != "qwen3_5" or thinking is False:
        return False
    return any(m["role"] == "assistant" and not (m.get("reasoning_content") or "").strip() for m in messages)


def predict_final_turn_aligned(family: str, thinking: bool | None, assistant: dict[str, Any], completion: str):
    """Whether the final assistant turn's masked tokens in a last-step re-render equal the ids the model generated
    (``completion`` tokenized alone); None when it depends on the BPE merges.

    Every generation prompt ends with a newline. When the completion starts with whitespace, a whole-text encode
    may put it in one pre-token with that newline: Qwen3.5 in thinking mode with empty reasoning never aligns
    (``<think>\\n`` + ``\\n</think>`` becomes one ``\\n\\n`` token); other cases (Qwen3 with thinking off and
    content starting with a line break) depend on the merges. A completion starting with anything else aligns."""
    if predict_bpe_resplit(family, thinking, [assistant]):
        return False
    if re.match(r"\s", completion):
        return None
    return True
