"""What the body of a GLM ``<tool_call>...</tool_call>`` block means (SGLang parsers ``glm47`` and ``glm45``).

GLM-4.7 / GLM-5.x write a call as the official chat template renders it::

    <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>

and GLM-4.5/4.6 (``glm45``) put a newline after the name and after each element. Both are read by the same rules:
the name is the text before the first ``<arg_key>``, stripped (non-empty, no ``<``, no line break); then
``<arg_key>K</arg_key>`` and ``<arg_value>V</arg_value>`` pairs with only whitespace between and around them
(anything else: ``malformed_tool_call``). Keys are stripped, as SGLang 0.5.23 does; values are kept verbatim.

A value is the exact inverse of the template's rendering (``v if v is string else v | tojson``): when the tool's
schema types the parameter as a string it stays the raw text; otherwise it is read as strict JSON, and text that is
not JSON stays a string. SGLang 0.5.23's ``Glm47MoeDetector`` differs on purpose in a few ways (docs/parsing.md,
"GLM"): it also unquotes a quoted string value (``"x"`` -> ``x``) and unescapes backslash-escaped JSON, it keeps
names with their surrounding whitespace, and it drops calls to tools that were not offered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.parsing.formats import ToolSpecs, strict_json_loads

ARG_KEY_START, ARG_KEY_END = "<arg_key>", "</arg_key>"
ARG_VALUE_START, ARG_VALUE_END = "<arg_value>", "</arg_value>"
_STRING_TYPES = ("string", "str", "text", "varchar", "char", "enum")


class GlmMalformed(ValueError):
    """The block body is not a GLM call."""


def glm_calls(inner: str, tools: ToolSpecs, schema_type: Callable[[Any], str]) -> list[tuple[str, dict[str, Any]]]:
    """The one call a GLM block body holds, as ``[(name, arguments)]``; :class:`GlmMalformed` otherwise.
    ``schema_type``: the conversion type of a parameter schema (``tool_blocks.schema_type``)."""
    first = inner.find(ARG_KEY_START)
    head = inner if first == -1 else inner[:first]
    name = head.strip()
    if not name or "<" in name or ">" in name or "\n" in name or "\r" in name:
        raise GlmMalformed(f"bad function name {name!r}")
    arguments: dict[str, Any] = {}
    pos = len(head)
    while pos < len(inner):
        if not inner[pos:].strip():
            break
        key, pos = _element(inner, pos, ARG_KEY_START, ARG_KEY_END)
        value, pos = _element(inner, pos, ARG_VALUE_START, ARG_VALUE_END)
        key = key.strip()
        if not key:
            raise GlmMalformed("empty argument name")
        arguments[key] = convert_glm_value(value, tools.parameter_schema(name, key), schema_type)
    return [(name, arguments)]


def _element(inner: str, pos: int, start: str, end: str) -> tuple[str, int]:
    """The text of the next ``start...end`` element after optional whitespace, and the position after it."""
    skipped = len(inner[pos:]) - len(inner[pos:].lstrip())
    pos += skipped
    if not inner.startswith(start, pos):
        raise GlmMalformed(f"expected {start} at {inner[pos:pos + 20]!r}")
    close = inner.find(end, pos + len(start))
    if close == -1:
        raise GlmMalformed(f"{start} is not closed")
    body = inner[pos + len(start) : close]
    if any(tag in body for tag in (ARG_KEY_START, ARG_VALUE_START, ARG_KEY_END, ARG_VALUE_END)):
        raise GlmMalformed(f"nested argument tags in {body[:40]!r}")
    return body, close + len(end)


def convert_glm_value(value: str, schema: Any, schema_type: Callable[[Any], str]) -> Any:
    """The template's rendering inverted: raw text for a string-typed parameter, else strict JSON or the text."""
    if schema and schema_type(schema) in _STRING_TYPES:
        return value
    try:
        return strict_json_loads(value)
    except (ValueError, RecursionError):
        return value
