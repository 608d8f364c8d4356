"""Constrained decoding for ``tool_choice`` and ``response_format``, exactly as SGLang 0.5.23's OpenAI server asks
its scheduler for it, so that a model behind this proxy decodes under the same grammar as behind SGLang's own
``/v1/chat/completions``.

References (the ``sglang`` 0.5.23 wheel, ``sglang/srt/...``; ``xgrammar`` 0.2.7, which it pins):

- ``entrypoints/openai/protocol.py`` ``ChatCompletionRequest.to_sampling_params`` (L1185-1290): ``response_format``
  ``json_schema`` -> ``sampling_params["json_schema"] = json.dumps(schema)`` (L1238-1247, through
  ``sglang/utils.py::convert_json_schema_to_str``, a plain ``json.dumps``); ``json_object`` ->
  ``'{"type": "object"}'`` (L1248-1249). A tool-call constraint together with one of those: ``required`` or a
  named choice is a ``ValueError`` (400, L1263-1272); ``auto`` keeps the output constraint and drops the tool one
  (L1273). Otherwise the tool-call constraint is sent: a structural tag as ``json.dumps(tag.model_dump(by_alias=
  True))`` (L1276-1279).
- ``entrypoints/openai/serving_chat.py`` ``_process_messages`` (L1793-1925): only when there are tools and
  ``tool_choice != "none"`` is a constraint built (L1861), by ``FunctionCallParser.get_structure_constraint`` with
  ``thinking_mode = thinking and reasoning_parser is None`` (L1831; False behind a reasoning parser, as here);
  with a reasoning parser the think tokens are removed from every ``excludes`` list (L1887-1901,
  ``function_call/utils.py::strip_structural_tag_excludes``).
- ``function_call/function_call_parser.py`` ``get_structure_constraint`` (L324-431): a constraint for
  ``required`` and a named choice, and for ``auto`` only when some tool is ``strict`` (L342-345;
  ``SGLANG_TOOL_STRICT_LEVEL`` defaults to off, ``environ.py`` L812). A model-native xgrammar tag first (L397-405):
  ``qwen3_coder`` has one (``qwen3_coder_detector.py`` L482, ``"qwen_3_coder"``); ``qwen25`` has none and gets
  the legacy structural tag (L407-414, ``get_legacy_structural_tag`` L260-310) from its ``structure_info``
  (``qwen25_detector.py`` L115-120).
- ``xgrammar/builtin_structural_tag.py`` ``get_qwen_3_5_structural_tag`` (L1298-1428, registered as
  ``qwen_3_coder``), ``normalize_tool_choice`` (a named choice keeps that tool only) and
  ``_get_function_parameters`` (``strict: false`` or no ``parameters`` -> ``true``, any JSON);
  ``xgrammar/structural_tag.py`` for the field order and defaults of the dumped models.

What the proxy serves: the two tool-call formats of its build models (``qwen25`` for Qwen3, ``qwen3_coder`` for
Qwen3.5), always with a reasoning parser. ``response_format`` ``structural_tag`` and SGLang's ``regex`` /
``ebnf`` request extras are not served (the former is refused, the latter are ignored like unknown fields).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from proxy.api.errors import ApiError
from proxy.api.fields import check_json, json_type, shown

log = logging.getLogger(__name__)

#: ``response_format: {"type": "json_object"}`` as SGLang sends it (protocol.py L1249)
JSON_OBJECT_SCHEMA = '{"type": "object"}'
#: ``response_format`` types SGLang's ``ResponseFormat`` accepts (protocol.py L248-250)
RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema")
#: the tool-call formats (SGLang parser names) whose constraint this module builds -> the detector it is built as:
#: SGLang's aliases share their detector's (function_call_parser.py L103-108: ``qwen`` is Qwen25Detector,
#: ``step3p5`` Qwen3CoderDetector)
CONSTRAINED_FORMATS: Mapping[str, str] = {"qwen25": "qwen25", "qwen": "qwen25", "qwen3_coder": "qwen3_coder",
                                          "step3p5": "qwen3_coder"}
#: the think tokens of the qwen3 reasoning parser, which its presence strips from structural-tag ``excludes``
THINK_TOKENS = ("<think>", "</think>")


@attrs.frozen
class ResponseFormat:
    """A validated ``response_format``: ``type`` text, json_object or json_schema (then ``schema`` is set)."""

    type: str
    #: the JSON schema of a ``json_schema`` format
    schema: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, value: Any) -> ResponseFormat | None:
        """OpenAI's shapes: ``{"type": "text" | "json_object"}``, ``{"type": "json_schema", "json_schema": {"name",
        "schema", "description"?, "strict"?}}``; also SGLang's flat ``{"type": "json_schema", "schema": {...}}``
        (protocol.py ``set_json_schema`` L1156-1183, including its removal of a ``strict`` property from that
        schema). Raises ``ApiError`` (400)."""
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ApiError.invalid_request(
                f"response_format must be an object, not {json_type(value)}", "response_format"
            )
        kind = value.get("type")
        if kind == "structural_tag":
            raise ApiError.unsupported_parameter(
                "response_format of type 'structural_tag' is not supported; use json_schema or json_object",
                "response_format.type",
            )
        if kind not in RESPONSE_FORMAT_TYPES:
            raise ApiError.invalid_request(
                f"response_format.type must be 'text', 'json_object' or 'json_schema', not {shown(kind)}",
                "response_format.type",
            )
        if kind != "json_schema":
            return cls(kind)
        spec = value.get("json_schema")
        if not spec:
            spec = _flat_json_schema(value.get("schema"))
        if not isinstance(spec, dict):
            raise ApiError.invalid_request(
                f"response_format.json_schema must be an object, not {json_type(spec)}", "response_format.json_schema"
            )
        name = spec.get("name")
        if not isinstance(name, str):
            raise ApiError.invalid_request(
                f"response_format.json_schema.name must be a string, not {json_type(name)}",
                "response_format.json_schema.name",
            )
        description = spec.get("description")
        if description is not None and not isinstance(description, str):
            raise ApiError.invalid_request(
                f"response_format.json_schema.description must be a string, not {json_type(description)}",
                "response_format.json_schema.description",
            )
        strict = spec.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise ApiError.invalid_request(
                f"response_format.json_schema.strict must be a boolean, not {json_type(strict)}",
                "response_format.json_schema.strict",
            )
        schema = spec.get("schema")
        if schema is None:
            # SGLang's own message (serving_chat.py _validate_request).
            raise ApiError.invalid_request(
                "schema_ is required for json_schema response format request.", "response_format.json_schema.schema"
            )
        if not isinstance(schema, dict):
            raise ApiError.invalid_request(
                f"response_format.json_schema.schema must be a JSON-schema object, not {json_type(schema)}",
                "response_format.json_schema.schema",
            )
        return cls(kind, check_json(schema, "response_format.json_schema.schema"))

    @property
    def constrains(self) -> bool:
        """Whether the format constrains decoding (``text`` does not)."""
        return self.type != "text"

    def sampling_params(self) -> dict[str, str]:
        """The ``sampling_params`` keys SGLang sends for this format (protocol.py L1238-1249)."""
        if self.type == "json_schema":
            return {"json_schema": json.dumps(self.schema)}
        if self.type == "json_object":
            return {"json_schema": JSON_OBJECT_SCHEMA}
        return {}


def _flat_json_schema(schema: Any) -> Any:
    """SGLang's legacy ``{"type": "json_schema", "schema": {...}}``: the name is the schema's title, and a
    ``strict`` property, if the schema declares one, is taken out of it (protocol.py L1164-1181)."""
    if not schema or not isinstance(schema, dict):
        return None
    schema = dict(schema)
    properties = schema.get("properties")
    if isinstance(properties, dict) and "strict" in properties:
        schema["properties"] = {key: value for key, value in properties.items() if key != "strict"}
    return {"name": schema.get("title", "Schema"), "schema": schema}


def is_forcing(mode: str | None) -> bool:
    """``tool_choice`` ``required`` or a named function: a call is required."""
    return mode in ("required", "function")


def tool_call_constraint(
    tools: Sequence[Mapping[str, Any]] | None,
    mode: str | None,
    name: str | None,
    *,
    parallel_tool_calls: bool,
    tool_call_type: str,
    reasoning_parser: bool = True,
) -> tuple[str, str] | None:
    """The ``(sampling_params key, value)`` SGLang 0.5.23 builds for the tool choice, or None.

    ``mode``/``name``: the request's ``tool_choice`` (None: ``auto`` with tools, as SGLang's default). ``tools``:
    every declared tool (the constraint covers them all even for a named choice in the ``qwen25`` format; the
    ``qwen_3_coder`` tag keeps the named one). Raises ``ApiError`` where SGLang answers 400.
    """
    if not tools or mode == "none":
        return None
    mode = mode or "auto"
    functions = [tool["function"] for tool in tools]
    any_strict = any(function.get("strict") for function in functions)
    if not is_forcing(mode) and not any_strict:
        return None
    detector = CONSTRAINED_FORMATS.get(tool_call_type)
    if detector == "qwen25":
        return _legacy_structural_tag(functions, forcing=is_forcing(mode))
    if detector == "qwen3_coder":
        if mode == "function":
            functions = [function for function in functions if function["name"] == name]
        return ("structural_tag", json.dumps(_qwen3_coder_tag(
            functions, forced=mode == "function", at_least_one=mode == "required",
            parallel_tool_calls=parallel_tool_calls, excludes=[] if reasoning_parser else list(THINK_TOKENS),
        )))
    # The other families' formats (GLM, DeepSeek, MiniMax): SGLang builds each its own grammar (a GLM EBNF of the
    # whole answer, xgrammar's native deepseek tags, a JSON-array schema for MiniMax; function_call_parser.py
    # L324-431), which this proxy does not build yet. A forced call cannot be served as SGLang serves it: refused.
    if is_forcing(mode):
        raise ApiError.unsupported_parameter(
            f"tool_choice 'required' or a named tool needs SGLang's decoding constraint for the {tool_call_type} "
            "tool-call format, which this proxy does not build (it does for the Qwen formats); use "
            "tool_choice 'auto'", "tool_choice")
    # ``auto`` with a strict tool: served without the constraint (the OpenAI Agents SDK marks every tool strict);
    # the model's calls are parsed as it wrote them.
    if tool_call_type not in _UNCONSTRAINED_WARNED:
        _UNCONSTRAINED_WARNED.add(tool_call_type)
        log.warning("strict tools are served without SGLang's decoding constraint for the %s tool-call format "
                    "(not built by this proxy); their calls are parsed as the model writes them", tool_call_type)
    return None


# The formats whose unconstrained strict tools were already logged (once per process each).
_UNCONSTRAINED_WARNED: set[str] = set()


def _legacy_structural_tag(functions: Sequence[Mapping[str, Any]], *, forcing: bool) -> tuple[str, str] | None:
    """``FunctionCallParser.get_legacy_structural_tag(at_least_one=forcing)`` with the qwen25 ``structure_info``:
    one structure per tool, its schema the parameters of a ``strict`` tool, else ``{}`` (any JSON).

    Conflicting ``$defs`` across the tools make SGLang fall back to its JSON-schema constraint, which refuses them
    (function_call/utils.py ``_get_tool_schema_defs``): a 400 for a required call, no constraint for ``auto``."""
    try:
        _check_schema_defs(functions)
    except ApiError:
        if forcing:
            raise
        return None
    structures = [
        {
            "begin": '<tool_call>\n{"name":"' + function["name"] + '", "arguments":',
            "schema": (function.get("parameters") if function.get("strict") else None) or {},
            "end": "}\n</tool_call>",
        }
        for function in functions
    ]
    tag = {"type": "structural_tag", "structures": structures, "triggers": ["<tool_call>"], "at_least_one": forcing}
    return ("structural_tag", json.dumps(tag))


def _check_schema_defs(functions: Sequence[Mapping[str, Any]]) -> None:
    seen: dict[str, Any] = {}
    for index, function in enumerate(functions):
        defs = (function.get("parameters") or {}).get("$defs", {})
        if not isinstance(defs, dict):
            raise ApiError.invalid_request(
                f"tools[{index}].function.parameters.$defs must be an object", f"tools[{index}].function.parameters"
            )
        for def_name, schema in defs.items():
            if def_name in seen and seen[def_name] != schema:
                # SGLang's own message.
                raise ApiError.invalid_request(
                    f"Tool definition '{def_name}' has multiple schemas, which is not supported.", "tools"
                )
            seen[def_name] = schema


def _qwen3_coder_tag(
    functions: Sequence[Mapping[str, Any]],
    *,
    forced: bool,
    at_least_one: bool,
    parallel_tool_calls: bool,
    excludes: list[str],
) -> dict[str, Any]:
    """``xgrammar.get_model_structural_tag("qwen_3_coder", ..., reasoning=False)`` dumped with its defaults."""
    tags = [
        {
            "type": "tag",
            "begin": f"<tool_call>\n<function={function['name']}>\n",
            "content": {
                "type": "json_schema",
                "json_schema": _xgrammar_parameters(function),
                "style": "qwen_xml",
                "any_order": False,
                "max_whitespace_cnt": None,
            },
            "end": "\n</function>\n</tool_call>",
        }
        for function in functions
    ]
    if forced:
        return {"type": "structural_tag", "format": tags[0]}
    return {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["<tool_call>\n<function="],
            "tags": tags,
            "at_least_one": at_least_one,
            "stop_after_first": not parallel_tool_calls,
            "excludes": excludes,
        },
    }


def _xgrammar_parameters(function: Mapping[str, Any]) -> Any:
    """xgrammar's ``_get_function_parameters``: ``true`` (any JSON) for ``strict: false`` or no parameters."""
    if function.get("strict") is False or function.get("parameters") is None:
        return True
    return function["parameters"]


def constraint_params(
    tools: Sequence[Mapping[str, Any]] | None,
    mode: str | None,
    name: str | None,
    response_format: ResponseFormat | None,
    *,
    parallel_tool_calls: bool,
    tool_call_type: str,
    reasoning_parser: bool = True,
) -> dict[str, str]:
    """Every constrained-decoding key SGLang 0.5.23 puts into ``sampling_params`` for this request (protocol.py
    L1238-1288): the ``response_format`` constraint, else the tool-call one. Raises ``ApiError`` (400) where
    SGLang refuses the combination."""
    params = response_format.sampling_params() if response_format is not None else {}
    tool_constraint = tool_call_constraint(
        tools, mode, name, parallel_tool_calls=parallel_tool_calls, tool_call_type=tool_call_type,
        reasoning_parser=reasoning_parser,
    )
    if tool_constraint is None:
        return params
    if params:
        if is_forcing(mode):
            raise conflict_error()
        return params  # SGLang: "Constrained decoding is not compatible with tool calls." (a warning)
    key, value = tool_constraint
    return {key: value}


def conflict_error() -> ApiError:
    """SGLang's refusal of a forced tool call together with an output constraint (protocol.py L1263-1272)."""
    return ApiError.invalid_request(
        "tool_choice 'required' or a named tool cannot be combined with response_format, regex, or ebnf: the "
        "tool-call constraint and the output constraint cannot both be honored.",
        "tool_choice",
    )


__all__ = [
    "CONSTRAINED_FORMATS", "JSON_OBJECT_SCHEMA", "ResponseFormat", "conflict_error", "constraint_params", "is_forcing",
    "tool_call_constraint",
]
