"""Non-streaming tool-call parsing for ``/parse_function_call``, as SGLang 0.5.23 does it (sglang-protocol.md §5.1,
§5.4; ``function_call/function_call_parser.py``, ``qwen25_detector.py``, ``qwen3_coder_detector.py``,
``base_format_detector.py``, ``utils.py`` of that release).

Written from the behaviour of those classes, and checked case by case against what they return
(``tests/parsing/fixtures/sglang_0_5_23.jsonl.gz``, ``tests/engine/test_parser_fixtures.py``).

``FunctionCallParser.parse_non_stream``: with no tools the text comes back untouched. Otherwise, when the text has
no tool-call marker the text comes back untouched; when it has one, the detector's ``normal_text`` and calls.

* ``qwen25`` / ``qwen`` (``Qwen25Detector``): the marker is ``<tool_call>\\n``. ``normal_text`` is the text before
  the first marker, **stripped**. Each ``<tool_call>\\n(.*?)\\n</tool_call>`` body is stripped and read with
  ``json.loads`` (a body that is not JSON is skipped); an object or a list of objects. A call whose ``name`` is not
  an offered tool is dropped (``SGLANG_FORWARD_UNKNOWN_TOOLS`` off, the default). ``tool_index`` is the tool's
  position in ``tools`` (the last tool of that name). ``parameters`` is ``json.dumps(obj.get("parameters") or
  obj.get("arguments", {}), ensure_ascii=False)``, whatever that value is (``NaN`` included). A list item that is
  not an object, or a name that is a non-empty list or object, makes SGLang raise: its server answers 500.
* ``qwen3_coder`` / ``step3p5`` (``Qwen3CoderDetector``): the marker is ``<tool_call>``. ``normal_text`` is the text
  before it, **not stripped**. Blocks are ``<tool_call>(.*?)</tool_call>``; if there is none but the text has
  ``<function=``, the whole text is one block. Functions are ``<function=(.*?)</function>`` or, unclosed, to the end.
  The name runs to the first ``>`` and is kept as written (``<function= f >`` names ``" f "``); parameter names
  likewise. A parameter value ends at ``</parameter>``, the next ``<parameter=``, ``</function>`` or the end; one
  leading and one trailing newline are removed, then it is converted by its schema (below). Calls are returned
  whatever their name, offered or not, and ``tool_index`` counts the calls in the output (0, 1, ...), not the
  position in ``tools``. If anything fails (typically ``json.dumps`` of a set or bytes that a Python literal
  gave), the text comes back untouched with no calls.

Value conversion (``_convert_param_value``): ``null`` (any case) is None. A parameter the tool's schema does not
list stays a string. Otherwise by the type inferred from its schema (``infer_type_from_json_schema``: ``type``, or
the first non-null of a type list; ``anyOf``/``oneOf``; ``enum`` values; ``allOf``; ``properties`` -> object;
``items`` -> array), lower-cased: string types stay strings; ``int*``/``uint*``/``long*``/``short*``/``unsigned*``
go through ``int()``; ``num*``/``float*`` through ``float()`` (an integral value without ``.`` or ``e`` becomes an
int); ``boolean``/``bool``/``binary`` are ``value.lower() == "true"`` (so anything but ``true`` is false); object and
array types try ``json.loads``; every other type, and a failed ``json.loads``, tries ``ast.literal_eval``; a value
that does not convert stays the string. The tool's schema is its ``parameters.properties`` (from
``anyOf``/``oneOf``/``allOf`` branches when there is none at the top), or the whole ``parameters`` object when it has
no properties at all; the first tool with the name and type ``function`` wins.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import attrs


class ParserCrash(RuntimeError):
    """SGLang 0.5.23 raises here and its server answers 500 (``Internal Server Error``)."""


@attrs.frozen
class ToolCallItem:
    """One parsed call; ``parameters`` is a JSON string (``core_types.ToolCallItem``)."""

    tool_index: int
    name: str
    parameters: str

    def to_json(self) -> dict[str, Any]:
        return {"tool_index": self.tool_index, "name": self.name, "parameters": self.parameters}


@attrs.frozen
class _Tool:
    """What a parser reads from one entry of ``tools`` (``protocol.Tool``: ``type`` defaults to ``function``)."""

    type: Any
    name: Any
    parameters: Any

    @classmethod
    def from_json(cls, tool: Any) -> _Tool:
        if not isinstance(tool, Mapping):
            return cls(None, None, None)
        function = tool.get("function")
        if not isinstance(function, Mapping):  # lenient: a bare function object (SGLang would reject the request)
            function = tool
        return cls(tool.get("type", "function"), function.get("name"), function.get("parameters"))


# -- qwen25 -------------------------------------------------------------------------------------------------------

_QWEN25_START = "<tool_call>\n"
_QWEN25_BLOCK = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.DOTALL)


def _parse_qwen25(text: str, tools: list[_Tool]) -> tuple[str, list[ToolCallItem]]:
    first = text.find(_QWEN25_START)
    if first == -1:
        return text, []
    indices = {tool.name: index for index, tool in enumerate(tools) if tool.name}
    calls: list[ToolCallItem] = []
    for body in _QWEN25_BLOCK.findall(text):
        try:
            parsed = json.loads(body.strip())
        except json.JSONDecodeError:
            continue  # any other exception (a huge integer, deep nesting) escapes: a 500
        for item in parsed if isinstance(parsed, list) else [parsed]:
            if not isinstance(item, dict):
                raise ParserCrash(f"'{type(item).__name__}' object has no attribute 'get'")
            name = item.get("name")
            if not name:
                continue
            if not isinstance(name, str):
                try:
                    hash(name)
                except TypeError:
                    raise ParserCrash(f"unhashable type: '{type(name).__name__}'") from None
            if name not in indices:
                continue
            arguments = item.get("parameters") or item.get("arguments", {})
            calls.append(ToolCallItem(indices[name], name, json.dumps(arguments, ensure_ascii=False)))
    return text[:first].strip(), calls


# -- qwen3_coder --------------------------------------------------------------------------------------------------

_CODER_START = "<tool_call>"
_CODER_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_CODER_FUNCTION = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
_CODER_PARAMETER = re.compile(r"<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.DOTALL)


def _parse_qwen3_coder(text: str, tools: list[_Tool]) -> tuple[str, list[ToolCallItem]]:
    if _CODER_START not in text:
        return text, []
    try:
        blocks = _CODER_BLOCK.findall(text) or ([text] if "<function=" in text else [])
        calls: list[ToolCallItem] = []
        for block in blocks:
            for closed, unclosed in _CODER_FUNCTION.findall(block):
                function = closed or unclosed
                if ">" not in function:
                    continue
                name, _, body = function.partition(">")
                schema = _arguments_schema(name, tools)
                arguments: dict[str, Any] = {}
                for parameter in _CODER_PARAMETER.findall(body):
                    if ">" not in parameter:
                        continue
                    key, _, value = parameter.partition(">")
                    value = value[1:] if value.startswith("\n") else value
                    value = value[:-1] if value.endswith("\n") else value
                    arguments[key] = convert_value(value, key, schema)
                calls.append(ToolCallItem(len(calls), name, json.dumps(arguments, ensure_ascii=False)))
    except Exception:  # noqa: BLE001 - SGLang catches everything here and returns the text without calls
        return text, []
    return text[: text.find(_CODER_START)], calls


def _arguments_schema(name: str, tools: list[_Tool]) -> dict[str, Any]:
    """``Qwen3CoderDetector._get_arguments_config``: parameter name -> schema, for the first function tool named
    ``name``; the whole ``parameters`` object when it lists no properties; ``{}`` for an unknown tool."""
    for tool in tools:
        if tool.type == "function" and tool.name == name:
            if not isinstance(tool.parameters, dict):
                return {}
            properties = schema_properties(tool.parameters)
            if properties or "properties" in tool.parameters:
                return properties
            return tool.parameters
    return {}


def schema_properties(schema: Any) -> dict[str, Any]:
    """``utils.get_schema_properties``: ``properties``, or those of ``anyOf``/``oneOf``/``allOf`` branches (first
    wins) when the top level has none."""
    if not isinstance(schema, dict):
        return {}
    properties = schema.get("properties")
    if isinstance(properties, dict):
        return properties
    merged: dict[str, Any] = {}
    for keyword in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(keyword)
        if isinstance(branches, list):
            for branch in branches:
                for key, value in schema_properties(branch).items():
                    merged.setdefault(key, value)
    return merged


_ENUM_TYPES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"), (dict, "object"))


def infer_type(schema: Any) -> Any:
    """``utils.infer_type_from_json_schema``: the primary type a parameter schema names or implies, or None."""
    if not isinstance(schema, dict):
        return None
    if "type" in schema:
        kind = schema["type"]
        if isinstance(kind, str):
            return kind
        if isinstance(kind, list) and kind:
            return next((k for k in kind if k != "null"), "string")
    if "anyOf" in schema or "oneOf" in schema:
        branches = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(branches, list):
            kinds = [k for k in (infer_type(branch) for branch in branches) if k]
            if kinds:
                if len(set(kinds)) == 1:
                    return kinds[0]
                if len(set(kinds)) == 2 and "null" in kinds:
                    return next(k for k in kinds if k != "null")
                return "string" if "string" in kinds else kinds[0]
    if "enum" in schema and isinstance(schema["enum"], list):
        found = set()
        for value in schema["enum"]:
            if value is None:
                found.add("null")
                continue
            found.update(next(([n] for t, n in _ENUM_TYPES if isinstance(value, t)), []))
        return found.pop() if len(found) == 1 else "string"
    if "allOf" in schema and isinstance(schema["allOf"], list):
        for branch in schema["allOf"]:
            kind = infer_type(branch)
            if kind and kind != "string":
                return kind
        return "string"
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None


_STRING_TYPES = ("string", "str", "text", "varchar", "char", "enum")
_INT_PREFIXES = ("int", "uint", "long", "short", "unsigned")
_FLOAT_PREFIXES = ("num", "float")
_BOOL_TYPES = ("boolean", "bool", "binary")


def convert_value(value: str, key: str, schema: Mapping[str, Any]) -> Any:
    """``Qwen3CoderDetector._convert_param_value`` (see the module docstring). May return values ``json.dumps``
    cannot write (a set, bytes, ...): the caller's ``json.dumps`` then fails, as in SGLang."""
    if value.lower() == "null":
        return None
    if key not in schema:
        return value
    inferred = infer_type(schema[key])
    kind = "string" if inferred is None else str(inferred).strip().lower()
    if kind in _STRING_TYPES:
        return value
    if kind.startswith(_INT_PREFIXES):
        return _try(int, value)
    if kind.startswith(_FLOAT_PREFIXES):
        return _try(_number, value)
    if kind in _BOOL_TYPES:
        return value.lower() == "true"
    if kind in ("object", "array", "arr") or kind.startswith(("dict", "list")):
        try:
            return json.loads(value)
        except Exception:  # noqa: BLE001 - as SGLang: then try a Python literal
            pass
    return _try(_literal, value)


def _number(value: str) -> float | int:
    number = float(value)
    if "." not in value and "e" not in value.lower() and number.is_integer():
        return int(number)
    return number


def _literal(value: str) -> Any:
    with warnings.catch_warnings():  # invalid escapes only warn; the value is still the literal
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return ast.literal_eval(value)


def _try(convert: Callable[[str], Any], value: str) -> Any:
    try:
        return convert(value)
    except Exception:  # noqa: BLE001 - any failure leaves the string, as in SGLang
        return value


#: Parser name -> implementation (``FunctionCallParser.ToolCallParserEnum``; the Qwen formats only).
TOOL_CALL_PARSERS: dict[str, Callable[[str, list[_Tool]], tuple[str, list[ToolCallItem]]]] = {
    "qwen25": _parse_qwen25,
    "qwen": _parse_qwen25,
    "qwen3_coder": _parse_qwen3_coder,
    "step3p5": _parse_qwen3_coder,
}
# GLM (engine/parsers/glm.py imports this module's helpers, so it registers itself from engine/parsers/__init__.py)


def parse_function_call(text: str, parser: str, tools: list[Any]) -> tuple[str, list[ToolCallItem]]:
    """``(normal_text, calls)`` as SGLang 0.5.23's ``/parse_function_call``. An unknown parser, or a text that makes
    SGLang raise or that its reply encoder refuses, raises :class:`ParserCrash` (SGLang answers 500)."""
    implementation = TOOL_CALL_PARSERS.get(parser)
    if implementation is None:
        raise ParserCrash(f"Unsupported tool_call_parser: {parser}")
    if not tools:
        check_encodable(text)
        return text, []
    try:
        normal_text, calls = implementation(text, [_Tool.from_json(tool) for tool in tools])
    except ParserCrash:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever escapes SGLang's detector is a 500 there
        raise ParserCrash(f"{type(exc).__name__}: {exc}") from exc
    check_encodable(normal_text, *(call.name for call in calls), *(call.parameters for call in calls))
    return normal_text, calls


def check_encodable(*texts: str) -> None:
    """SGLang writes its reply with orjson, which refuses lone surrogates (``"\\ud83e"`` in a Python literal, or
    in the request's text): then its server answers 500."""
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ParserCrash("str is not valid UTF-8: surrogates not allowed") from None
