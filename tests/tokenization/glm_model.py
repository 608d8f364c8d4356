"""An independent model of how the GLM templates re-render history (written from reading the four templates), which
the GLM property battery compares with what the real templates do.

A GLM model is prompted with ``<|assistant|><think>`` (thinking on or unset) and generates
``reasoning</think>content<tool_call>...`` then the role token it stops on; with thinking off the prompt already
closes the think block (``</think>``, GLM-5.2 ``<think></think>``) and the model generates content only. A full
re-render of the history reproduces an assistant turn at index ``i`` exactly when:

- thinking off: always (no reasoning is kept or invented).
- thinking on, the turn is after the last user message, or ``clear_thinking=False``: GLM-4.7/5 render
  ``<think>reasoning.strip()</think>`` only for truthy reasoning, else a bare ``</think>`` (the prompt's ``<think>``
  disappears); GLM-5.1 and 5.2 always render a think block -- stable.
- thinking on, the turn is before the last user message: GLM-4.7/5/5.1 render a bare ``</think>`` (reasoning
  dropped); GLM-5.2 renders ``<think></think>``, which equals what was generated only for empty reasoning.

GLM-5.1 with ``clear_thinking=False`` before the last user: a turn without reasoning keeps an empty think block only
when some assistant turn answering the same user message has reasoning (the template's ``thinking_indices``).
"""

from __future__ import annotations

from typing import Any


def last_user_index(messages: list[dict[str, Any]]) -> int:
    return max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)


def _user_before(messages: list[dict[str, Any]], index: int) -> int:
    return max((i for i in range(index) if messages[i]["role"] == "user"), default=-1)


def _answers_with_reasoning(messages: list[dict[str, Any]], user: int) -> bool:
    """Some assistant turn after user message ``user`` (before the next user message) has string reasoning."""
    for message in messages[user + 1 :]:
        if message["role"] == "user":
            return False
        if message["role"] == "assistant" and isinstance(message.get("reasoning_content"), str):
            return True
    return False


def turn_stable(family: str, kwargs: dict[str, Any], messages: list[dict[str, Any]], index: int) -> bool:
    """Whether the re-render reproduces assistant turn ``index`` as the model generated it."""
    if kwargs.get("enable_thinking") is False:
        return True
    reasoning = messages[index].get("reasoning_content")
    keep = index > last_user_index(messages) or kwargs.get("clear_thinking") is False
    if keep:
        if family in ("glm4_7", "glm5"):
            return bool(reasoning)
        if family == "glm5_1" and index < last_user_index(messages) and not isinstance(reasoning, str):
            return _answers_with_reasoning(messages, _user_before(messages, index))
        return True
    if family == "glm5_2":
        return not reasoning
    return False


def predict_text_stable(family: str, kwargs: dict[str, Any], messages: list[dict[str, Any]]) -> bool:
    """Whether the full render of ``messages`` reproduces every earlier assistant turn as generated."""
    return all(turn_stable(family, kwargs, messages, i) for i, m in enumerate(messages) if m["role"] == "assistant")
