"""The DeepSeek chat formats in the embedded engine (V3.1, V3.2, V4): reading a DeepSeek prompt, writing a reply.

A DeepSeek prompt is ``<｜begin▁of▁sentence｜>SYSTEM`` then ``<｜User｜>...`` and ``<｜Assistant｜>...`` turns (an
assistant turn ends with ``<｜end▁of▁sentence｜>``). The generation prompt is ``<｜Assistant｜>`` plus ``<think>``
(thinking) or ``</think>`` (not). V3.1 writes tool results as ``<｜tool▁output▁begin｜>...<｜tool▁output▁end｜>`` right
after the calling turn, with no new ``<｜Assistant｜>``: the model answers straight after the last
``<｜tool▁output▁end｜>``. V4 (and V3.2) put tool results in a user turn (``<tool_result>...</tool_result>``, V3.2:
``<function_results>``). The tools are JSON objects, one per line, in the system text (V4's encoder lists them under
"### Available Tool Schemas", V3.2's inside ``<functions>``); a V3.1 system prompt written from DeepSeek's tool guide
(``### NAME`` / ``Description:`` / ``Parameters: {JSON}``) is read too.

Which format a tokenizer folder speaks (:func:`variant`): no ``｜DSML｜`` token -> V3.1; ``<｜latest_reminder｜>``
(V4's vocabulary) -> V4; otherwise V3.2. A reply is written as the official rendering writes an assistant turn:

* V3.1 (its chat template): ``REASONING</think>`` when thinking, then ``CONTENT`` and, for a call,
  ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{JSON}<｜tool▁call▁end｜><｜tool▁calls▁end｜>``;
* V3.2 / V4 (V4's official encoder, ``encoding_dsv4.py``): ``REASONING</think>`` when thinking, ``CONTENT``, then
  ``\\n\\n<｜DSML｜tool_calls>\\n<｜DSML｜invoke name="F">\\n<｜DSML｜parameter name="K" string="true|false">V
  </｜DSML｜parameter>...\\n</｜DSML｜invoke>\\n</｜DSML｜tool_calls>`` (V3.2's block is ``function_calls``).

The engine ends every reply with ``<｜end▁of▁sentence｜>``. The proxy's parsers (``proxy/parsing/deepseek_blocks.py``)
read these replies back to exactly the planned calls (``tests/engine/test_deepseek_markup.py``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .determinism import stable_hash
from .policy import plan_reply, tools_in_json_lines

USER, ASSISTANT = "<｜User｜>", "<｜Assistant｜>"
END_OF_SENTENCE = "<｜end▁of▁sentence｜>"
TOOL_OUTPUT_END = "<｜tool▁output▁end｜>"
#: where each version's prompt leaves tool outputs without a new assistant header: V3.1's last tool output end, V3.2's
#: ``\n</function_results>\n\n`` and thinking marker (cut before ``>``: ``>\n\n`` is one token there)
TOOL_OUTPUT_ENDS = {"v3_1": TOOL_OUTPUT_END, "v3_2": "</function_results"}
DSML = "｜DSML｜"
#: variant -> DSML block name (None: V3.1's ``<｜tool▁calls▁begin｜>`` markup)
BLOCK_NAMES: dict[str, str | None] = {"v3_1": None, "v3_2": "function_calls", "v4": "tool_calls"}
_GUIDE_TOOL = re.compile(r"^### (\S+)\nDescription: (.*?)\n\nParameters: (\{.*?\})$", re.S | re.M)
_TOOL_RESULT_OPENERS = ("<tool_result>", "<function_results>", "<result>")


def variant(added_tokens: set[str]) -> str:
    """The DeepSeek format a vocabulary speaks (``v3_1``, ``v3_2``, ``v4``), from its added tokens."""
    if DSML not in added_tokens:
        return "v3_1"
    return "v4" if "<｜latest_reminder｜>" in added_tokens else "v3_2"


def prompt_tools(system: str) -> list[dict[str, Any]]:
    """The offered tools of a system text: JSON lines, else DeepSeek's tool-guide sections."""
    tools = tools_in_json_lines(system)
    for name, description, parameters in [] if tools else _GUIDE_TOOL.findall(system):
        try:
            tools.append({"name": name, "description": description, "parameters": json.loads(parameters)})
        except ValueError:
            continue
    return tools


def render_v31_call(name: str, arguments: dict[str, Any]) -> str:
    """One call as DeepSeek-V3.1's template renders it (arguments as ``json.dumps``, as OpenAI clients send them)."""
    return (f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{json.dumps(arguments, ensure_ascii=False)}"
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")


def render_dsml_call(name: str, arguments: dict[str, Any], block: str) -> str:
    """One call as V4's official encoder renders it (``encode_arguments_to_dsml``, ``tool_calls_template``)."""
    parameters = "\n".join(
        f'<{DSML}parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">'
        f"{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}</{DSML}parameter>"
        for k, v in arguments.items()
    )
    return f'\n\n<{DSML}{block}>\n<{DSML}invoke name="{name}">\n{parameters}\n</{DSML}invoke>\n</{DSML}{block}>'


def default_deepseek_reply(context: str, *, seed: int, prefix: str, kind: str, after_tool_output: bool) -> str:
    """The default policy (``engine/policy.py``) in DeepSeek markup. ``context``: the prompt before the generation
    point; ``prefix``: the thinking marker the prompt ends with (``<think>``, ``</think>`` or none after a V3.1 tool
    output, which the reply starts with); ``kind``: :func:`variant`; ``after_tool_output``: V3.1's prompt ended with
    a tool output."""
    system = context.split(USER, 1)[0]
    users = context.split(USER)[1:]
    user_text = users[-1].split(ASSISTANT, 1)[0].strip() if users else ""
    after_tool = after_tool_output or user_text.startswith(_TOOL_RESULT_OPENERS)
    earlier = [u.split(ASSISTANT, 1)[0].strip() for u in users if not u.strip().startswith(_TOOL_RESULT_OPENERS)]
    question = earlier[-1] if earlier else user_text
    plan = plan_reply(prompt_tools(system), question, after_tool, stable_hash("reply", seed, context))
    block = BLOCK_NAMES[kind]
    if plan.call:
        call = render_v31_call(*plan.call) if block is None else render_dsml_call(*plan.call, block)
        body = "I'll look that up." + call
    else:
        body = plan.text.strip()
    if prefix == "<think>":
        return f"<think>{plan.reasoning.strip()}</think>{body}"
    return prefix + body
