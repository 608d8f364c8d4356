"""The default policy: what the engine "generates" when no script entry applies.

It reads the rendered chat prompt the way a Qwen model would see it and writes a plausible, deterministic reply:
reasoning in ``<think>...</think>``, then either a tool call for one of the offered tools (JSON for Qwen3, XML
``<function=...><parameter=...>`` for Qwen3.5, matching what the prompt's tool instructions ask for) or a short
answer. The text depends only on the seed and on the conversation *before* the assistant header, never on what
the assistant already produced, so a continuation request (prompt + partial output) continues the same reply.

Decision rule: tools offered and the last turn is a user message -> one tool call; otherwise (no tools, or the
last turn holds tool responses) -> a final answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import attrs

from .constrained_output import RenderContext, render_constrained
from .constraints import Grammar
from .determinism import stable_hash
from .plausible_text import argument_value, sentence, topic

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ASSISTANT_HEADER = "<|im_start|>assistant\n"
THINK_OPEN = "<think>\n"
THINK_DISABLED = "<think>\n\n</think>\n\n"


@attrs.frozen
class PromptView:
    """What the default policy needs to know about a rendered chat prompt."""

    #: The offered tools as ``{"name", "description", "parameters"}`` dicts, in prompt order.
    tools: tuple[dict[str, Any], ...]
    #: The prompt asks for Qwen3.5 XML tool calls (``<function=...>``) rather than Qwen3 JSON.
    xml_tool_calls: bool
    #: Text of the last real user message (tool responses excluded), markup stripped.
    user_text: str
    #: The last turn before the assistant header holds tool responses.
    after_tool_response: bool


def analyze_prompt(context: str) -> PromptView:
    """Parse the conversation part of a prompt (everything up to the final assistant header)."""
    turns = []
    for raw in context.split(IM_START)[1:]:
        role, _, content = raw.partition("\n")
        turns.append((role.strip(), content.split(IM_END)[0]))
    tools: list[dict[str, Any]] = []
    xml = False
    if turns and turns[0][0] == "system":
        system = turns[0][1]
        xml = "<function=" in system and "<parameter=" in system
        tools = tools_in_system(system)
    user_text = ""
    after_tool_response = False
    for index, (role, content) in enumerate(turns):
        if role != "user":
            continue
        stripped = content.strip()
        is_tool_response = stripped.startswith("<tool_response>") and stripped.endswith("</tool_response>")
        if not is_tool_response:
            user_text = stripped
        if index == len(turns) - 1:
            after_tool_response = is_tool_response
    return PromptView(tuple(tools), xml, user_text, after_tool_response)


def tools_in_system(system: str) -> list[dict[str, Any]]:
    """The offered tools of a system turn: one JSON object per line inside ``<tools>...</tools>`` (Qwen and GLM)."""
    match = re.search(r"<tools>\n(.*?)\n</tools>", system, re.S)
    return tools_in_json_lines(match.group(1)) if match else []


def tools_in_json_lines(text: str) -> list[dict[str, Any]]:
    """The tools listed one JSON object per line in ``text`` (a function, or an OpenAI tool holding one); other
    lines are skipped. DeepSeek's system turns list them this way without ``<tools>`` (engine/deepseek_markup.py)."""
    tools: list[dict[str, Any]] = []
    for line in text.split("\n"):
        try:
            tool = json.loads(line)
        except ValueError:
            continue
        if isinstance(tool, dict):
            function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
            if isinstance(function.get("name"), str) and function["name"]:
                tools.append(function)
    return tools


def tool_arguments(function: dict[str, Any], h: int, user_text: str) -> dict[str, Any]:
    """Arguments for ``function``: its required parameters (all of them when none is marked required)."""
    parameters = function.get("parameters") if isinstance(function.get("parameters"), dict) else {}
    properties = parameters.get("properties") if isinstance(parameters.get("properties"), dict) else {}
    required = parameters.get("required") if isinstance(parameters.get("required"), list) else []
    names = [name for name in properties if name in required] or list(properties)
    return {name: argument_value(name, properties[name], stable_hash(h, name), user_text) for name in names}


def render_tool_call(name: str, arguments: dict[str, Any], *, xml: bool) -> str:
    """One tool call in the model's wire format (sglang-protocol.md §5.4)."""
    if not xml:
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"
    parts = [f"<tool_call>\n<function={name}>\n"]
    for key, value in arguments.items():
        rendered = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"<parameter={key}>\n{rendered}\n</parameter>\n")
    parts.append("</function>\n</tool_call>")
    return "".join(parts)


class ReplyPlan(NamedTuple):
    """What the default policy says in one turn, before any family's markup writes it."""

    reasoning: str
    #: (tool name, arguments) when the turn calls a tool; the answer text is then empty
    call: tuple[str, dict[str, Any]] | None
    text: str


def plan_reply(tools: Sequence[dict[str, Any]], user_text: str, after_tool_response: bool, h: int) -> ReplyPlan:
    """The default policy's turn, shared by every family's markup: a tool call when tools are offered and the last
    turn is the user's, an answer about the tool results after them, else a short answer."""
    about = topic(user_text)
    if tools and not after_tool_response:
        function = tools[h % len(tools)]
        name = function["name"]
        reasoning = f"The user asks {about}. I should call {name} to get the facts. {sentence(h + 3, 6)}"
        return ReplyPlan(reasoning, (name, tool_arguments(function, h, user_text)), "")
    if after_tool_response:
        reasoning = f"The tool returned its result. {sentence(h + 3, 7)}"
        answer = f"Based on the tool results for {about}: {sentence(h + 1, 9)} {sentence(h + 2, 5)}"
        return ReplyPlan(reasoning, None, answer)
    reasoning = f"The user wrote {about}. {sentence(h + 3, 8)}"
    return ReplyPlan(reasoning, None, f"Here is a short answer about {about}. {sentence(h + 1, 10)}")


def default_reply(
    context: str, *, seed: int, thinking: bool, xml_default: bool, grammar: Grammar | None = None
) -> str:
    """The full assistant reply for a conversation, from just after the assistant header (no end token).

    ``thinking=False`` when the prompt disabled reasoning (its assistant turn starts with an empty think block):
    the reply then starts with that empty block, which the prompt already holds.

    Under a ``grammar`` (the request's constraint) the answer after the reasoning is what the grammar admits
    (:func:`~engine.constrained_output.render_constrained`): SGLang's reasoning parser keeps the reasoning free and
    applies the grammar from the token after ``</think>``, so the constrained part follows it directly.
    """
    view = analyze_prompt(context)
    h = stable_hash("reply", seed, context)
    if grammar is not None:
        constrained = _constrained_reply(view, h, seed, grammar, thinking=thinking)
        if constrained is not None:
            return constrained
    xml = view.xml_tool_calls or (xml_default and not view.tools)
    plan = plan_reply(view.tools, view.user_text, view.after_tool_response, h)
    body = render_tool_call(*plan.call, xml=xml) if plan.call else plan.text
    if not thinking:
        return THINK_DISABLED + body
    return f"{THINK_OPEN}{plan.reasoning}\n</think>\n\n{body}"


def _constrained_reply(view: PromptView, h: int, seed: int, grammar: Grammar, *, thinking: bool) -> str | None:
    about = topic(view.user_text)
    answer = f"Here is a short answer about {about}. {sentence(h + 1, 10)}"
    context = RenderContext(
        tools=view.tools, user_text=view.user_text, wants_call=bool(view.tools) and not view.after_tool_response,
        free_text=answer, seed=seed,
    )
    body = render_constrained(grammar, context)
    if body is None:
        return None
    if not thinking:
        return THINK_DISABLED + body
    reasoning = f"The user wrote {about}. The answer must follow the requested format. {sentence(h + 3, 6)}"
    return f"{THINK_OPEN}{reasoning}\n</think>{body}"


def default_plain_text(prompt: str, *, seed: int) -> str:
    """The continuation of a raw (non-chat) prompt: a few deterministic sentences."""
    h = stable_hash("plain", seed, prompt)
    return " " + " ".join(sentence(h + i, 6 + i) for i in range(3))


def filler_text(seed: int) -> str:
    """Text generated past the end of a plan (``ignore_eos``, or a script entry with ``"eos": false``)."""
    return " " + " ".join(sentence(stable_hash("filler", seed, i), 8) for i in range(4))
