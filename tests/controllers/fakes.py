"""A small fake TITO tokenizer with the real one's interface, and a fake model that "generates" an answer.

Token ids: specials below 100, text characters as ``100 + ord(c)``. A message renders as
``<start> <role> text... <eot>``, turns are joined by ``<nl>``, and the generation prompt is ``<start> <assistant>``.
The model generates ``text... <eot>`` for an answer (its reasoning, then ``<think_end>``, when it has some), so a TITO
concatenation equals the full encode of the same conversation whenever no reasoning is involved.

Failures on demand: a new message whose content contains ``TITO-FAIL`` makes the incremental encode fail (a
template error); ``FULL-FAIL`` anywhere makes the full encode raise ``TitoError``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.tokenization import TitoError, TitoFailure, TitoFailureReason, TitoFragment

EOT, NL, START, THINK_END, TOOLS = 1, 2, 3, 4, 5
ROLES = {"system": 10, "user": 11, "assistant": 12, "tool": 13}


def text_ids(text: str) -> list[int]:
    return [100 + ord(c) for c in text]


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return content or ""


def _calls(message: Mapping[str, Any]) -> str:
    calls = message.get("tool_calls") or []
    out = []
    for call in calls:
        function = call.get("function", call)
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            arguments = json.loads(arguments) if arguments.strip() else {}
        out.append(f"<call {function.get('name')} {json.dumps(arguments, sort_keys=True)}>")
    return "".join(out)


def render(message: Mapping[str, Any]) -> list[int]:
    """One turn in a full encode (reasoning dropped, as the Qwen templates do for history)."""
    return [START, ROLES[message["role"]]] + text_ids(_content(message) + _calls(message)) + [EOT]


def model_output(message: Mapping[str, Any]) -> list[int]:
    """What the model generates for this answer, ending with the end-of-turn token."""
    reasoning = message.get("reasoning_content")
    head = text_ids(reasoning) + [THINK_END] if reasoning else []
    return head + text_ids(_content(message) + _calls(message)) + [EOT]


class FakeTokenizer:
    """The parts of ``TitoTokenizer`` the session layer uses."""

    end_of_turn_id = EOT
    family = "fake"

    def __init__(self) -> None:
        self.full_encodes = 0
        self.incremental_encodes = 0

    def encode_full(self, messages: Sequence[Any], tools: Sequence[Any] | None = None,
                    chat_template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
        self.full_encodes += 1
        if any("FULL-FAIL" in _content(m) for m in messages):
            raise TitoError.of(TitoFailureReason.TEMPLATE_ERROR, "FULL-FAIL in a message")
        ids: list[int] = []
        if tools:
            ids += [TOOLS] + text_ids(json.dumps(list(tools), sort_keys=True)) + [NL]
        if chat_template_kwargs:
            ids += text_ids(json.dumps(dict(chat_template_kwargs), sort_keys=True)) + [NL]
        for message in messages:
            ids += render(message) + [NL]
        return ids + [START, ROLES["assistant"]]

    def encode_incremental(self, checkpoint_ids: Sequence[int], new_messages: Sequence[Any], *,
                           prior_messages: Sequence[Any] | None = None, tools: Sequence[Any] | None = None,
                           chat_template_kwargs: Mapping[str, Any] | None = None):
        self.incremental_encodes += 1
        if not checkpoint_ids or checkpoint_ids[-1] != EOT:
            return TitoFailure(TitoFailureReason.NOT_AT_TURN_BOUNDARY, "checkpoint does not end with <eot>")
        if not new_messages:
            return TitoFailure(TitoFailureReason.EMPTY_FRAGMENT, "no new messages")
        if any("TITO-FAIL" in _content(m) for m in new_messages):
            return TitoFailure(TitoFailureReason.TEMPLATE_ERROR, "TITO-FAIL in a new message")
        ids = [NL]
        for message in new_messages:
            ids += render(message) + [NL]
        return TitoFragment(ids=tuple(ids + [START, ROLES["assistant"]]), text="")
