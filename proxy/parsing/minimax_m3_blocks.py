"""What the body of a MiniMax-M3 ``]<]minimax[>[<tool_call>...]<]minimax[>[</tool_call>`` block means (SGLang
``minimax-m3``).

The official MiniMax-M3 template writes a block as (``NS`` is the namespace token ``]<]minimax[>[``)::

    NS<tool_call>\\n
    NS<invoke name="F">NS<KEY>VALUE NS</KEY>...NS</invoke>\\n
    ...
    NS</tool_call>

and each VALUE with its ``to_xml`` macro: a mapping as ``NS<K>...NS</K>`` children (None values omitted), a list as
``NS<item>...NS</item>`` children, a boolean ``true``/``false``, anything else as Jinja prints it (strings raw,
numbers as Python writes them). So a block is an element tree. Read by these rules: only whitespace outside the
``<invoke>`` elements and between elements; an element holds either text (a leaf, kept verbatim) or child elements
(then only whitespace beside them); every closing tag matches its opening one (else ``malformed_tool_call``).
Names and tags are stripped and must be non-empty without angle brackets or line breaks.

A leaf is converted by its schema (the parameter's, then ``properties`` / ``additionalProperties`` / ``items`` down
the tree) only when the template would render the converted value back to the same text, so a parsed call always
re-renders to the tokens the model generated: a ``string`` type keeps the text; ``integer`` / ``number`` /
``boolean`` parse when Python's rendering of the number (or ``true``/``false``) is the text exactly (``007`` and
``1.50`` stay strings); an untyped leaf is ``true``/``false`` or the text. An element with children is a list when
the schema says ``array`` or, untyped, when every child is ``<item>``; else an object (a repeated key is
malformed). An empty element is ``{}`` / ``[]`` when its schema is a container or untyped, else ``""``. Never None
(the template omits None). Where SGLang 0.5.23's ``MinimaxM3Detector`` differs: docs/parsing.md, "MiniMax-M3".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.parsing.formats import MINIMAX_NS, ToolSpecs
from proxy.parsing.minimax_blocks import INVOKE_START, MiniMaxMalformed, checked_name

_ITEM = "item"


def _blank(text: str, where: str) -> None:
    if text.strip():
        raise MiniMaxMalformed(f"text {text[:30]!r} {where}")


def minimax_m3_calls(inner: str, tools: ToolSpecs) -> list[tuple[str, dict[str, Any]]]:
    """The calls a block body (between the block tags) holds, as ``[(name, arguments)]``; :class:`MiniMaxMalformed`
    otherwise."""
    chunks = inner.split(MINIMAX_NS)
    _blank(chunks[0], "before the first call")
    calls: list[tuple[str, dict[str, Any]]] = []
    # the open elements: (tag, leaf text, children); the invoke's own frame has tag None
    stack: list[tuple[str | None, str, list[tuple[str, Any]]]] = []
    name = ""
    for chunk in chunks[1:]:
        if not stack:
            if not chunk.startswith(INVOKE_START) or '">' not in chunk:
                raise MiniMaxMalformed(f"expected an invoke at {chunk[:30]!r}")
            name_text, _, after = chunk[len(INVOKE_START) :].partition('">')
            name = checked_name(name_text)
            _blank(after, "after the invoke tag")
            stack.append((None, "", []))
            continue
        if chunk.startswith("</"):
            tag_text, found, after = chunk[2:].partition(">")
            if not found:
                raise MiniMaxMalformed(f"unclosed tag {chunk[:30]!r}")
            _blank(after, "after a closing tag")
            tag, text, children = stack.pop()
            if tag is None:  # the invoke's frame: only </invoke> closes it
                if tag_text != "invoke":
                    raise MiniMaxMalformed(f"</{tag_text}> closes an invoke")
                calls.append((name, _arguments(name, children, tools)))
                continue
            if checked_name(tag_text) != tag:
                raise MiniMaxMalformed(f"</{tag_text}> closes <{tag}>")
            if children:
                _blank(text, f"beside the children of <{tag}>")
            stack[-1][2].append((tag, (text, children)))
            continue
        if not chunk.startswith("<"):
            raise MiniMaxMalformed(f"expected a tag at {chunk[:30]!r}")
        tag_text, found, text = chunk[1:].partition(">")
        if not found:
            raise MiniMaxMalformed(f"unclosed tag {chunk[:30]!r}")
        if stack[-1][0] is not None:
            _blank(stack[-1][1], "before a child element")
        stack.append((checked_name(tag_text), text, []))
    if stack:
        raise MiniMaxMalformed("an element is not closed")
    return calls


def _arguments(name: str, children: list[tuple[str, Any]], tools: ToolSpecs) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for key, node in children:
        if key in arguments:
            raise MiniMaxMalformed(f"argument {key!r} twice")
        arguments[key] = _value(node, tools.parameter_schema(name, key))
    return arguments


def _types(schema: Any) -> set[str]:
    if not isinstance(schema, Mapping):
        return set()
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind.lower()}
    if isinstance(kind, list):
        return {k.lower() for k in kind if isinstance(k, str)}
    if "properties" in schema:
        return {"object"}
    if "items" in schema or "prefixItems" in schema:
        return {"array"}
    return set()


def _child_schema(schema: Any, tag: str, index: int) -> Any:
    if not isinstance(schema, Mapping):
        return None
    if "array" in _types(schema):
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list) and index < len(prefix):
            return prefix[index]
        return schema.get("items")
    properties = schema.get("properties")
    if isinstance(properties, Mapping) and tag in properties:
        return properties[tag]
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None


def _value(node: tuple[str, list[tuple[str, Any]]], schema: Any) -> Any:
    text, children = node
    types = _types(schema)
    if not children:
        if text == "" and (not types or types & {"object", "array"}):
            return [] if "array" in types else {}
        return _leaf(text, types)
    as_list = "array" in types or (not types & {"object"} and all(tag == _ITEM for tag, _ in children))
    if as_list:
        if any(tag != _ITEM for tag, _ in children):
            raise MiniMaxMalformed("an array holds a non-<item> element")
        return [_value(child, _child_schema(schema, _ITEM, i)) for i, (_, child) in enumerate(children)]
    result: dict[str, Any] = {}
    for tag, child in children:
        if tag in result:
            raise MiniMaxMalformed(f"key {tag!r} twice")
        result[tag] = _value(child, _child_schema(schema, tag, 0))
    return result


def _leaf(text: str, types: set[str]) -> Any:
    """The typed value whose template rendering is ``text``, else ``text``."""
    if "string" in types:
        return text
    if text in ("true", "false") and (not types or "boolean" in types):
        return text == "true"
    if types & {"integer", "number"}:
        try:
            number = int(text)
        except ValueError:
            number = None
        if number is not None and str(number) == text:
            return number
        if "number" in types:
            try:
                real = float(text)
            except ValueError:
                return text
            if str(real) == text and real not in (float("inf"), float("-inf")) and real == real:
                return real
    return text
