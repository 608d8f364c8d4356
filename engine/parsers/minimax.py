"""SGLang 0.5.23's ``minimax-m2`` tool-call parser (``MinimaxM2Detector.detect_and_parse``), non-streaming, as the
engine's ``/parse_function_call`` answers it. Written anew from 0.5.23's behaviour and held to answers recorded from
its own class (``tests/parsing/fixtures/sglang_minimax_0_5_23.json``).

The text before the first ``<minimax:tool_call>`` and between/after blocks is normal text; an unclosed block stays
normal text. In a block every ``<invoke name="F">...</invoke>`` (or an unclosed last one) is a call named ``F``
(stripped); each ``<parameter name="K">V</parameter>`` in it is an argument, ``V`` with line breaks stripped at both
ends and converted by the parameter's schema types (integer, number, boolean, object/array as JSON, string kept;
untyped parameters are strings). Calls to tools not offered are dropped.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .function_call import ToolCallItem, schema_properties

_FUNCTION = re.compile(r"<invoke name=\"(.*?)</invoke>|<invoke name=\"(.*)$", re.DOTALL)
_PARAMETER = re.compile(r"<parameter name=\"(.*?)</parameter>|<parameter name=\"(.*?)$", re.DOTALL)
_START, _END = "<minimax:tool_call>", "</minimax:tool_call>"
_PRIORITY = ("integer", "int", "number", "float", "boolean", "bool", "object", "array", "string", "str", "text")


def _types(schema: Any) -> list[str]:
    """``_extract_types_from_schema``: type / type lists, enum value types, anyOf/oneOf/allOf; default string."""
    if not isinstance(schema, dict):
        return ["string"]
    types: set[str] = set()
    kind = schema.get("type")
    if isinstance(kind, str):
        types.add(kind)
    elif isinstance(kind, list):
        types.update(t for t in kind if isinstance(t, str))
    enum = schema.get("enum")
    if isinstance(enum, list):
        for value in enum:
            types.add("null" if value is None else "boolean" if isinstance(value, bool) else "integer"
                      if isinstance(value, int) else "number" if isinstance(value, float) else "string"
                      if isinstance(value, str) else "array" if isinstance(value, list) else "object")
    for keyword in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(keyword), list):
            for choice in schema[keyword]:
                types.update(_types(choice))
    return list(types) or ["string"]


def _convert(value: str, types: list[str]) -> Any:
    """``_convert_param_value_with_types``."""
    lowered = [t.lower() for t in types]
    if value.lower() == "null" or "null" in lowered or value.lower() in ("null", "none", "nil"):
        return None
    for kind in _PRIORITY:
        if kind not in lowered:
            continue
        if kind in ("string", "str", "text"):
            return value
        try:
            if kind in ("integer", "int"):
                return int(value)
            if kind in ("number", "float"):
                number = float(value)
                return number if number != int(number) else int(number)
            if kind in ("boolean", "bool"):
                flag = value.lower().strip()
                if flag in ("true", "1", "yes", "on"):
                    return True
                if flag in ("false", "0", "no", "off"):
                    return False
                continue
            return json.loads(value)
        except (ValueError, TypeError, OverflowError):
            continue
    try:
        return json.loads(value)
    except ValueError:
        return value


def parse_minimax_m2(text: str, tools: list[Any]) -> tuple[str, list[ToolCallItem]]:
    indices = {tool.name: index for index, tool in enumerate(tools) if tool.name}  # _get_tool_indices
    normal: list[str] = []
    calls: list[ToolCallItem] = []
    cursor = 0
    while True:
        start = text.find(_START, cursor)
        if start == -1:
            normal.append(text[cursor:])
            break
        normal.append(text[cursor:start])
        end = text.find(_END, start)
        if end == -1:
            normal.append(text[start:])
            break
        block = text[start : end + len(_END)]
        cursor = end + len(_END)
        for match in _FUNCTION.findall(block):
            body = match[0] or match[1]
            if '">' not in body:
                continue
            name, body = body[: body.index('">')].strip(), body[body.index('">') + 2 :]
            # _parse_parameter: the first offered tool of that name with parameters
            schema = next((t.parameters for t in tools if t.name == name and t.parameters is not None), None)
            properties = schema_properties(schema) if isinstance(schema, dict) else {}
            arguments: dict[str, Any] = {}
            for parameter in _PARAMETER.findall(body):
                piece = parameter[0] or parameter[1]
                if '">' not in piece:
                    continue
                key = piece[: piece.index('">')].strip()
                value = piece[piece.index('">') + 2 :].lstrip("\n").rstrip("\n")
                arguments[key] = _convert(value, _types(properties.get(key)) if key in properties else ["string"])
            if name in indices:  # parse_base_json drops a call to a tool that was not offered
                calls.append(ToolCallItem(indices[name], name, json.dumps(arguments, ensure_ascii=False)))
    return "".join(normal), calls
