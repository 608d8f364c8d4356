"""Hypothesis strategies for agent conversations, and the settings shared by the property tests.

A :class:`Script` is what an agent loop would send over a whole episode: the opening messages (optional system
prompt, a user turn), then for every step the assistant message the model produces and the messages the agent
appends after it (tool results, a user turn, for Qwen3 sometimes a system turn). The final step has no follow-up.
"""

from __future__ import annotations

import json
import os
from typing import Any

import attrs
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: per-property example budget; DRESSAGE_TITO_EXAMPLES raises it for a deeper local run
MAX_EXAMPLES = int(os.environ.get("DRESSAGE_TITO_EXAMPLES", "40"))
TITO_SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

TOOLS = (
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file — returns its text",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
)

EDGE_TEXTS = (
    "",
    " ",
    "\n",
    "\n\n",
    " \t\n ",
    "😀",
    "emoji 👍🏽 and 🇫🇷 flags",
    "e\u0301te\u0301 combining",
    "हिन्दी भाषा",
    "ภาษาไทย",
    "中文，标点。",
    "  leading spaces",
    "trailing \n",
    "line1\nline2\n\n\nline5",
    "tab\there\r\nwindows",
    "\u200bzero\u200dwidth",
    "ﬁ ligature Ω",
    '{"looks": "like json"}',
)

# Special-token text inside content becomes a special token (for the full render and TITO alike) and Qwen3's
# template splits assistant content at "</think>"; a model never emits these as plain text, so leave them out.
_FORBIDDEN = ("<|", "think>", "tool_call>", "tool_response>")


def _clean(text: str) -> bool:
    return not any(marker in text for marker in _FORBIDDEN)


def texts(max_size: int = 30) -> st.SearchStrategy[str]:
    """Short unicode text with a bias towards whitespace, emoji and combining-mark edge cases."""
    random_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=max_size)
    return st.one_of(st.sampled_from(EDGE_TEXTS), random_text).filter(_clean)


def contents() -> st.SearchStrategy[Any]:
    """A user or tool content: a string, or sometimes a list of text parts."""
    parts = st.lists(texts(12).map(lambda t: {"type": "text", "text": t}), min_size=1, max_size=3)
    return st.one_of(texts(), texts(), parts)


_keys = st.one_of(
    st.sampled_from(["a", "path", "query", "b_c", "ключ", "名前"]), st.from_regex(r"[a-z_]{1,8}", fullmatch=True)
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    texts(15),
)
json_values = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3), max_leaves=6
)


@st.composite
def tool_calls(draw: st.DrawFn, call_id: str) -> dict[str, Any]:
    """One OpenAI tool call; arguments nested JSON (possibly empty), given as an object or a JSON string."""
    arguments: Any = draw(st.dictionaries(_keys, json_values, max_size=3))
    form = draw(st.sampled_from(["object", "json", "json_ascii"]))
    if form != "object":
        arguments = json.dumps(arguments, ensure_ascii=form == "json_ascii")
    name = draw(st.sampled_from(["search", "read_file", "run_shell"]))
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


@st.composite
def assistant_messages(
    draw: st.DrawFn, step: int, thinking_off: bool, *, needs_calls: bool = False, always_reasons: bool = False
) -> dict[str, Any]:
    """An assistant message as a client would echo it; no reasoning when thinking is off."""
    n_calls = draw(st.sampled_from([1, 1, 2, 3] if needs_calls else [0, 0, 1, 1, 2, 3]))
    calls = [draw(tool_calls(f"call_{step}_{i}")) for i in range(n_calls)]
    content = draw(st.one_of(texts(40), st.none())) if calls else draw(texts(40))
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if not thinking_off:
        if always_reasons:
            reasoning = draw(texts(40).filter(str.strip))
        else:
            reasoning = draw(st.one_of(st.none(), texts(40), texts(40)))
        if reasoning is not None:
            message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return message


@attrs.frozen
class Script:
    """A whole simulated episode."""

    family: str
    thinking: bool | None
    tools: tuple[dict[str, Any], ...] | None
    opening: tuple[dict[str, Any], ...]
    steps: tuple[tuple[dict[str, Any], tuple[dict[str, Any], ...]], ...]
    """(assistant message, follow-up messages); the last step's follow-up is empty."""

    @property
    def kwargs(self) -> dict[str, Any]:
        return {} if self.thinking is None else {"enable_thinking": self.thinking}

    @property
    def final_messages(self) -> list[dict[str, Any]]:
        messages = list(self.opening)
        for assistant, follow_up in self.steps:
            messages.append(assistant)
            messages.extend(follow_up)
        return messages


@st.composite
def scripts(draw: st.DrawFn, family: str, max_steps: int = 30) -> Script:
    """An episode of 1..max_steps model steps for ``family``.

    Half the episodes are agentic tool loops (one user query, then tool calls and results until the final answer,
    usually with reasoning at every step): the histories the templates render prefix-stably. The others mix
    chat turns, user interjections after tool results and (Qwen3) mid-conversation system turns.
    """
    thinking = draw(st.sampled_from([None, True, False]))
    tools = draw(st.sampled_from([None, TOOLS]))
    tool_loop = draw(st.booleans())
    always_reasons = tool_loop and draw(st.integers(0, 2)) > 0
    opening: list[dict[str, Any]] = []
    if draw(st.booleans()):
        opening.append({"role": "system", "content": draw(texts())})
    opening.append({"role": "user", "content": draw(contents())})
    n_steps = draw(st.integers(1, max_steps))
    steps = []
    for step in range(n_steps):
        last = step == n_steps - 1
        assistant = draw(
            assistant_messages(
                step, thinking is False, needs_calls=tool_loop and not last, always_reasons=always_reasons
            )
        )
        follow_up: list[dict[str, Any]] = []
        if not last:
            calls = assistant.get("tool_calls", [])
            n_results = draw(st.integers(1, 3)) if calls else 0
            for i in range(n_results):
                call_id = calls[i]["id"] if i < len(calls) else f"call_{step}_extra{i}"
                follow_up.append({"role": "tool", "tool_call_id": call_id, "content": draw(contents())})
            if not calls or (not tool_loop and draw(st.booleans())):
                if family == "qwen3" and draw(st.integers(0, 4)) == 0:
                    follow_up.append({"role": "system", "content": draw(texts())})
                follow_up.append({"role": "user", "content": draw(contents())})
        steps.append((assistant, tuple(follow_up)))
    return Script(family, thinking, tools, tuple(opening), tuple(steps))
