"""The DeepSeek-V3.1 junction rules: every turn ends with ``<｜end▁of▁sentence｜>``, tool results have no prompt.

The official template (inside the V3.1 ``tokenizer_config.json``) renders ``<｜begin▁of▁sentence｜>``, then every
system message's content (ALL of them, hoisted to the start, joined by a blank line), then the turns:

- user: ``<｜User｜>content``;
- assistant after a user: ``<｜Assistant｜></think>content<｜end▁of▁sentence｜>`` (the content after a ``</think>``
  it holds); with tool calls ``<｜Assistant｜></think>content<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>name
  <｜tool▁sep｜>arguments<｜tool▁call▁end｜>...<｜tool▁calls▁end｜><｜end▁of▁sentence｜>``. Reasoning is never rendered;
- tool result: ``<｜tool▁output▁begin｜>content<｜tool▁output▁end｜>`` right after the previous turn;
- assistant after tool results: no header, ``content<｜end▁of▁sentence｜>`` (or content + the tool-call block).

The generation prompt after a user turn is ``<｜Assistant｜>`` + ``<think>`` when the ``thinking`` template variable is
truthy, else ``</think>`` (the template reads ``thinking`` only; ``enable_thinking`` is ignored). After tool results
the template adds NO prompt: the model continues right after ``<｜tool▁output▁end｜>``.

So a checkpoint ends with the ``<｜end▁of▁sentence｜>`` the model generated, and the fragment is everything the
template renders after it: the new turns, then the generation prompt (after a user turn) or nothing (after tool
results). The cut falls right after a special token and every turn marker is an added token, so the fragment
tokenizes exactly as the full render does at that place. Two things the fragment cannot express are refused: a
system message after the checkpoint (the template moves it to the start of the conversation, rewriting the history:
``template_error``), and new messages that end without a prompt for the model (an assistant turn last).

What the model generates (:meth:`render_assistant_after`): after a user turn, the template's rendering of the turn
after the prompt -- with thinking on, ``reasoning</think>`` first (the prompt opened ``<think>``; the template never
re-renders it, so every later step drifts: ``reasoning_stripped``); after tool results, the template's own text of
the turn (no reasoning). Tool-call arguments reach the template as JSON text (``json.dumps``, ``ensure_ascii=False``:
the template concatenates them as strings; the proxy's messages hold them as objects).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from proxy.tokenization.messages import MessageError, normalize_message
from proxy.tokenization.results import LastStepError, TitoError, TitoFailure, TitoFailureReason
from proxy.tokenization.tito import ANCHOR_QUERY, TemplateMismatchError, TemplateTitoTokenizer

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
USER, ASSISTANT = "<｜User｜>", "<｜Assistant｜>"
TOOL_OUTPUT_BEGIN, TOOL_OUTPUT_END = "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"
TOOL_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"


def arguments_as_text(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Normalized messages with every tool call's arguments as JSON text (what DeepSeek's templates concatenate)."""
    out = []
    for message in messages:
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                function = dict(call["function"])
                if not isinstance(function["arguments"], str):
                    function["arguments"] = json.dumps(function["arguments"], ensure_ascii=False)
                calls.append({**call, "function": function})
            message = {**message, "tool_calls": calls}
        out.append(message)
    return out


def closed_at_eos(text: str) -> str:
    """A DeepSeek render of a list ending with an assistant turn already ends with that turn's eos (the last-step
    build's closing rule for every DeepSeek family)."""
    if not text.endswith(EOS):
        raise LastStepError(f"the render does not end with {EOS!r}: {text[-40:]!r}")
    return text


class DeepSeekV31TitoTokenizer(TemplateTitoTokenizer):
    """DeepSeek-V3.1's turn shape (module docstring); the official template's SHA-256 is its detection signature."""

    family = "deepseek_v3_1"
    #: the tokens a last-step mask is placed by: text holding one of them in a message is refused there
    TURN_MARKERS: ClassVar[tuple[str, ...]] = (ASSISTANT, EOS, TOOL_OUTPUT_END, USER)
    TEMPLATE_SHA256 = "45690185067ea25c073bff2d3e425a45ee2564d2bbf6cdf7d885e139d460b8e0"

    def _init_junction_tokens(self) -> None:
        self.end_of_turn_id = self._special_id(EOS)
        self.end_of_turn_ids = frozenset({self.end_of_turn_id})
        self.assistant_id = self._special_id(ASSISTANT)
        self.user_id = self._special_id(USER)
        self.tool_output_begin_id = self._special_id(TOOL_OUTPUT_BEGIN)
        self.tool_output_end_id = self._special_id(TOOL_OUTPUT_END)

    # -- switches and prompts -----------------------------------------------------------------------------------

    @staticmethod
    def thinking_on(chat_template_kwargs: Mapping[str, Any] | None) -> bool:
        """The template's ``thinking`` variable (jinja truthiness; undefined is false)."""
        return bool((chat_template_kwargs or {}).get("thinking"))

    def thinking_prefix(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        return self.THINK_OPEN if self.thinking_on(chat_template_kwargs) else self.THINK_CLOSE

    def generation_prompt(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        """The prompt after a user turn (after tool results the template adds none)."""
        return ASSISTANT + self.thinking_prefix(chat_template_kwargs)

    def _render(self, messages, tools, chat_template_kwargs, add_generation_prompt) -> str:
        """The template with its ``bos_token`` variable (transformers passes the tokenizer's) and arguments as text."""
        kwargs = {**self._template_kwargs(chat_template_kwargs), "bos_token": BOS}
        return super()._render(arguments_as_text(messages), tools, kwargs, add_generation_prompt)

    def _check_template(self) -> None:
        for kwargs in ({}, {"thinking": True}, {"thinking": False}):
            expected = self.generation_prompt(kwargs)
            query = [{"role": "user", "content": "q"}]
            try:
                prompt = self._render(query, None, kwargs, True)[len(self._render(query, None, kwargs, False)) :]
            except TitoError as exc:
                raise TemplateMismatchError(f"{self.source}: template failed on a one-message chat: {exc}") from None
            if prompt != expected:
                raise TemplateMismatchError(
                    f"{self.source}: the generation prompt for {kwargs} is {prompt!r}, but the {self.family} family "
                    f"expects {expected!r}"
                )
            for message, want in (
                ({"role": "user", "content": "u"}, USER + "u" + expected),
                ({"role": "tool", "content": "t"}, TOOL_OUTPUT_BEGIN + "t" + TOOL_OUTPUT_END),
            ):
                result = self._fragment_text([message], True, None, kwargs, self.end_of_turn_id)
                if result != want:
                    raise TemplateMismatchError(
                        f"{self.source}: a {message['role']} turn after an assistant turn renders as {result!r}, "
                        f"expected {want!r}"
                    )

    # -- what the model generates ---------------------------------------------------------------------------------

    def render_assistant(self, message: Any, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        """What the model generates for ``message`` after a user turn's prompt, through ``<｜end▁of▁sentence｜>``:
        the template's text of the turn after ``<｜Assistant｜></think>``, preceded by ``reasoning</think>`` when
        thinking is on (the prompt opened ``<think>``)."""
        prompt, turn = self._render_one_turn(message, chat_template_kwargs)
        header = prompt[: len(prompt) - len(self.thinking_prefix(chat_template_kwargs))]
        opened = header + self.THINK_CLOSE
        if not turn.startswith(opened) or not turn.endswith(EOS):
            raise TitoError.of(
                TitoFailureReason.JUNCTION_MISMATCH,
                f"the template renders this assistant turn as {turn[len(header):]!r}, which does not follow "
                f"{ASSISTANT + self.THINK_CLOSE!r}",
            )
        body = turn[len(opened) :]
        if not self.thinking_on(chat_template_kwargs):
            return body
        reasoning = message.get("reasoning_content") if isinstance(message, Mapping) else None
        return (reasoning if isinstance(reasoning, str) else "") + self.THINK_CLOSE + body

    def render_assistant_after(
        self, history: Sequence[Any], message: Any, chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> str:
        """After tool results the template gives no prompt: the model writes the turn as the template renders it
        there (no header, no reasoning). Otherwise :meth:`render_assistant`."""
        last = history[-1] if history else None
        if not (isinstance(last, Mapping) and last.get("role") == "tool"):
            return self.render_assistant(message, chat_template_kwargs)
        try:
            normalized = normalize_message(message)
        except MessageError as exc:
            raise TitoError.of(TitoFailureReason.INVALID_MESSAGE, str(exc)) from None
        call = {"type": "function", "function": {"name": "f", "arguments": {}}}
        synthetic = [
            {"role": "user", "content": ANCHOR_QUERY},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": ANCHOR_QUERY},
        ]
        before = self._render(synthetic, None, chat_template_kwargs, add_generation_prompt=True)
        turn = self._render(synthetic + [normalized], None, chat_template_kwargs, add_generation_prompt=False)
        if not turn.startswith(before) or not turn.endswith(EOS):
            raise TitoError.of(TitoFailureReason.JUNCTION_MISMATCH, "the turn after tool results does not extend them")
        return turn[len(before) :]

    # -- the fragment ---------------------------------------------------------------------------------------------

    def _fragment_text(self, new_messages, history_has_query, tools, chat_template_kwargs, checkpoint_end):
        if any(message["role"] == "system" for message in new_messages):
            return TitoFailure(
                TitoFailureReason.TEMPLATE_ERROR,
                "the DeepSeek-V3.1 template moves every system message to the start of the conversation: a system "
                "message after the checkpoint rewrites the history, which no fragment can express",
            )
        return super()._fragment_text(new_messages, history_has_query, tools, chat_template_kwargs, checkpoint_end)

    def _cut_fragment(self, text, anchor, checkpoint_end, chat_template_kwargs) -> str | TitoFailure:
        cut = anchor + EOS
        if text.count(cut) != 1:
            return TitoFailure(
                TitoFailureReason.JUNCTION_MISMATCH,
                f"the end of the checkpoint's turn ({cut!r}) occurs {text.count(cut)} times in the synthetic render",
            )
        fragment = text[text.index(cut) + len(cut) :]
        prompt = self.generation_prompt(chat_template_kwargs)
        if not fragment.endswith((prompt, TOOL_OUTPUT_END)):
            return TitoFailure(
                TitoFailureReason.JUNCTION_MISMATCH,
                f"the new messages leave the model no turn to take: the fragment ends with {fragment[-60:]!r}, "
                f"neither the generation prompt {prompt!r} nor a tool result",
            )
        return fragment

    def _check_fragment_ids(self, ids: list[int], chat_template_kwargs: Mapping[str, Any] | None) -> str | None:
        prompt_ids = self.generation_prompt_ids(chat_template_kwargs)
        if tuple(ids[-len(prompt_ids) :]) != prompt_ids and ids[-1:] != [self.tool_output_end_id]:
            return f"fragment tokens end neither with the generation prompt {prompt_ids} nor a tool result: {ids[-6:]}"
        return None

    # -- last-step and drift --------------------------------------------------------------------------------------

    def close_last_step_text(self, text: str, final: Mapping[str, Any]) -> str:
        return closed_at_eos(text)

    def last_step_spans(
        self, ids: list[int], messages: list[dict[str, Any]], has_tools: bool, kwargs: Mapping[str, Any] | None
    ) -> list[tuple[int, int]]:
        """Each assistant turn from after ``<｜Assistant｜>`` (and the thinking prefix it starts with), or from
        right after a tool result it follows, through its ``<｜end▁of▁sentence｜>``. Refused when the render has
        other turn markers than the messages' skeleton (special-token text inside a message)."""
        markers = tuple(self._special_id(marker) for marker in self.TURN_MARKERS)
        skeleton = self.encode_text(self._render_skeleton(messages, has_tools, kwargs))
        found, expected = [t for t in ids if t in markers], [t for t in skeleton if t in markers]
        if found != expected:
            raise LastStepError(
                f"the render's turn markers ({self.decode(found)!r}) differ from its skeleton's "
                f"({self.decode(expected)!r}): a message holds special-token text"
            )
        prefix_ids = self.encode_text(self.thinking_prefix(kwargs))
        spans: list[tuple[int, int]] = []
        for p, token_id in enumerate(ids):
            if token_id == self.assistant_id:
                first = p + 1
                if ids[first : first + len(prefix_ids)] == prefix_ids:
                    first += len(prefix_ids)
            elif token_id == self.tool_output_end_id and p + 1 < len(ids) and ids[p + 1] not in (
                self.tool_output_begin_id, self.user_id
            ):
                first = p + 1
            else:
                continue
            try:
                end = ids.index(self.end_of_turn_id, p + 1)
            except ValueError:
                raise LastStepError(f"an assistant turn is not closed by {EOS!r}") from None
            spans.append((first, end + 1))
        return spans

    def boundary_markers(self) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
        after = tuple(marker.encode() for marker in (EOS, TOOL_OUTPUT_END, USER, ASSISTANT))
        at = tuple(marker.encode() for marker in (USER, ASSISTANT, TOOL_OUTPUT_BEGIN, EOS, BOS))
        return after, at

