"""The GLM chat format in the embedded engine (GLM-4.7, GLM-5.x): reading a GLM prompt, writing a GLM reply.

A GLM prompt is ``[gMASK]<sop>`` then turns opened by role tokens with no closing token (``<|system|>``,
``<|user|>``, ``<|assistant|>``, ``<|observation|>`` holding ``<tool_response>`` blocks); the tools are listed one
JSON object per line inside ``<tools>...</tools>`` of the first system turn. The generation prompt is
``<|assistant|>`` plus ``<think>`` (thinking) or ``</think>`` / ``<think></think>`` (thinking off).

A reply is written exactly as the official template renders an assistant turn, so that when the proxy parses it
and the client echoes the message back, the re-render reproduces the generated text token for token:
``<think>REASONING</think>CONTENT<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>`` (no
whitespace at either end of reasoning or content; string values raw, other values as JSON with ``, `` / ``: ``).
The model then stops on the next role: ``<|observation|>`` after tool calls, ``<|user|>`` otherwise.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .determinism import stable_hash
from .policy import plan_reply, tools_in_system

ROLES = ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")
ASSISTANT = "<|assistant|>"
USER, OBSERVATION = "<|user|>", "<|observation|>"
_ROLE_SPLIT = re.compile("(" + "|".join(re.escape(r) for r in ROLES) + ")")


def split_turns(context: str) -> list[tuple[str, str]]:
    """(role, content) of each turn of a GLM prompt (role without the markers: ``system``, ``user``, ...)."""
    pieces = _ROLE_SPLIT.split(context)
    return [(pieces[i][2:-2], pieces[i + 1]) for i in range(1, len(pieces) - 1, 2)]


def prompt_tools(turns: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The offered tools: the JSON lines inside ``<tools>`` of the first system turn that has them."""
    return next((tools_in_system(content) for role, content in turns if role == "system" and "<tools>" in content), [])


def render_glm_call(name: str, arguments: dict[str, Any]) -> str:
    """One call as the GLM-4.7 template renders it."""
    pairs = "".join(
        f"<arg_key>{k}</arg_key><arg_value>{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
        "</arg_value>" for k, v in arguments.items()
    )
    return f"<tool_call>{name}{pairs}</tool_call>"


def glm_reply(prefix: str, reasoning: str, body: str) -> str:
    """The reply after ``<|assistant|>``: it starts with the prompt's thinking ``prefix`` (already in the prompt),
    then the reasoning closed by ``</think>`` when thinking is on, then the body."""
    reasoning, body = reasoning.strip(), body.strip()
    if prefix == "<think>":
        return f"<think>{reasoning}</think>{body}"
    return prefix + body


def stop_role(reply: str) -> str:
    """The role token the model stops on after ``reply``."""
    return OBSERVATION if "<tool_call>" in reply else USER


def default_glm_reply(context: str, *, seed: int, prefix: str) -> str:
    """The default policy (``engine/policy.py``) in GLM markup: a tool call when tools are offered and the last turn
    is a user message, else an answer; ``prefix``: the thinking prefix the prompt ends with."""
    turns = split_turns(context)
    tools = prompt_tools(turns)
    users = [content for role, content in turns if role == "user"]
    user_text = users[-1].strip() if users else ""
    after_tool_response = bool(turns) and turns[-1][0] == "observation"
    plan = plan_reply(tools, user_text, after_tool_response, stable_hash("reply", seed, context))
    body = render_glm_call(*plan.call) if plan.call else plan.text
    return glm_reply(prefix, plan.reasoning, body)
