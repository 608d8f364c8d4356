"""GLM tool-call parsing for ``/parse_function_call`` as SGLang 0.5.23 does it: ``glm47`` (``Glm47MoeDetector``,
GLM-4.7 / GLM-5.x) and ``glm45`` (``Glm4MoeDetector``, GLM-4.5 / 4.6). Written anew from the behaviour of those
classes (``function_call/glm47_moe_detector.py``, ``glm4_moe_detector.py``, ``base_format_detector.py``) and held to
it by recorded outputs of the classes themselves (``tests/parsing/fixtures/sglang_glm_0_5_23.jsonl.gz``).

``glm47``: with no ``<tool_call>`` the text comes back untouched. Otherwise ``normal_text`` is all the text outside
``<tool_call>.*?</tool_call>`` blocks, joined and stripped. In each block the name is the text before the first
``<arg_key>`` (not stripped; a name that is not an offered tool drops the call), the arguments are the
``<arg_key>K</arg_key>`` whitespace ``<arg_value>V</arg_value>`` pairs found anywhere in the rest (keys stripped).
A value's type comes from the tool's schema (``type``, ``enum``/``const``, ``anyOf``/``oneOf`` unions, ``allOf``);
it is read by ``parse_arguments``: JSON; else JSON after unescaping; else, for a string (or untyped) parameter, the
text without one pair of surrounding quotes; else a Python literal; else the text. A string-typed parameter keeps a
parsed string, else the raw text; an untyped one keeps whatever parsed. ``tool_index`` is the tool's position in
``tools`` (the last tool of that name).

``glm45``: ``normal_text`` is only the text before the first ``<tool_call>``, stripped; the name runs to the first
newline (a block without one is skipped); the value type is the schema's primary type, and a string-typed value
that parsed to an object or array is written back as JSON, any other non-string as ``str()``.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any

from .function_call import ToolCallItem, infer_type, schema_properties

_START = "<tool_call>"
_BLOCK = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)
_DETAIL_47 = re.compile(r"<tool_call>(.*?)(<arg_key>.*?)?</tool_call>", re.DOTALL)
_DETAIL_45 = re.compile(r"<tool_call>(.*?)(?:\\n|\n)(.*)</tool_call>", re.DOTALL)
_ARG = re.compile(r"<arg_key>(.*?)</arg_key>(?:\\n|\s)*<arg_value>(.*?)</arg_value>", re.DOTALL)


def _literal(value: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.literal_eval(value)


def _to_number(value: str) -> Any:
    try:
        return float(value) if "." in value or "e" in value.lower() else int(value)
    except (ValueError, AttributeError):
        return value


def _coerce(value: Any, arg_type: str | None, integer_too: bool) -> Any:
    if isinstance(value, str):
        if arg_type == "integer" and integer_too:
            try:
                return int(value)
            except ValueError:
                return value
        if arg_type == "number":
            return _to_number(value)
    return value


def parse_arguments(raw: str, arg_type: str | None, *, integer_too: bool = True) -> tuple[Any, bool]:
    """``parse_arguments`` of the detectors (``integer_too``: GLM-4.7's also coerces integer-typed strings)."""
    try:
        return _coerce(json.loads(raw), arg_type, integer_too), True
    except ValueError:
        pass
    try:
        return _coerce(json.loads(json.loads('{"tmp": "' + raw + '"}')["tmp"]), arg_type, integer_too), True
    except (ValueError, KeyError):
        pass
    if arg_type == "string":
        if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
            return raw[1:-1], True
        return raw, True
    try:
        return _literal(raw), True
    except Exception:  # noqa: BLE001 - literal_eval raises many kinds; SGLang catches ValueError/SyntaxError
        pass
    return raw, True


def _json_type(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return "integer"
    return {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), "string")


def _types(schema: Any) -> set[str] | None:
    """The JSON types a (property) schema admits, as ``_argument_types`` finds them (no ``$ref``)."""
    if not isinstance(schema, dict):
        return None
    constraints = []
    kind = schema.get("type")
    if isinstance(kind, str):
        constraints.append({kind, "integer"} if kind == "number" else {kind})
    elif isinstance(kind, list):
        constraints.append(set(kind) | ({"integer"} if "number" in kind else set()))
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if isinstance(values, list):
        constraints.append({_json_type(v) for v in values})
    for keyword in ("anyOf", "oneOf"):
        if isinstance(schema.get(keyword), list):
            alternatives = [_types(branch) for branch in schema[keyword]]
            if alternatives and all(a is not None for a in alternatives):
                constraints.append(set().union(*alternatives))
    if isinstance(schema.get("allOf"), list):
        constraints.extend(t for t in map(_types, schema["allOf"]) if t is not None)
    return set.intersection(*constraints) if constraints else None


def _tool_schema(name: str, tools: list[Any]) -> Any:
    return next((tool.parameters for tool in tools if tool.name == name), None)


def _indices(tools: list[Any]) -> dict[Any, int]:
    return {tool.name: index for index, tool in enumerate(tools) if tool.name}


def _argument_types(schema: Any, key: str) -> set[str] | None:
    if not isinstance(schema, dict):
        return None
    constraints = [t for t in [_types(schema.get("properties", {}).get(key))] if t is not None]
    for keyword in ("anyOf", "oneOf"):
        if isinstance(schema.get(keyword), list):
            alternatives = [_argument_types(branch, key) for branch in schema[keyword]]
            if alternatives and all(a is not None for a in alternatives):
                constraints.append(set().union(*alternatives))
    if isinstance(schema.get("allOf"), list):
        constraints.extend(t for t in (_argument_types(b, key) for b in schema["allOf"]) if t is not None)
    return set.intersection(*constraints) if constraints else None


def _glm47_arguments(pairs: list[tuple[str, str]], name: str, tools: list[Any]) -> dict[str, Any]:
    schema = _tool_schema(name, tools)
    arguments: dict[str, Any] = {}
    for key, raw in pairs:
        key = key.strip()
        types = _argument_types(schema, key)
        arg_type = "number" if types == {"number", "integer"} else (next(iter(types)) if types and len(types) == 1
                                                                     else None)
        parsed, _ = parse_arguments(raw, arg_type or "string")
        if arg_type == "string":
            arguments[key] = parsed if isinstance(parsed, str) else raw
        elif arg_type is None and types is not None and _json_type(parsed) not in types and "string" in types:
            arguments[key] = raw
        else:
            arguments[key] = parsed
    return arguments


def _calls(found: list[tuple[str, dict[str, Any]]], tools: list[Any]) -> list[ToolCallItem]:
    indices = _indices(tools)
    return [ToolCallItem(indices[name], name, json.dumps(arguments, ensure_ascii=False))
            for name, arguments in found if name and name in indices]


def parse_glm47(text: str, tools: list[Any]) -> tuple[str, list[ToolCallItem]]:
    if _START not in text:
        return text, []
    normal, last = [], 0
    blocks = []
    for match in _BLOCK.finditer(text):
        normal.append(text[last : match.start()])
        last = match.end()
        blocks.append(match.group())
    normal.append(text[last:])
    found = []
    try:
        for block in blocks:
            detail = _DETAIL_47.search(block)
            if detail is None:
                continue
            name, args = detail.group(1) or "", detail.group(2) or ""
            found.append((name, _glm47_arguments(_ARG.findall(args), name, tools) if args else {}))
        return "".join(normal).strip(), _calls(found, tools)
    except Exception:  # noqa: BLE001 - SGLang logs and returns the text without calls
        return text, []


def parse_glm45(text: str, tools: list[Any]) -> tuple[str, list[ToolCallItem]]:
    first = text.find(_START)
    if first == -1:
        return text, []
    found = []
    try:
        for block in _BLOCK.findall(text):
            detail = _DETAIL_45.search(block)
            if detail is None:
                continue
            name, args = detail.group(1) or "", detail.group(2) or ""
            properties = schema_properties(_tool_schema(name, tools)) if name in _indices(tools) else {}
            arguments: dict[str, Any] = {}
            for key, raw in _ARG.findall(args):
                key = key.strip()
                arg_type = infer_type(properties[key]) if key in properties else None
                parsed, _ = parse_arguments(raw, arg_type, integer_too=False)
                if arg_type == "string" and not isinstance(parsed, str):
                    parsed = json.dumps(parsed, ensure_ascii=False) if isinstance(parsed, (dict, list)) else str(parsed)
                arguments[key] = parsed
            found.append((name, arguments))
        return text[:first].strip(), _calls(found, tools)
    except Exception:  # noqa: BLE001 - SGLang logs and returns the text without calls
        return text, []
