"""The ChatML junction rules (Qwen3, Qwen3.5): turns close with ``<|im_end|>``, the next opens after a newline.

A checkpoint ends with the ``<|im_end|>`` the model generated. The fragment is the junction newline, the new turns
(consecutive tool results grouped into one user turn of ``<tool_response>`` blocks) and the generation prompt
``<|im_start|>assistant\\n`` + the family's thinking prefix. It is checked against these pinned rules (starts with
``\\n<|im_start|>``, ends with the pinned generation prompt, tokenizes with the newline and ``<|im_start|>`` as its
first two tokens and the generation prompt's tokens as its last).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from proxy.tokenization.results import LastStepError, TitoError, TitoFailure, TitoFailureReason
from proxy.tokenization.tito import TemplateMismatchError, TemplateTitoTokenizer


class ChatMLTitoTokenizer(TemplateTitoTokenizer):
    """The ChatML turn shape shared by the Qwen families; subclasses pin the thinking prefix."""

    TURN_START: ClassVar[str] = "<|im_start|>"
    END_OF_TURN: ClassVar[str] = "<|im_end|>"
    JUNCTION: ClassVar[str] = "\n"
    ASSISTANT_HEADER: ClassVar[str] = "<|im_start|>assistant\n"
    EMPTY_THINK: ClassVar[str] = "<think>\n\n</think>\n\n"

    def _init_junction_tokens(self) -> None:
        self.end_of_turn_id = self._special_id(self.END_OF_TURN)
        self.end_of_turn_ids = frozenset({self.end_of_turn_id})
        self.turn_start_id = self._special_id(self.TURN_START)
        newline = self.encode_text(self.JUNCTION)
        if len(newline) != 1:
            raise TemplateMismatchError(f"{self.source}: the junction newline is not a single token ({newline})")
        self.newline_id = newline[0]

    def generation_prompt(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        return self.ASSISTANT_HEADER + self.thinking_prefix(chat_template_kwargs)

    def _check_template(self) -> None:
        for kwargs, expected in self._checked_generation_prompts():
            result = self._fragment_text([{"role": "user", "content": "u"}], True, None, kwargs, self.end_of_turn_id)
            want = f"\n<|im_start|>user\nu<|im_end|>\n{expected}"
            if not isinstance(result, str) or result != want:
                raise TemplateMismatchError(
                    f"{self.source}: a user turn after an assistant turn renders as {result!r}, expected {want!r}"
                )

    def render_assistant(self, message: Any, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        """The template's own rendering of that assistant turn after the generation prompt, ending with
        ``<|im_end|>`` (the junction newline excluded)."""
        prompt, turn = self._render_one_turn(message, chat_template_kwargs)
        tail = self.END_OF_TURN + self.JUNCTION
        if not turn.startswith(prompt) or not turn.endswith(tail):
            raise TitoError.of(
                TitoFailureReason.JUNCTION_MISMATCH,
                f"the template renders this assistant turn as {turn[turn.rfind(self.ASSISTANT_HEADER):]!r}, which "
                f"does not extend the generation prompt {self.generation_prompt(chat_template_kwargs)!r}",
            )
        return turn[len(prompt) : -len(self.JUNCTION)]

    def _cut_fragment(
        self, text: str, anchor: str, checkpoint_end: int, chat_template_kwargs: Mapping[str, Any] | None
    ) -> str | TitoFailure:
        cut = anchor + self.END_OF_TURN
        if text.count(cut) != 1:
            return TitoFailure(
                TitoFailureReason.JUNCTION_MISMATCH,
                f"the end of the checkpoint's turn ({cut!r}) occurs {text.count(cut)} times in the synthetic render",
            )
        fragment = text[text.index(cut) + len(cut) :]
        start = self.JUNCTION + self.TURN_START
        prompt = self.generation_prompt(chat_template_kwargs)
        if not fragment.startswith(start):
            return TitoFailure(
                TitoFailureReason.JUNCTION_MISMATCH, f"fragment does not start with {start!r}: {fragment[:40]!r}"
            )
        if not fragment.endswith(prompt) or len(fragment) <= len(self.JUNCTION) + len(prompt):
            return TitoFailure(
                TitoFailureReason.JUNCTION_MISMATCH,
                f"fragment does not end with new turns and the generation prompt {prompt!r}: {fragment[-60:]!r}",
            )
        return fragment

    def _check_fragment_ids(self, ids: list[int], chat_template_kwargs: Mapping[str, Any] | None) -> str | None:
        prompt_ids = self.generation_prompt_ids(chat_template_kwargs)
        if ids[:2] != [self.newline_id, self.turn_start_id] or tuple(ids[-len(prompt_ids) :]) != prompt_ids:
            return f"fragment tokens do not split at the junction or the generation prompt: {ids[:3]}...{ids[-6:]}"
        return None

    # -- last-step and drift ----------------------------------------------------------------------------------------

    def close_last_step_text(self, text: str, final: Mapping[str, Any]) -> str:
        """Cut after the last ``<|im_end|>`` (the junction newline after it was never generated)."""
        eot, newline = self.END_OF_TURN, self.JUNCTION
        if text.endswith(eot + newline):
            text = text[: -len(newline)]
        if not text.endswith(eot):
            raise LastStepError(f"the render does not end with {eot!r}: {text[-40:]!r}")
        return text

    def last_step_spans(
        self, ids: list[int], messages: list[dict[str, Any]], has_tools: bool, kwargs: Mapping[str, Any] | None
    ) -> list[tuple[int, int]]:
        """Spans located on token ids (``<|im_start|>`` followed by ``assistant\\n``) and byte offsets; the
        thinking prefix the render starts a turn with belongs to the prompt."""
        offsets = self.token_offsets(ids)
        data = b"".join(self.token_bytes(t) for t in ids)
        expected_turns = _count_turns(messages, has_tools)
        found_turns = ids.count(self.turn_start_id)
        if found_turns != expected_turns:
            raise LastStepError(
                f"the render has {found_turns} turns for {expected_turns} expected: a message contains special-token "
                "text"
            )
        header = b"assistant" + self.JUNCTION.encode()
        prefix = self.thinking_prefix(kwargs).encode()
        spans: list[tuple[int, int]] = []
        for p, token_id in enumerate(ids):
            if token_id != self.turn_start_id or not data.startswith(header, offsets[p][1]):
                continue
            generated_from = offsets[p][1] + len(header)
            if prefix and data.startswith(prefix, generated_from):
                generated_from += len(prefix)
            try:
                end = ids.index(self.end_of_turn_id, p + 1)
            except ValueError:
                raise LastStepError("an assistant turn is not closed by the end-of-turn token") from None
            first = next(j for j in range(p + 1, end + 1) if offsets[j][0] >= generated_from)
            spans.append((first, end + 1))
        return spans

    def boundary_markers(self) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
        start, end, newline = (s.encode() for s in (self.TURN_START, self.END_OF_TURN, self.JUNCTION))
        return (end, end + newline), (start, end, newline + start)


def _count_turns(messages: list[dict[str, Any]], has_tools: bool) -> int:
    """How many ``<|im_start|>`` turns the ChatML templates render for these messages."""
    turns = 1 if has_tools or (messages and messages[0]["role"] == "system") else 0
    for index, message in enumerate(messages):
        role = message["role"]
        if role in ("user", "assistant") or (role == "system" and index > 0):
            turns += 1
        elif role == "tool" and (index == 0 or messages[index - 1]["role"] != "tool"):
            turns += 1
    return turns
