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


def split_blocks(text: str, start_tag: str, end_tag: str) -> tuple[list[str], list[str]]:
    """The text outside ``start_tag...end_tag`` blocks (an unclosed block stays text), and each block with its tags."""
    normal: list[str] = []
    blocks: list[str] = []
    cursor = 0
    while True:
        start = text.find(start_tag, cursor)
        if start == -1:
            normal.append(text[cursor:])
            return normal, blocks
        normal.append(text[cursor:start])
        end = text.find(end_tag, start)
        if end == -1:
            normal.append(text[start:])
            return normal, blocks
        cursor = end + len(end_tag)
        blocks.append(text[start:cursor])


def parse_minimax_m2(text: str, tools: list[Any]) -> tuple[str, list[ToolCallItem]]:
    indices = {tool.name: index for index, tool in enumerate(tools) if tool.name}  # _get_tool_indices
    normal, blocks = split_blocks(text, _START, _END)
    calls: list[ToolCallItem] = []
    for block in blocks:
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


# -- minimax-m3 ---------------------------------------------------------------------------------------------------
# SGLang 0.5.23's MinimaxM3Detector.detect_and_parse (function_call/minimax_m3.py), non-streaming. ``NS`` (the
# namespace token) followed by spacing before a ``<`` is first read as ``NS``. Text outside
# ``NS<tool_call>...NS</tool_call>`` blocks (and an unclosed block) is normal text. In a block, each
# ``NS<invoke name="F">...NS</invoke>`` is a call named ``F`` as written (not stripped); its body is an element tree,
# split at ``NS``: each piece stripped, ``</T>`` closes the open element (a mismatch or a stray closer raises),
# ``<T>text`` opens one (``T`` stripped). A leaf (text, or a scalar schema) is converted by its schema; an element
# without text is a container (a list for an ``array`` schema, else an object); an untyped parent whose first
# child is ``<item>`` becomes a list, and a named sibling after items folds them under ``"item"``; a repeated key
# turns into a list. Unknown tools are dropped; ``tool_index`` counts the block's calls. Anything that raises
# (``int(float("inf"))``, a mismatched tag) leaves the whole text as normal text with no calls.

M3_NS = "]<]minimax[>["
_M3_START, _M3_END = M3_NS + "<tool_call>", M3_NS + "</tool_call>"
_M3_INVOKE, _M3_INVOKE_END = M3_NS + '<invoke name="', M3_NS + "</invoke>"
_M3_SPACING = re.compile(re.escape(M3_NS) + r"[ \t\r\n]+(?=<)")
_M3_SCALARS = {"string", "str", "integer", "int", "number", "float", "boolean", "bool", "null"}


def _m3_types(schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return []
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind.lower()]
    return [t.lower() for t in kind if isinstance(t, str)] if isinstance(kind, list) else []


def _m3_untyped(schema: Any) -> bool:
    return not isinstance(schema, dict) or (
        not _m3_types(schema) and not any(k in schema for k in ("properties", "items", "prefixItems")))


def _m3_child_schema(parent: Any, tag: str, parent_value: Any) -> dict | None:
    if not isinstance(parent, dict):
        return None
    if "array" in _m3_types(parent) and tag == "item":
        index = len(parent_value) if isinstance(parent_value, list) else 0
        prefix = parent.get("prefixItems")
        if isinstance(prefix, list) and index < len(prefix):
            return prefix[index] if isinstance(prefix[index], dict) else None
        for key in ("additionalItems", "items"):
            if isinstance(parent.get(key), dict):
                return parent[key]
        if isinstance(prefix, list) and prefix:
            return prefix[-1] if isinstance(prefix[-1], dict) else None
        return None
    properties = schema_properties(parent)
    if tag in properties:
        return properties[tag] if isinstance(properties[tag], dict) else None
    extra = parent.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def _m3_leaf(value: str, schema: Any) -> Any:
    if _m3_untyped(schema):
        return {"true": True, "false": False, "null": None}.get(value.strip(), value)
    types = set(_m3_types(schema))
    nullable = "null" in types
    if types & {"string", "str"} and not nullable:
        return value
    if nullable and value in ("null", "Null", "NULL", ""):
        return None
    if types & {"integer", "int"}:
        try:
            return int(value)
        except (TypeError, ValueError):
            pass
    if types & {"number", "float"}:
        try:
            number = float(value)
            return number if number != int(number) else int(number)  # int(inf) raises OverflowError: not caught
        except (TypeError, ValueError):
            pass
    if types & {"boolean", "bool"}:
        flag = value.lower().strip()
        if flag in ("true", "1", "yes", "on"):
            return True
        if flag in ("false", "0", "no", "off"):
            return False
    return value


def _m3_assign(parent: Any, tag: str, value: Any) -> None:
    if isinstance(parent, list):
        parent.append(value)
    elif tag in parent:
        parent[tag] = parent[tag] + [value] if isinstance(parent[tag], list) else [parent[tag], value]
    else:
        parent[tag] = value


def _m3_parameters(body: str, schema: Any) -> Any:
    pieces = [p.strip() for p in body.split(M3_NS)]
    first = next((p for p in pieces if p), "")
    root: Any = [] if "array" in _m3_types(schema) and first.startswith("<item>") else {}
    stack: list[dict[str, Any]] = [{"tag": "", "schema": schema, "value": root, "listed": False}]
    for piece in pieces:
        if not piece:
            continue
        if piece.startswith("</"):
            gt = piece.find(">", 2)
            tag = (piece[2:gt] if gt != -1 else piece[2:]).strip()
            if len(stack) == 1 or stack[-1]["tag"] != tag:
                raise ValueError(f"unexpected closing tag {tag}")
            frame = stack.pop()
            _m3_assign(stack[-1]["value"], frame["tag"], frame["value"])
        elif piece.startswith("<"):
            gt = piece.index(">")  # ValueError when missing, as SGLang's str.index
            tag, text = piece[1:gt].strip(), piece[gt + 1 :]
            parent = stack[-1]
            if _m3_untyped(parent["schema"]):  # _infer_untyped_container
                if tag == "item":
                    if isinstance(parent["value"], dict) and not parent["value"]:
                        parent["value"], parent["listed"] = [], True
                elif parent["listed"]:
                    items = parent["value"]
                    parent["value"], parent["listed"] = {"item": items[0] if len(items) == 1 else items}, False
            child = _m3_child_schema(parent["schema"], tag, parent["value"])
            scalar = bool(set(_m3_types(child)) & _M3_SCALARS) and not set(_m3_types(child)) & {"object", "array"}
            if text or scalar:
                value: Any = _m3_leaf(text, child)
            else:
                value = [] if "array" in _m3_types(child) else {}
            stack.append({"tag": tag, "schema": child, "value": value, "listed": False})
    return stack[0]["value"]


def parse_minimax_m3(text: str, tools: list[Any]) -> tuple[str, list[ToolCallItem]]:
    original, text = text, _M3_SPACING.sub(M3_NS, text)
    indices = {tool.name: index for index, tool in enumerate(tools) if tool.name}
    normal, blocks = split_blocks(text, _M3_START, _M3_END)
    calls: list[ToolCallItem] = []
    try:
        for block in (b[len(_M3_START) : len(b) - len(_M3_END)] for b in blocks):
            in_block = 0
            at = 0
            while True:
                begin = block.find(_M3_INVOKE, at)
                close = block.find(_M3_INVOKE_END, begin)
                if begin == -1 or close == -1:
                    break
                invoke, at = block[begin:close], close + len(_M3_INVOKE_END)
                name_end = invoke.find('">', len(_M3_INVOKE))
                if name_end == -1:
                    continue
                name = invoke[len(_M3_INVOKE) : name_end]
                schema = next((t.parameters for t in tools if t.name == name), None)
                arguments = _m3_parameters(invoke[name_end + 2 :], schema if isinstance(schema, dict) else None)
                if name and name in indices:  # parse_base_json: unknown tools are dropped
                    calls.append(ToolCallItem(in_block, name, json.dumps(arguments, ensure_ascii=False)))
                    in_block += 1
    except Exception:  # noqa: BLE001 - SGLang returns the text untouched, with no calls
        return original, []
    return "".join(normal), calls
