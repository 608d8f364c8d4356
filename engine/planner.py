"""Deciding what one request generates: a script entry or the default policy, as a token plan.

A :class:`Plan` is the full token sequence the "model" would emit after the prompt's assistant header, plus the
offset where this request starts in it. A request that continues a partial reply (its input ends with some of the
plan's tokens) starts past them, so an aborted-then-resubmitted generation continues where it stopped.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from .constraints import Grammar
from .deepseek_markup import TOOL_OUTPUT_ENDS, default_deepseek_reply
from .glm_markup import default_glm_reply
from .minimax_markup import M3_THINK_CLOSE, M3_THINK_OPEN, default_minimax_m3_reply, default_minimax_reply
from .policy import THINK_DISABLED, default_plain_text, default_reply, filler_text
from .script import ScriptBook, ScriptEntry
from .tokenizer import EngineTokenizer


@attrs.frozen
class Plan:
    """The tokens a request emits: ``tokens[start:]``, then ``filler`` repeated (past the end of the plan)."""

    tokens: tuple[int, ...]
    start: int
    filler: tuple[int, ...]
    #: The script entry behind the plan, or None for the default policy.
    entry: ScriptEntry | None = None
    #: The session key the plan was taken for (script bookkeeping).
    session_key: str = ""

    def token_at(self, index: int) -> int:
        """The ``index``-th token this request emits (0 = first output token)."""
        position = self.start + index
        if position < len(self.tokens):
            return self.tokens[position]
        return self.filler[(position - len(self.tokens)) % len(self.filler)]

    @property
    def source(self) -> str:
        return "default" if self.entry is None else f"script[{self.entry.index}]"


def _ends_with(sequence: Sequence[int], suffix: Sequence[int]) -> bool:
    return len(suffix) <= len(sequence) and list(sequence[len(sequence) - len(suffix) :]) == list(suffix)


def resume_offset(input_ids: Sequence[int], tokens: Sequence[int], emitted: int) -> int:
    """The longest ``j <= emitted`` such that ``input_ids`` ends with ``tokens[:j]`` (0 if none)."""
    for j in range(min(emitted, len(tokens), len(input_ids)), 0, -1):
        if _ends_with(input_ids, tokens[:j]):
            return j
    return 0


@attrs.define(eq=False)
class Planner:
    """Builds plans from the script book and the default policy; records entries left unfinished."""

    tokenizer: EngineTokenizer
    seed: int
    book: ScriptBook
    _header: tuple[int, ...] = ()
    _tool_output_end: tuple[int, ...] = ()
    _filler: tuple[int, ...] = ()

    def __attrs_post_init__(self) -> None:
        self._header = tuple(self.tokenizer.encode(self.tokenizer.assistant_header))
        if self.tokenizer.deepseek in TOOL_OUTPUT_ENDS:
            self._tool_output_end = tuple(self.tokenizer.encode(TOOL_OUTPUT_ENDS[self.tokenizer.deepseek]))
        self._filler = tuple(self.tokenizer.encode(filler_text(self.seed)))

    def plan(self, input_ids: Sequence[int], keys: Sequence[str], grammar: Grammar | None = None) -> Plan:
        """The plan for a request whose session keys are ``keys`` (most specific first). A script entry is emitted
        as written; the default policy writes output that satisfies ``grammar`` (the request's constraint)."""
        session_key = keys[0]
        opened = self.book.take_open(session_key, lambda entry: resume_offset(input_ids, entry.tokens, entry.emitted))
        if opened is not None:
            start = resume_offset(input_ids, opened.tokens, opened.emitted)
            return Plan(opened.tokens, start, self._filler, opened.entry, session_key)
        entry = self.book.take(keys)
        if entry is not None:
            tokens = tuple(self.tokenizer.encode(entry.output))
            if entry.eos:
                tokens += (self.tokenizer.end_of_turn_id(entry.output),)
            return Plan(tokens, 0, self._filler, entry, session_key)
        return self._default_plan(input_ids, session_key, grammar)

    def finished(self, plan: Plan, emitted: int, finish_type: str | None) -> None:
        """Leave a script entry open for its session when a request stopped before the entry's end (never one with a
        protocol fault: its broken answer was all the client got, and it is not resumed)."""
        if plan.entry is None or plan.entry.protocol_fault is not None or finish_type not in ("abort", "length"):
            return
        reached = plan.start + emitted
        if reached < len(plan.tokens):
            self.book.leave_open(plan.session_key, plan.entry, plan.tokens, reached)

    def _default_plan(self, input_ids: Sequence[int], session_key: str, grammar: Grammar | None = None) -> Plan:
        tk = self.tokenizer
        header_at, header_len = self._last_header(input_ids), len(self._header)
        tool_output_at = self._last_tool_output(input_ids, after=header_at)
        if tool_output_at > header_at:  # DeepSeek V3.1/V3.2 answer after tool outputs, no header (engine/deepseek_markup.py)
            header_at, header_len = tool_output_at, len(self._tool_output_end)
        so_far = list(input_ids[header_at + header_len :]) if header_at >= 0 else []
        markers = set(tk.glm_roles.values()) if tk.is_glm else {tk.im_start_id, tk.im_end_id}
        if header_at < 0 or markers.intersection(so_far):
            text = default_plain_text(tk.decode(list(input_ids), skip_special_tokens=False), seed=self.seed)
            return Plan(tuple(tk.encode(text)) + (tk.end_of_turn_id(text),), 0, self._filler, None, session_key)
        context = tk.decode(list(input_ids[:header_at]), skip_special_tokens=False)
        so_far_text = tk.decode(so_far, skip_special_tokens=False)
        if tk.is_glm:  # the prompt's thinking prefix: <think>, </think> or <think></think> (engine/glm_markup.py)
            prefix = next((p for p in ("<think></think>", "<think>", "</think>") if so_far_text.startswith(p)), "")
            reply = default_glm_reply(context, seed=self.seed, prefix=prefix)
        elif tk.is_minimax_m3:  # the prompt's thinking_mode prefix: <mm:think>, </mm:think> or none
            prefix = next((p for p in (M3_THINK_OPEN, M3_THINK_CLOSE) if so_far_text.startswith(p)), "")
            reply = default_minimax_m3_reply(context, seed=self.seed, prefix=prefix)
        elif tk.is_minimax:  # MiniMax-M2: the prompt always ends "<think>\n" (engine/minimax_markup.py)
            reply = default_minimax_reply(context, seed=self.seed)
        elif tk.deepseek:  # the prompt's thinking marker, none after a V3.1 tool output (engine/deepseek_markup.py)
            # after V3.2's tool outputs the prompt goes on ">\n\n" (one token) before its thinking marker
            after_tool_output = header_at == tool_output_at
            rest_text = so_far_text.lstrip(">\n") if after_tool_output else so_far_text
            lead = so_far_text[: len(so_far_text) - len(rest_text)]
            prefix = next((p for p in ("<think>", "</think>") if rest_text.startswith(p)), "")
            reply = lead + default_deepseek_reply(context, seed=self.seed, prefix=prefix, kind=tk.deepseek,
                                                  after_tool_output=after_tool_output)
        else:
            thinking = not so_far_text.startswith(THINK_DISABLED)
            reply = default_reply(
                context, seed=self.seed, thinking=thinking, xml_default=tk.uses_xml_tool_calls, grammar=grammar
            )
        tokens = tuple(tk.encode(reply)) + (tk.end_of_turn_id(reply),)
        if list(tokens[: len(so_far)]) != so_far:
            # The partial reply does not match the plan token by token: continue from its text if possible.
            rest = reply[len(so_far_text) :] if reply.startswith(so_far_text) else reply.rsplit("\n", 1)[-1]
            tokens = tuple(so_far) + tuple(tk.encode(rest)) + (tk.end_of_turn_id(reply),)
        return Plan(tokens, len(so_far), self._filler, None, session_key)

    def _last_tool_output(self, input_ids: Sequence[int], *, after: int) -> int:
        """Where the last tool-output end (``TOOL_OUTPUT_ENDS``: V3.1, V3.2) after position ``after`` is (-1 if none,
        or not such a vocabulary): only one after the last header matters, so the scan stops there."""
        return self._last_header(input_ids, self._tool_output_end, stop=after + 1) if self._tool_output_end else -1

    def _last_header(self, input_ids: Sequence[int], header: tuple[int, ...] = (), stop: int = 0) -> int:
        header = header or self._header
        first = header[0]
        for index in range(len(input_ids) - len(header), max(stop, 0) - 1, -1):
            if input_ids[index] == first and tuple(input_ids[index : index + len(header)]) == header:
                return index
        return -1
