"""What one ``<tool_call>...</tool_call>`` block means: its calls, or why it stays content.

Pure and synchronous; never raises on any text. The same function decides blocks for the non-streaming parser
and for the streaming one, so the two cannot disagree on a block.

JSON (``qwen25``): the body, stripped, is ``{"name": ..., "arguments": {...}}`` or a list of such objects
(SGLang also accepts the key ``parameters``, and so do we). Arguments given as a string holding a JSON object are
accepted (SGLang would pass the string through, which no client can use).

XML (``qwen3_coder``)::

    <function=NAME>
    <parameter=P>
    VALUE
    </parameter>
    </function>

One leading and one trailing newline of a value are stripped and the value is converted by the type of its
parameter's schema exactly as SGLang 0.5.23's ``Qwen3CoderDetector`` does (:func:`convert_xml_value`: ``null`` ->
None, integer / number / boolean parsed, strings kept, objects and arrays tried as JSON, anything else as a Python
literal). A missing ``</parameter>`` is tolerated
(the value ends at the next ``<parameter=`` or at ``</function>``), as in SGLang. Stricter than SGLang: a
function must end with ``</function>``, and only whitespace may stand between the elements.

A block is all or nothing: if any call in it is malformed the whole block is ``malformed_tool_call``; if all are
well-formed but one names a tool that was not offered, the block is ``unknown_tool``. Either way it stays content.
GLM (``glm47`` / ``glm45``): ``proxy/parsing/glm_blocks.py``; MiniMax-M2 (``minimax-m2``, ``<minimax:tool_call>``
blocks): ``proxy/parsing/minimax_blocks.py``; MiniMax-M3 (``minimax-m3``): ``proxy/parsing/minimax_m3_blocks.py``.
DeepSeek (``deepseekv31``, ``deepseekv32``, ``deepseekv4``): ``proxy/parsing/deepseek_blocks.py``.

Accepted arguments are always strict JSON objects: a non-finite number converted from an XML value stays a
string; in JSON bodies ``NaN`` / ``Infinity`` make the block malformed.
"""

from __future__ import annotations

import ast
import json
import warnings
from collections.abc import Mapping
from typing import Any

import attrs

from proxy.parsing.deepseek_blocks import dsml_calls, v31_calls
from proxy.parsing.formats import ToolCallFormat, ToolSpecs, strict_json_loads
from proxy.parsing.glm_blocks import glm_calls
from proxy.parsing.minimax_blocks import minimax_calls
from proxy.parsing.minimax_m3_blocks import minimax_m3_calls
from proxy.parsing.parsed import ParseFlag

FUNCTION_START = "<function="
FUNCTION_END = "</function>"
PARAMETER_START = "<parameter="
PARAMETER_END = "</parameter>"


@attrs.frozen
class BlockDecision:
    """The calls a block holds, or none (then the block stays content), and the flags it adds to the step."""

    calls: tuple[tuple[str, str], ...]
    """``(name, arguments_json)`` in output order; empty when the block stays content."""
    flags: frozenset[ParseFlag] = frozenset()

    @property
    def accepted(self) -> bool:
        return bool(self.calls)

    @classmethod
    def accept(cls, calls: tuple[tuple[str, str], ...]) -> BlockDecision:
        return cls(calls=calls)

    @classmethod
    def reject(cls, flag: ParseFlag) -> BlockDecision:
        return cls(calls=(), flags=frozenset({flag}))


MALFORMED = BlockDecision.reject(ParseFlag.MALFORMED_TOOL_CALL)
UNKNOWN = BlockDecision.reject(ParseFlag.UNKNOWN_TOOL)


class _Malformed(Exception):
    """Internal: the block does not parse."""


def decide_block(raw: str, fmt: ToolCallFormat, tools: ToolSpecs, *, closed: bool = True) -> BlockDecision:
    """Decide ``raw`` (the block with its ``<tool_call>`` and, when ``closed``, its ``</tool_call>``).

    A block still open at the end of the output (``closed=False``) is never a call: the generation stopped
    inside it, and a truncated call must not be executed.
    """
    open_tag, close_tag = fmt.markers
    if not closed or not (raw.startswith(open_tag) and raw.endswith(close_tag)):
        return MALFORMED
    inner = raw[len(open_tag) : len(raw) - len(close_tag)]
    try:
        if fmt is ToolCallFormat.GLM:
            calls = glm_calls(inner, tools, schema_type)
        elif fmt is ToolCallFormat.MINIMAX_M2:
            calls = minimax_calls(inner, tools, schema_type)
        elif fmt is ToolCallFormat.DEEPSEEK_V31:
            calls = v31_calls(inner)
        elif fmt in (ToolCallFormat.DSML_V32, ToolCallFormat.DSML_V4):
            calls = dsml_calls(inner)
        elif fmt is ToolCallFormat.MINIMAX_M3:
            calls = minimax_m3_calls(inner, tools)
        else:
            calls = _json_calls(inner) if fmt is ToolCallFormat.JSON else _xml_calls(inner, tools)
        if not calls:
            raise _Malformed
        if any(name not in tools for name, _ in calls):
            return UNKNOWN
        return BlockDecision.accept(tuple((name, dump_arguments(arguments)) for name, arguments in calls))
    except (_Malformed, ValueError, TypeError, RecursionError, MemoryError):
        return MALFORMED


def dump_arguments(arguments: Mapping[str, Any]) -> str:
    """Arguments as SGLang writes them (``json.dumps(..., ensure_ascii=False)``), but always strict JSON and
    always encodable as UTF-8 (lone surrogates from ``\\ud800`` escapes are written as escapes)."""
    text = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(arguments, ensure_ascii=True, allow_nan=False)
    return text


def arguments_object(arguments_json: str) -> dict[str, Any] | None:
    """The object an ``arguments_json`` string encodes, or None if it is not strict JSON for an object."""
    try:
        value = strict_json_loads(arguments_json)
    except (ValueError, TypeError, RecursionError, MemoryError):
        return None
    return value if isinstance(value, dict) else None


# -- JSON ---------------------------------------------------------------------------------------------------------


def _json_calls(inner: str) -> list[tuple[str, dict[str, Any]]]:
    parsed = strict_json_loads(inner.strip())
    calls = []
    for item in parsed if isinstance(parsed, list) else [parsed]:
        if not isinstance(item, dict):
            raise _Malformed
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            raise _Malformed  # field notes 14: never a call without a name
        arguments = item.get("parameters") or item.get("arguments")  # SGLang's order of preference
        if arguments is None:
            arguments = {}
        elif isinstance(arguments, str):
            arguments = strict_json_loads(arguments)
        if not isinstance(arguments, dict):
            raise _Malformed
        calls.append((name, arguments))
    return calls


# -- XML ----------------------------------------------------------------------------------------------------------


def _xml_calls(inner: str, tools: ToolSpecs) -> list[tuple[str, dict[str, Any]]]:
    calls = []
    pos = 0
    while (start := inner.find(FUNCTION_START, pos)) != -1:
        if inner[pos:start].strip():
            raise _Malformed
        name_end = inner.find(">", start)
        close = inner.find(FUNCTION_END, start)
        if name_end == -1 or close == -1 or name_end > close:
            raise _Malformed
        name = inner[start + len(FUNCTION_START) : name_end].strip()
        body = inner[name_end + 1 : close]
        if not name or "\n" in name or "<" in name or FUNCTION_START in body:
            raise _Malformed
        calls.append((name, _xml_parameters(body, name, tools)))
        pos = close + len(FUNCTION_END)
    if inner[pos:].strip():
        raise _Malformed
    return calls


def _xml_parameters(body: str, tool: str, tools: ToolSpecs) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    pos = 0
    while (start := body.find(PARAMETER_START, pos)) != -1:
        if body[pos:start].strip():
            raise _Malformed
        key_end = body.find(">", start)
        if key_end == -1:
            raise _Malformed
        key = body[start + len(PARAMETER_START) : key_end].strip()
        if not key or "\n" in key or "<" in key:
            raise _Malformed
        end = body.find(PARAMETER_END, key_end)
        following = body.find(PARAMETER_START, key_end)
        if end == -1 or (following != -1 and following < end):
            value_end = len(body) if following == -1 else following  # unclosed: tolerated, as in SGLang
            pos = value_end
        else:
            value_end = end
            pos = end + len(PARAMETER_END)
        value = body[key_end + 1 : value_end]
        value = value[1:] if value.startswith("\n") else value
        value = value[:-1] if value.endswith("\n") else value
        arguments[key] = convert_xml_value(value, tools.parameter_schema(tool, key))
    if body[pos:].strip():
        raise _Malformed
    return arguments


_STRING_TYPES = ("string", "str", "text", "varchar", "char", "enum")
_INT_PREFIXES = ("int", "uint", "long", "short", "unsigned")
_FLOAT_PREFIXES = ("num", "float")
_BOOL_TYPES = ("boolean", "bool", "binary")
_ENUM_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"), (dict, "object"))


def schema_type(schema: Any) -> str:
    """The conversion type of a parameter schema, as SGLang 0.5.23 infers it (``infer_type_from_json_schema``):
    ``type`` (the first non-null of a list), else ``anyOf``/``oneOf`` (one type, or the non-null one of two,
    else ``string`` if among them, else the first), else the type of the ``enum`` values (``string`` when mixed),
    else the first non-string type of ``allOf``, else ``object`` for ``properties``, ``array`` for ``items``; then
    stripped and lower-cased. Default ``string``."""
    inferred = _infer_type(schema)
    return "string" if inferred is None else str(inferred).strip().lower()


def _infer_type(schema: Any) -> Any:
    if not isinstance(schema, Mapping):
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind
    if isinstance(kind, list) and kind:
        return next((k for k in kind if k != "null"), "string")
    branches = (schema.get("anyOf") or schema.get("oneOf")) if ("anyOf" in schema or "oneOf" in schema) else None
    if isinstance(branches, list):
        kinds = [k for k in map(_infer_type, branches) if k]
        distinct = {str(k) for k in kinds}
        if len(distinct) == 1:
            return kinds[0]
        if len(distinct) == 2 and "null" in kinds:
            return next(k for k in kinds if k != "null")
        if kinds:
            return "string" if "string" in kinds else kinds[0]
    enum = schema.get("enum")
    if isinstance(enum, list):
        found = {"null" if v is None else next((n for t, n in _ENUM_TYPES if isinstance(v, t)), None) for v in enum}
        found.discard(None)
        return found.pop() if len(found) == 1 else "string"
    if isinstance(schema.get("allOf"), list):
        return next((k for k in map(_infer_type, schema["allOf"]) if k and k != "string"), "string")
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None


def convert_xml_value(value: str, schema: Any) -> Any:
    """SGLang 0.5.23's ``Qwen3CoderDetector._convert_param_value``: by :func:`schema_type`, ``null`` -> None,
    string types stay strings, integer and number types parsed (an integral number written without ``.`` or ``e``
    is an int), boolean types are ``value.lower() == "true"``, object and array types tried as JSON; then every
    type that is still unconverted tried as a Python literal; a value that does not convert stays the string.
    Unlike SGLang, the result is always strict JSON: a non-finite number, or a literal JSON cannot write (a set,
    bytes; SGLang then returns no call at all), stays the string."""
    if value.lower() == "null":
        return None
    kind = schema_type(schema)
    if kind in _STRING_TYPES:
        return value
    if kind.startswith(_INT_PREFIXES):
        try:
            return int(value)
        except ValueError:
            return value
    if kind.startswith(_FLOAT_PREFIXES):
        try:
            number = float(value)
        except ValueError:
            return value
        if number != number or number in (float("inf"), float("-inf")):
            return value
        return int(number) if number.is_integer() and "." not in value and "e" not in value.lower() else number
    if kind in _BOOL_TYPES:
        return value.lower() == "true"
    if kind in ("object", "array", "arr") or kind.startswith(("dict", "list")):
        try:
            return _strict_json(strict_json_loads(value), value)
        except (ValueError, RecursionError):
            pass
    try:
        with warnings.catch_warnings():  # invalid escapes only warn; the value is still the literal
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            converted = ast.literal_eval(value)
    except Exception:  # literal_eval raises many kinds on hostile input; any of them means "a string"
        return value
    return _strict_json(converted, value)


def _strict_json(converted: Any, value: str) -> Any:
    try:
        json.dumps(converted, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return value
    return converted
