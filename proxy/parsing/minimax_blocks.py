"""What the body of a MiniMax-M2 ``<minimax:tool_call>...</minimax:tool_call>`` block means (SGLang ``minimax-m2``).

The official MiniMax-M2 template writes a block as::

    <minimax:tool_call>
    <invoke name="NAME">
    <parameter name="KEY">VALUE</parameter>
    ...
    </invoke>
    ...
    </minimax:tool_call>

(one ``<invoke>`` per call, string values raw, other values ``tojson``). Read by these rules: one or more
``<invoke name="...">...</invoke>`` elements with only whitespace around them; inside one, ``<parameter name="...">
VALUE</parameter>`` elements with only whitespace between them (anything else: ``malformed_tool_call``). Names and
keys are stripped (as SGLang 0.5.23 does) and must be non-empty without quotes, angle brackets or line breaks.
A value is the exact inverse of the template's rendering (``proxy/parsing/glm_blocks.py:convert_glm_value``: raw
text for a string-typed parameter, else strict JSON, else the text). SGLang 0.5.23's ``MinimaxM2Detector`` differs on
purpose (docs/families.md, "MiniMax"): it strips line breaks at both ends of a value, keeps a value of a parameter
the schema does not type as a string, and drops calls to tools that were not offered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from proxy.parsing.formats import ToolSpecs
from proxy.parsing.glm_blocks import convert_glm_value

INVOKE_START, INVOKE_END = '<invoke name="', "</invoke>"
PARAMETER_START, PARAMETER_END = '<parameter name="', "</parameter>"
_NAME_END = '">'


class MiniMaxMalformed(ValueError):
    """The block body is not MiniMax calls."""


def checked_name(text: str) -> str:
    """A stripped name or key: non-empty, without quotes, angle brackets or line breaks (else malformed)."""
    name = text.strip()
    if not name or any(c in name for c in '"<>\n\r'):
        raise MiniMaxMalformed(f"bad name {name!r}")
    return name


def named_element(body: str, pos: int, start: str, end: str, name_end: str = _NAME_END) -> tuple[str, str, int] | None:
    """``(name, inner, position after)`` of the ``start NAME name_end inner end`` element after optional whitespace at
    ``pos``; None when only whitespace is left. Shared with the DeepSeek blocks (``proxy/parsing/deepseek_blocks.py``),
    whose elements have the same shape with other tags."""
    rest = body[pos:]
    if not rest.strip():
        return None
    pos += len(rest) - len(rest.lstrip())
    if not body.startswith(start, pos):
        raise MiniMaxMalformed(f"expected {start!r} at {body[pos:pos + 20]!r}")
    name_at = body.find(name_end, pos + len(start))
    close = body.find(end, pos + len(start))
    if name_at == -1 or close == -1 or close < name_at:
        raise MiniMaxMalformed(f"{start!r} is not closed")
    return checked_name(body[pos + len(start) : name_at]), body[name_at + len(name_end) : close], close + len(end)


def invoke_elements(
    inner: str, invoke: tuple[str, str], parameter: tuple[str, str], parameter_name_end: str = _NAME_END
) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """``(name, [(key, raw value), ...])`` of each ``invoke`` element of a block body, its ``parameter`` elements in
    order (:func:`named_element` for both); MiniMax's and DeepSeek's DSML blocks have this shape."""
    pos = 0
    while (found := named_element(inner, pos, *invoke)) is not None:
        name, body, pos = found
        parameters: list[tuple[str, str]] = []
        at = 0
        while (element := named_element(body, at, *parameter, parameter_name_end)) is not None:
            key, value, at = element
            parameters.append((key, value))
        yield name, parameters


def minimax_calls(inner: str, tools: ToolSpecs, schema_type: Callable[[Any], str]) -> list[tuple[str, dict[str, Any]]]:
    """The calls a block body holds, as ``[(name, arguments)]``; :class:`MiniMaxMalformed` otherwise."""
    calls: list[tuple[str, dict[str, Any]]] = []
    for name, parameters in invoke_elements(inner, (INVOKE_START, INVOKE_END), (PARAMETER_START, PARAMETER_END)):
        arguments: dict[str, Any] = {}
        for key, value in parameters:
            if PARAMETER_START in value or INVOKE_START in value:
                raise MiniMaxMalformed(f"nested tags in {value[:40]!r}")
            arguments[key] = convert_glm_value(value, tools.parameter_schema(name, key), schema_type)
        calls.append((name, arguments))
    return calls
