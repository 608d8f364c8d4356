"""Non-streaming tool-call parsing for ``/parse_function_call`` (sglang-protocol.md §5.1, §5.4).

* ``qwen25`` / ``qwen`` (Qwen2.5, Qwen3): ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, calls
  separated by ``\\n``; normal text is what precedes the first ``<tool_call>\\n``, stripped.
* ``qwen3_coder`` / ``step3p5`` (Qwen3-Coder, Qwen3.5, Qwen3.6): XML ``<function=f><parameter=p>\\nv\\n</parameter>``,
  values converted with the tool's JSON-schema type; unclosed ``<parameter=`` / ``<function=`` tolerated.

Calls naming a function that is not among ``tools`` are dropped (SGLang's default without
``SGLANG_FORWARD_UNKNOWN_TOOLS``). ``tool_index`` is the function's position in ``tools``.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

import attrs


@attrs.frozen
class ToolCallItem:
    """One parsed call; ``parameters`` is a JSON string (``core_types.ToolCallItem``)."""

    tool_index: int
    name: str
    parameters: str

    def to_json(self) -> dict[str, Any]:
        return {"tool_index": self.tool_index, "name": self.name, "parameters": self.parameters}


def _functions(tools: list[Any]) -> list[dict[str, Any]]:
    functions = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict):
            function = tool if isinstance(tool, dict) else {}
        functions.append(function)
    return functions


def _tool_index(functions: list[dict[str, Any]], name: Any) -> int | None:
    for index, function in enumerate(functions):
        if function.get("name") == name:
            return index
    return None


def _parse_qwen25(text: str, functions: list[dict[str, Any]]) -> tuple[str, list[ToolCallItem]]:
    start, end = "<tool_call>\n", "\n</tool_call>"
    index = text.find(start)
    if index == -1:
        return text, []
    normal_text = text[:index].strip()
    calls: list[ToolCallItem] = []
    for body in re.findall(re.escape(start) + r"(.*?)" + re.escape(end), text, re.DOTALL):
        try:
            parsed = json.loads(body.strip())
        except ValueError:
            continue
        for action in parsed if isinstance(parsed, list) else [parsed]:
            if not isinstance(action, dict):
                continue
            name = action.get("name")
            tool_index = _tool_index(functions, name) if name else None
            if tool_index is None:
                continue
            arguments = action.get("parameters") or action.get("arguments", {})
            calls.append(ToolCallItem(tool_index, name, json.dumps(arguments, ensure_ascii=False)))
    return normal_text, calls


def _convert_value(value: str, schema: Any) -> Any:
    """``Qwen3CoderDetector._convert_param_value``: by the schema ``type``; strings stay strings."""
    if value.lower() == "null":
        return None
    kind = schema.get("type", "string") if isinstance(schema, dict) else "string"
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    kind = str(kind).strip().lower()
    if kind in ("string", "str", "text", "varchar", "char", "enum"):
        return value
    if kind.startswith(("int", "uint", "long", "short", "unsigned")):
        try:
            return int(value)
        except ValueError:
            return value
    if kind.startswith(("num", "float", "double")):
        try:
            number = float(value)
        except ValueError:
            return value
        return int(number) if number.is_integer() and "." not in value and "e" not in value.lower() else number
    if kind in ("boolean", "bool", "binary"):
        lowered = value.lower()
        return lowered == "true" if lowered in ("true", "false") else value
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return value


def _strip_one_newline(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


_FUNCTION = re.compile(r"<function=(.*?)(?:>|$)(.*?)(?:</function>|$)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=(.*?)(?:>|$)(.*?)(?=</parameter>|<parameter=|</function>|$)", re.DOTALL)


def _parse_qwen3_coder(text: str, functions: list[dict[str, Any]]) -> tuple[str, list[ToolCallItem]]:
    index = text.find("<tool_call>")
    if index == -1:
        return text, []
    normal_text = text[:index].strip()
    calls: list[ToolCallItem] = []
    for block in re.findall(r"<tool_call>(.*?)(?:</tool_call>|$)", text[index:], re.DOTALL):
        for name, body in _FUNCTION.findall(block):
            name = name.strip()
            tool_index = _tool_index(functions, name)
            if tool_index is None:
                continue
            parameters = functions[tool_index].get("parameters")
            properties = parameters.get("properties", {}) if isinstance(parameters, dict) else {}
            properties = properties if isinstance(properties, dict) else {}
            arguments: dict[str, Any] = {}
            for key, raw in _PARAMETER.findall(body):
                key = key.strip()
                arguments[key] = _convert_value(_strip_one_newline(raw), properties.get(key, {}))
            calls.append(ToolCallItem(tool_index, name, json.dumps(arguments, ensure_ascii=False)))
    return normal_text, calls


#: Parser name -> implementation (names from ``ToolCallParserEnum``).
TOOL_CALL_PARSERS = {
    "qwen25": _parse_qwen25,
    "qwen": _parse_qwen25,
    "qwen3_coder": _parse_qwen3_coder,
    "step3p5": _parse_qwen3_coder,
}


def parse_function_call(text: str, parser: str, tools: list[Any]) -> tuple[str, list[ToolCallItem]]:
    """``(normal_text, calls)``; with no tools the text comes back untouched. Unknown parser: ``ValueError``."""
    if parser not in TOOL_CALL_PARSERS:
        raise ValueError(f"Unsupported tool_call_parser: {parser!r}; supported: {', '.join(TOOL_CALL_PARSERS)}")
    if not tools:
        return text, []
    return TOOL_CALL_PARSERS[parser](text, _functions(tools))
