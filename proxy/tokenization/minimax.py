"""The MiniMax junction rules (MiniMax-M2 and MiniMax-M3): ChatML's shape with MiniMax's own role markup.

Both templates render ``]~!b[`` (begin of document) then turns ``]~b]<role>\\n ... [e~[\\n``: ``]~b]`` opens a turn,
``[e~[`` (the tokenizer's eos) closes it, and a newline follows it. So a checkpoint ends with the ``[e~[`` the model
generated, and the fragment is the junction newline, the new turns and the generation prompt, exactly as for ChatML
(``proxy/tokenization/chatml.py``, whose cutting and checks this module reuses with MiniMax's tokens). Roles are
``system``, ``user``, ``ai`` and ``tool`` (consecutive tool results share one ``]~b]tool`` turn of ``<response>``
blocks); M3 adds a ``developer`` turn after the system turn.

======  ==================================  ===================================================================
family  generation prompt                   assistant turn as rendered in history
======  ==================================  ===================================================================
M2      ``]~b]ai\\n<think>\\n`` (no switch)   ``<think>\\nR\\n</think>\\n\\n`` only when R is truthy and the turn is after the last
                                            user message, then content, ``\\n<minimax:tool_call>\\n<invoke ...``
M3      ``]~b]ai\\n`` + by ``thinking_mode``: ``<mm:think>R</mm:think>`` when R is truthy, else ``</mm:think>``, for
        enabled ``<mm:think>``, disabled      EVERY turn (all-turn visible), then content, ``]<]minimax[>[<tool_call>``
        ``</mm:think>``, adaptive/unset ``""``
======  ==================================  ===================================================================

What a model generates for a turn (:meth:`render_assistant`) is the template's rendering of it after the generation
prompt. Where that rendering does not extend the prompt -- M2 with no reasoning (the template drops the think block
the prompt opened), M3 ``enabled`` with no reasoning -- the model is taken to close the open think block empty:
M2 generates ``\\n</think>\\n\\n`` (the template's ``<think>\\nR\\n</think>\\n\\n`` with R empty), M3 generates
``</mm:think>``. Those turns never re-render as generated (the drift audit reports ``reasoning_stripped``).

``<think>``, ``</think>``, ``<minimax:tool_call>``, ``<mm:think>`` and ``]<]minimax[>[`` are added tokens, and
``]~b]``, ``[e~[``, ``]~!b[`` special ones, so every cut falls after a token the BPE never merges across. One place
where it can: M2's prompt ends with a newline, and a reasoning that starts with whitespace may merge with it in a
whole-text encode (a ``bpe_resplit`` in the drift audit; the recorded ids are what the model saw and generated).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from proxy.tokenization.chatml import ChatMLTitoTokenizer
from proxy.tokenization.results import IncrementalResult, LastStepError, TitoError, TitoFailure, TitoFailureReason
from proxy.tokenization.tito import ANCHOR_QUERY, TemplateMismatchError, anchor_absent_from


class MiniMaxTitoTokenizer(ChatMLTitoTokenizer):
    """The MiniMax turn shape; subclasses pin the thinking prefix and the template's SHA-256."""

    TURN_START: ClassVar[str] = "]~b]"
    END_OF_TURN: ClassVar[str] = "[e~["
    JUNCTION: ClassVar[str] = "\n"
    ASSISTANT_HEADER: ClassVar[str] = "]~b]ai\n"
    #: what the model generates after the prompt for a turn with no reasoning when the prompt opened a think block
    EMPTY_REASONING_CLOSE: ClassVar[str] = ""
    TEMPLATE_SHA256: ClassVar[str] = ""

    def _check_template(self) -> None:
        for kwargs, expected in self._checked_generation_prompts():
            self._check_user_junction(kwargs, expected)
        for kwargs in self.extra_prompt_kwargs():
            self._check_user_junction(kwargs, self.generation_prompt(kwargs))

    def extra_prompt_kwargs(self) -> tuple[dict[str, Any], ...]:
        """Template switches beyond ``enable_thinking`` whose generation prompts are pinned too."""
        return ()

    def _check_user_junction(self, kwargs: Mapping[str, Any], expected: str) -> None:
        try:
            rendered = self._render([{"role": "user", "content": "q"}], None, kwargs, add_generation_prompt=True)
        except TitoError as exc:
            raise TemplateMismatchError(f"{self.source}: template failed on a one-message chat: {exc}") from None
        if not rendered.endswith("]~b]user\nq[e~[\n" + expected):
            raise TemplateMismatchError(
                f"{self.source}: the generation prompt for {dict(kwargs)} is not the {self.family} family's "
                f"{expected!r}: {rendered[-60:]!r}"
            )
        result = self._fragment_text([{"role": "user", "content": "u"}], True, None, kwargs, self.end_of_turn_id)
        want = f"\n]~b]user\nu[e~[\n{expected}"
        if result != want:
            raise TemplateMismatchError(
                f"{self.source}: a user turn after an assistant turn renders as {result!r}, expected {want!r}"
            )

    def encode_incremental(
        self,
        checkpoint_ids: Sequence[int],
        new_messages: Sequence[Any],
        *,
        prior_messages: Sequence[Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> IncrementalResult:
        """As the base; tool results after an assistant turn without tool calls are the template's own error (its
        ``raise_exception``), which the synthetic context (its anchor carries a tool call) would not raise."""
        last = prior_messages[-1] if prior_messages else None
        first = new_messages[0] if new_messages else None
        if (
            checkpoint_ids and checkpoint_ids[-1] in self.end_of_turn_ids  # else the base's boundary failure
            and isinstance(last, Mapping) and isinstance(first, Mapping) and first.get("role") == "tool"
            and not last.get("tool_calls")
        ):
            return TitoFailure(
                TitoFailureReason.TEMPLATE_ERROR,
                "TemplateError: Message has tool role, but there was no previous assistant message with a tool call!",
            )
        return super().encode_incremental(
            checkpoint_ids, new_messages, prior_messages=prior_messages, tools=tools,
            chat_template_kwargs=chat_template_kwargs,
        )

    def _fragment_text(
        self,
        new_messages: list[dict[str, Any]],
        history_has_query: bool,
        tools: Sequence[Mapping[str, Any]] | None,
        chat_template_kwargs: Mapping[str, Any] | None,
        checkpoint_end: int,
    ) -> str | TitoFailure:
        """The base's synthetic context, but the anchor turn carries a tool call (named after the anchor): both
        templates refuse a tool result after an assistant turn without one. The anchor's whole turn (text and tool
        call) is then what the ChatML cut looks for, ending with ``[e~[``."""
        anchor = anchor_absent_from(new_messages, tools)
        synthetic = [{"role": "user", "content": ANCHOR_QUERY}] if history_has_query else []
        call = {"type": "function", "function": {"name": anchor, "arguments": {}}}
        synthetic.append({"role": "assistant", "content": anchor, "tool_calls": [call]})
        try:
            text = self._render(synthetic + new_messages, tools, chat_template_kwargs, add_generation_prompt=True)
        except TitoError as exc:
            return exc.failure
        start = text.find(anchor)
        end = text.find(self.END_OF_TURN, start)
        if start < 0 or end < 0:
            return TitoFailure(TitoFailureReason.JUNCTION_MISMATCH, "the checkpoint's turn is not in the render")
        return self._cut_fragment(text, text[start:end], checkpoint_end, chat_template_kwargs)

    def render_assistant(self, message: Any, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        """The template's rendering of the turn after the generation prompt, ending with ``[e~[``; a turn rendered
        without the think block the prompt opened is generated as that block closed empty (module docstring)."""
        prompt, turn = self._render_one_turn(message, chat_template_kwargs)
        prefix = self.thinking_prefix(chat_template_kwargs)
        header = prompt[: len(prompt) - len(prefix)]
        tail = self.END_OF_TURN + self.JUNCTION
        body = turn[len(header) : -len(self.JUNCTION)] if turn.startswith(header) and turn.endswith(tail) else None
        if body is not None and body.startswith(prefix):
            return body[len(prefix) :]
        if body is not None and self.EMPTY_REASONING_CLOSE and not body.startswith(self.THINK_OPEN):
            return self.EMPTY_REASONING_CLOSE + body.removeprefix(self.THINK_CLOSE)
        raise TitoError.of(
            TitoFailureReason.JUNCTION_MISMATCH,
            f"the template renders this assistant turn as {turn[turn.rfind(self.ASSISTANT_HEADER):]!r}, which does "
            f"not extend the generation prompt {self.generation_prompt(chat_template_kwargs)!r}",
        )

    def last_step_spans(
        self, ids: list[int], messages: list[dict[str, Any]], has_tools: bool, kwargs: Mapping[str, Any] | None
    ) -> list[tuple[int, int]]:
        """From after ``]~b]ai\\n`` (and the thinking prefix the turn starts with) up to and including ``[e~[``.
        Refused when the render has more turns than the messages' skeleton (special-token text in a message)."""
        offsets = self.token_offsets(ids)
        data = b"".join(self.token_bytes(t) for t in ids)
        expected = self._render_skeleton(messages, has_tools, kwargs).count(self.TURN_START)
        if ids.count(self.turn_start_id) != expected:
            raise LastStepError(
                f"the render has {ids.count(self.turn_start_id)} turns for {expected} expected: a message contains "
                "special-token text"
            )
        role = self.ASSISTANT_HEADER[len(self.TURN_START) :].encode()
        prefix = self.thinking_prefix(kwargs).encode()
        spans: list[tuple[int, int]] = []
        for p, token_id in enumerate(ids):
            if token_id != self.turn_start_id or not data.startswith(role, offsets[p][1]):
                continue
            generated_from = offsets[p][1] + len(role)
            if prefix and data.startswith(prefix, generated_from):
                generated_from += len(prefix)
            try:
                end = ids.index(self.end_of_turn_id, p + 1)
            except ValueError:
                raise LastStepError("an assistant turn is not closed by [e~[") from None
            first = next(j for j in range(p + 1, end + 1) if offsets[j][0] >= generated_from)
            spans.append((first, end + 1))
        return spans


class MiniMaxM2TitoTokenizer(MiniMaxTitoTokenizer):
    """MiniMax-M2 (M2.x): always thinking, reasoning kept only after the last user message."""

    family = "minimax_m2"
    EMPTY_REASONING_CLOSE = "\n</think>\n\n"
    TEMPLATE_SHA256 = "893d908f7b5cc65fdde270dcae5ea1a99647c6a7ce572ae874a57b7160069566"

    def thinking_prefix(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        return self.THINK_OPEN + "\n"  # the template has no thinking switch


#: M3's ``thinking_mode`` values -> what the generation prompt adds after ``]~b]ai\n``
M3_THINKING_PREFIX = {"enabled": "<mm:think>", "disabled": "</mm:think>", "adaptive": ""}


class MiniMaxM3TitoTokenizer(MiniMaxTitoTokenizer):
    """MiniMax-M3: ``<mm:think>`` tags, reasoning kept in every turn, ``thinking_mode`` enabled/disabled/adaptive."""

    family = "minimax_m3"
    THINK_OPEN = "<mm:think>"
    THINK_CLOSE = "</mm:think>"
    EMPTY_REASONING_CLOSE = "</mm:think>"
    TEMPLATE_SHA256 = "11421244f67553498e5c8112dae02802025bcc4305ec45ad380af95c96f9fe64"

    def thinking_prefix(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        mode = (chat_template_kwargs or {}).get("thinking_mode")
        return M3_THINKING_PREFIX.get(mode, "") if isinstance(mode, str) else ""

    def extra_prompt_kwargs(self) -> tuple[dict[str, Any], ...]:
        return tuple({"thinking_mode": mode} for mode in M3_THINKING_PREFIX)
