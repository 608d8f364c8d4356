"""Model output formats: the markup strings, the names of the tool-call and reasoning formats, the offered tools.

Names are SGLang's parser names (sglang-protocol.md §5.1, §5.2), because with the ``sglang_api`` backend the
same name is sent to SGLang: ``--model-tool-call-type`` is ``qwen25`` (alias ``qwen``: Qwen2.5 / Qwen3 JSON) or
``qwen3_coder`` (alias ``step3p5``: Qwen3-Coder / Qwen3.5 / Qwen3.6 XML); ``--model-reasoning-type`` is ``qwen3``
(``<think>...</think>``) or ``qwen3-thinking`` (the same, but the output always starts inside the reasoning).
GLM (docs/parsing.md, "GLM"): tool calls ``glm47`` (GLM-4.7, GLM-5.x) or ``glm45`` (GLM-4.5/4.6, the same with
newlines), reasoning ``glm45`` (SGLang's ``Glm45Detector``: ``<think>...</think>``, ended by ``<tool_call>`` too).
MiniMax-M2: tool calls ``minimax-m2`` (``<minimax:tool_call>`` blocks, ``proxy/parsing/minimax_blocks.py``), reasoning
``minimax`` (SGLang's ``Qwen3Detector`` forced open, as ``qwen3-thinking``). MiniMax-M3: tool calls ``minimax-m3``
(namespaced ``]<]minimax[>[<tool_call>`` blocks, ``proxy/parsing/minimax_m3_blocks.py``), reasoning ``minimax-m3``
(``<mm:think>...</mm:think>``, open at the start only when the prompt opened it, a leading ``</mm:think>`` is an empty
reasoning). The reasoning markers are a property of the reasoning type (:class:`ThinkMarkers`), never a literal.
DeepSeek (docs/parsing.md, "DeepSeek"): tool calls ``deepseekv31`` (``<｜tool▁calls▁begin｜>`` blocks), ``deepseekv32``
and ``deepseekv4`` (DSML blocks; ``proxy/parsing/deepseek_blocks.py``); reasoning ``deepseek-v3`` (SGLang's
``Qwen3Detector``, not forced: the prompt's ``<think>`` opens it), ``deepseek-v4`` (the same markers, no
``<tool_call>`` end) or ``deepseek-r1`` (forced open).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
MINIMAX_TOOL_CALL_START = "<minimax:tool_call>"
MINIMAX_TOOL_CALL_END = "</minimax:tool_call>"
MINIMAX_NS = "]<]minimax[>["
"""MiniMax-M3's markup namespace: one token written before every tag of its tool-call markup."""
MINIMAX_M3_TOOL_CALL_START = MINIMAX_NS + TOOL_CALL_START
MINIMAX_M3_TOOL_CALL_END = MINIMAX_NS + TOOL_CALL_END
MM_THINK_START = "<mm:think>"
MM_THINK_END = "</mm:think>"


class ToolCallFormat(enum.Enum):
    """How a call is written between ``<tool_call>`` and ``</tool_call>``."""

    JSON = "json"
    """``{"name": ..., "arguments": {...}}`` (SGLang parser ``qwen25``)."""
    XML = "xml"
    """``<function=NAME><parameter=P>VALUE</parameter></function>`` (SGLang parser ``qwen3_coder``)."""
    GLM = "glm"
    """``NAME<arg_key>K</arg_key><arg_value>V</arg_value>...`` (SGLang parsers ``glm47`` and ``glm45``)."""
    MINIMAX_M2 = "minimax_m2"
    """``<invoke name="F"><parameter name="K">V</parameter></invoke>...`` inside ``<minimax:tool_call>`` blocks
    (SGLang parser ``minimax-m2``)."""
    MINIMAX_M3 = "minimax_m3"
    """``]<]minimax[>[<invoke name="F">]<]minimax[>[<K>V]<]minimax[>[</K>...`` with nested elements, inside
    ``]<]minimax[>[<tool_call>`` blocks (SGLang parser ``minimax-m3``)."""

    DEEPSEEK_V31 = "deepseek_v31"
    """``<｜tool▁call▁begin｜>F<｜tool▁sep｜>{JSON}<｜tool▁call▁end｜>...`` inside ``<｜tool▁calls▁begin｜>`` blocks
    (SGLang parser ``deepseekv31``)."""
    DSML_V32 = "dsml_v32"
    """``<｜DSML｜invoke name="F"><｜DSML｜parameter name="K" string="true">V</｜DSML｜parameter>...`` inside
    ``<｜DSML｜function_calls>`` blocks (SGLang parser ``deepseekv32``)."""
    DSML_V4 = "dsml_v4"
    """The same DSML inside ``<｜DSML｜tool_calls>`` blocks (SGLang parser ``deepseekv4``, V4's official encoder)."""

    @property
    def markers(self) -> tuple[str, str]:
        """The tags a block of this format opens and closes with."""
        return _MARKERS.get(self, (TOOL_CALL_START, TOOL_CALL_END))


_MARKERS: Mapping[ToolCallFormat, tuple[str, str]] = {
    ToolCallFormat.MINIMAX_M2: (MINIMAX_TOOL_CALL_START, MINIMAX_TOOL_CALL_END),
    ToolCallFormat.MINIMAX_M3: (MINIMAX_M3_TOOL_CALL_START, MINIMAX_M3_TOOL_CALL_END),
    ToolCallFormat.DEEPSEEK_V31: ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),
    ToolCallFormat.DSML_V32: ("<｜DSML｜function_calls>", "</｜DSML｜function_calls>"),
    ToolCallFormat.DSML_V4: ("<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>"),
}


#: ``--model-tool-call-type`` value (an SGLang parser name) -> format.
TOOL_CALL_TYPES: Mapping[str, ToolCallFormat] = {
    "qwen25": ToolCallFormat.JSON,
    "qwen": ToolCallFormat.JSON,
    "qwen3_coder": ToolCallFormat.XML,
    "step3p5": ToolCallFormat.XML,
    "glm47": ToolCallFormat.GLM,
    "glm45": ToolCallFormat.GLM,
    "minimax-m2": ToolCallFormat.MINIMAX_M2,
    "deepseekv31": ToolCallFormat.DEEPSEEK_V31,
    "deepseekv32": ToolCallFormat.DSML_V32,
    "deepseekv4": ToolCallFormat.DSML_V4,
    "minimax-m3": ToolCallFormat.MINIMAX_M3,
}


@attrs.frozen
class ThinkMarkers:
    """How a reasoning type writes reasoning: its tags and the rules at its edges (SGLang's detector for the type)."""

    start: str = THINK_START
    end: str = THINK_END
    tool_call_ends: bool = True
    """A ``<tool_call>`` ends reasoning that ``end`` has not closed (SGLang's ``Qwen3Detector`` ``tool_start_token``;
    the Qwen3.5 quirk)."""
    leading_end_dropped: bool = False
    """Outside reasoning, an output that starts with ``end`` has empty reasoning (MiniMax-M3: a turn that does not
    think opens with ``</mm:think>``; SGLang's ``MiniMaxM3Detector`` drops it)."""

    def prompt_opens(self, prompt_tail: str) -> bool:
        """Whether a prompt ending with ``prompt_tail`` leaves the output inside reasoning."""
        return prompt_tail.rstrip().endswith(self.start)


QWEN_THINK = ThinkMarkers()
NO_TOOL_END_THINK = ThinkMarkers(tool_call_ends=False)
MINIMAX_M3_THINK = ThinkMarkers(MM_THINK_START, MM_THINK_END, tool_call_ends=False, leading_end_dropped=True)

#: ``--model-reasoning-type`` value (an SGLang parser name) -> (whether the output always starts inside reasoning,
#: the type's markers).
REASONING_FORMATS: Mapping[str, tuple[bool, ThinkMarkers]] = {
    "qwen3": (False, QWEN_THINK),
    "qwen3-thinking": (True, QWEN_THINK),
    "glm45": (False, QWEN_THINK),
    "minimax": (True, QWEN_THINK),
    "minimax-m3": (False, MINIMAX_M3_THINK),
    # DeepSeek-V3.1 / V3.2: SGLang's DeepSeekV3 detector is Qwen3's; V4 and R1: the same markers, no tool-call end
    "deepseek-v3": (False, QWEN_THINK),
    "deepseek-v4": (False, NO_TOOL_END_THINK),
    "deepseek-r1": (True, NO_TOOL_END_THINK),
}
#: ``--model-reasoning-type`` value -> whether the output always starts inside reasoning.
REASONING_TYPES: Mapping[str, bool] = {name: forced for name, (forced, _) in REASONING_FORMATS.items()}


def strict_json_loads(text: str | bytes) -> Any:
    """``json.loads`` refusing ``NaN``/``Infinity`` (``ValueError``): tool-call arguments are strict JSON, whichever
    format's block they come from."""
    return json.loads(text, parse_constant=_refuse_constant)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def tool_call_format(name: str) -> ToolCallFormat:
    """The format of a ``--model-tool-call-type``; ``ValueError`` naming the choices otherwise."""
    try:
        return TOOL_CALL_TYPES[name]
    except KeyError:
        hint = " (Qwen3's JSON format is 'qwen25'; SGLang has no parser named 'qwen3')" if name == "qwen3" else ""
        raise ValueError(
            f"unknown tool-call type {name!r}{hint}; choose one of {', '.join(TOOL_CALL_TYPES)}"
        ) from None


def reasoning_forced_open(name: str) -> bool:
    """Whether a ``--model-reasoning-type`` starts every output inside reasoning; ``ValueError`` if unknown."""
    try:
        return REASONING_TYPES[name]
    except KeyError:
        raise ValueError(f"unknown reasoning type {name!r}; choose one of {', '.join(REASONING_TYPES)}") from None


def parameter_schemas(parameters: Any) -> Mapping[str, Any]:
    """Parameter name -> schema, for a tool's ``parameters``, as SGLang 0.5.23's ``Qwen3CoderDetector`` finds them
    (``_get_arguments_config``, ``get_schema_properties``): ``properties``; when there is none at the top level,
    the properties of the ``anyOf`` / ``oneOf`` / ``allOf`` branches (the first branch naming one wins); when
    there are none there either, and ``parameters`` has no ``properties`` key, ``parameters`` itself."""
    if not isinstance(parameters, Mapping):
        return {}
    properties = _schema_properties(parameters)
    return properties if properties or "properties" in parameters else parameters


def _schema_properties(schema: Any) -> dict[str, Any]:
    if not isinstance(schema, Mapping):
        return {}
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        return dict(properties)
    merged: dict[str, Any] = {}
    for keyword in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(keyword)
        if isinstance(branches, list):
            for branch in branches:
                for key, value in _schema_properties(branch).items():
                    merged.setdefault(key, value)
    return merged


@attrs.frozen
class ToolSpecs:
    """The tools a request offers: names and parameter schemas, plus the original list for SGLang.

    Built once per request from the body's ``tools``. Entries that are not function tools are ignored (SGLang's
    own lookup takes ``tool["function"]``, or the entry itself, and the first tool with a name wins).
    """

    properties: Mapping[str, Mapping[str, Any]]
    """Tool name -> parameter name -> schema (:func:`parameter_schemas`)."""
    openai_tools: tuple[Mapping[str, Any], ...] = ()
    """The request's tool list as given, sent to ``/parse_function_call``."""

    @classmethod
    def from_openai(cls, tools: Iterable[Any] | None) -> ToolSpecs:
        properties: dict[str, Mapping[str, Any]] = {}
        kept: list[Mapping[str, Any]] = []
        for tool in tools or ():
            if not isinstance(tool, Mapping):
                continue
            function = tool.get("function")
            if not isinstance(function, Mapping):
                function = tool
            name = function.get("name")
            if not isinstance(name, str) or not name:
                continue
            kept.append(tool)
            properties.setdefault(name, parameter_schemas(function.get("parameters")))
        return cls(properties=properties, openai_tools=tuple(kept))

    def __contains__(self, name: object) -> bool:
        return name in self.properties

    def __bool__(self) -> bool:
        return bool(self.properties)

    def parameter_schema(self, tool: str, parameter: str) -> Any:
        """The JSON schema of one parameter (``{}`` when unknown)."""
        return self.properties.get(tool, {}).get(parameter, {})


@attrs.frozen
class MessageFormat:
    """What to look for in a model's output: which tool-call format (None: no tool calls are parsed) and
    whether reasoning is parsed (and whether every output starts inside it), with which markers."""

    tool_call: ToolCallFormat | None
    reasoning: bool
    reasoning_forced_open: bool = False
    think: ThinkMarkers = QWEN_THINK

    @classmethod
    def from_types(cls, tool_call_type: str | None, reasoning_type: str | None) -> MessageFormat:
        """From ``--model-tool-call-type`` / ``--model-reasoning-type`` (None disables that parser)."""
        return cls(
            tool_call=None if tool_call_type is None else tool_call_format(tool_call_type),
            reasoning=reasoning_type is not None,
            reasoning_forced_open=reasoning_type is not None and reasoning_forced_open(reasoning_type),
            think=QWEN_THINK if reasoning_type is None else REASONING_FORMATS[reasoning_type][1],
        )

    def opens_in_reasoning(self, reasoning_open_at_start: bool) -> bool:
        """Whether the output starts inside reasoning (the prompt ended with the opening think tag)."""
        return self.reasoning and (reasoning_open_at_start or self.reasoning_forced_open)
