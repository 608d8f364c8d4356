"""The MiniMax-M2 chat format in the embedded engine: reading a MiniMax prompt, writing a MiniMax reply.

A MiniMax-M2 prompt is ``]~!b[`` then turns ``]~b]ROLE\\n...[e~[\\n`` (roles ``system``, ``user``, ``ai``, ``tool``
holding ``<response>`` blocks); the tools are listed as ``<tool>{JSON}</tool>`` lines inside ``<tools>...</tools>`` of
the system turn. The generation prompt is ``]~b]ai\\n<think>\\n`` (the template has no thinking switch).

A reply is written as the official template renders an assistant turn after that prompt:
``REASONING\\n</think>\\n\\nCONTENT`` then, for a call, ``\\n<minimax:tool_call>\\n<invoke name="F">\\n<parameter
name="K">V</parameter>\\n...</invoke>\\n</minimax:tool_call>`` (string values raw, others as JSON); the engine closes
it with ``[e~[``.

MiniMax-M3 (the same turns, a ``developer`` turn holding the tools, ``engine/tokenizer.py`` ``is_minimax_m3``): the
generation prompt ends with the ``thinking_mode`` prefix (``<mm:think>`` enabled, ``</mm:think>`` disabled, nothing
adaptive), and a reply is written as the M3 template renders a turn: ``<mm:think>REASONING</mm:think>CONTENT`` (a
disabled turn ``</mm:think>CONTENT``; in adaptive mode the engine chooses to think) then, for a call,
``]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="F">]<]minimax[>[<K>V]<]minimax[>[</K>...]<]minimax[>[</invoke>
\n]<]minimax[>[</tool_call>`` (values through the template's ``to_xml``: objects and arrays as nested elements).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .determinism import stable_hash
from .policy import ReplyPlan, plan_reply

TURN_START, TURN_END = "]~b]", "[e~["
ASSISTANT_HEADER = "]~b]ai\n"
THINK_PREFIX = "<think>\n"
_TOOL = re.compile(r"<tool>(.*?)</tool>", re.S)


def split_turns(context: str) -> list[tuple[str, str]]:
    """(role, content) of each turn of a MiniMax prompt."""
    turns = []
    for raw in context.split(TURN_START)[1:]:
        role, _, content = raw.partition("\n")
        turns.append((role.strip(), content.split(TURN_END)[0]))
    return turns


def prompt_tools(turns: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The offered tools: the ``<tool>`` JSON objects inside ``<tools>`` of the system turn."""
    for role, content in turns:
        if role not in ("system", "developer") or "<tools>" not in content:  # M2: system; M3: developer
            continue
        tools = []
        for raw in _TOOL.findall(content.split("<tools>", 1)[1].split("</tools>", 1)[0]):
            try:
                tool = json.loads(raw)
            except ValueError:
                continue
            if isinstance(tool, dict) and isinstance(tool.get("name"), str) and tool["name"]:
                tools.append(tool)
        return tools
    return []


def render_minimax_call(name: str, arguments: dict[str, Any]) -> str:
    """One call as the MiniMax-M2 template renders it (the block's tags included)."""
    parameters = "".join(
        f'<parameter name="{k}">{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}</parameter>\n'
        for k, v in arguments.items()
    )
    return f'\n<minimax:tool_call>\n<invoke name="{name}">\n{parameters}</invoke>\n</minimax:tool_call>'


def minimax_plan(context: str, seed: int) -> ReplyPlan:
    """The default policy's turn for a MiniMax prompt (M2 and M3 read their prompts alike)."""
    turns = split_turns(context)
    users = [content for role, content in turns if role == "user"]
    after_tool_response = bool(turns) and turns[-1][0] == "tool"
    user_text = users[-1].strip() if users else ""
    return plan_reply(prompt_tools(turns), user_text, after_tool_response, stable_hash("reply", seed, context))


def default_minimax_reply(context: str, *, seed: int) -> str:
    """The default policy (``engine/policy.py``) in MiniMax markup, starting with the prompt's ``<think>\\n``: a tool
    call when tools are offered and the last turn is a user message, else an answer."""
    plan = minimax_plan(context, seed)
    body = "I'll look that up." + render_minimax_call(*plan.call) if plan.call else plan.text
    return f"{THINK_PREFIX}{plan.reasoning.strip()}\n</think>\n\n{body.strip()}"


# -- MiniMax-M3 -----------------------------------------------------------------------------------------------------

M3_NS = "]<]minimax[>["
M3_THINK_OPEN, M3_THINK_CLOSE = "<mm:think>", "</mm:think>"


def m3_xml(value: Any) -> str:
    """The M3 template's ``to_xml`` macro: mappings and lists as nested elements (None members omitted), booleans
    ``true``/``false``, anything else as Jinja prints it."""
    if isinstance(value, dict):
        return "".join(f"{M3_NS}<{k}>{m3_xml(v)}{M3_NS}</{k}>" for k, v in value.items() if v is not None)
    if isinstance(value, list):
        return "".join(f"{M3_NS}<item>{m3_xml(v)}{M3_NS}</item>" for v in value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_minimax_m3_call(name: str, arguments: dict[str, Any]) -> str:
    """One call as the MiniMax-M3 template renders it (the block's tags included)."""
    invoke = f'{M3_NS}<invoke name="{name}">{m3_xml(arguments)}{M3_NS}</invoke>\n'
    return f"{M3_NS}<tool_call>\n{invoke}{M3_NS}</tool_call>"


def default_minimax_m3_reply(context: str, *, seed: int, prefix: str) -> str:
    """The default policy in MiniMax-M3 markup, starting with the prompt's thinking ``prefix`` (``<mm:think>``,
    ``</mm:think>`` or nothing): a tool call when tools are offered and the last turn is a user message, else an
    answer."""
    plan = minimax_plan(context, seed)
    body = "I'll look that up." + render_minimax_m3_call(*plan.call) if plan.call else plan.text.strip()
    if prefix == M3_THINK_CLOSE:  # thinking disabled: the prompt closed the (empty) reasoning
        return M3_THINK_CLOSE + body
    return f"{M3_THINK_OPEN}{plan.reasoning.strip()}{M3_THINK_CLOSE}{body}"
