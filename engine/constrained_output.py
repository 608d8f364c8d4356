"""What the default policy writes under a compiled constraint (:class:`~engine.constraints.Grammar`): output that
satisfies the grammar, as a model decoding under it would.

A JSON schema gets a value built from the schema (:func:`engine.schema_instances.instance`); a structural tag gets
its calls written ``begin + arguments + end`` with the tag's own strings (arguments from the tag's schema, or, when
that is ``{}``/``true``, from the offered tool's parameters; ``qwen_xml`` contents as ``<parameter=...>`` blocks).
Regex and EBNF grammars, and formats this renderer does not know, get None: the policy's reply stays as it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

from .constraints import Grammar
from .determinism import stable_hash
from .schema_instances import instance


@attrs.frozen
class RenderContext:
    """What the default policy knows when it writes constrained output."""

    #: the tools the prompt offers, as ``{"name", "parameters", ...}`` function dicts, in prompt order
    tools: tuple[dict[str, Any], ...]
    user_text: str
    #: whether the policy would call a tool here (a user turn with tools offered)
    wants_call: bool
    #: the policy's answer text (for free-text parts)
    free_text: str
    seed: int


def render_constrained(grammar: Grammar, context: RenderContext) -> str | None:
    """Output that satisfies ``grammar``, or None when the engine cannot write one (regex, EBNF, formats the
    renderer does not know): the policy's reply is then left as it is."""
    h = stable_hash("constrained", context.seed, context.user_text)
    if grammar.kind == "json":
        value = instance(grammar.schema, h, "answer", context.user_text)
        if value == {} and _open_object(grammar.schema):
            value = {"answer": context.free_text}  # e.g. json_object: an object with something in it
        elif grammar.schema is True:
            value = {"answer": context.free_text}
        return json.dumps(value, ensure_ascii=False)
    if grammar.kind == "structural_tag":
        return _render_format(grammar.format, context, h)
    return None


def _open_object(schema: Any) -> bool:
    """An object schema that admits any extra property."""
    return isinstance(schema, dict) and schema.get("additionalProperties", True) is not False and not schema.get(
        "properties") and "maxProperties" not in schema



_TAG_NAME = re.compile(r'<function=([^>\n]+)>|"name"\s*:\s*"([^"]+)"')


def _tag_name(tag: Mapping[str, Any]) -> str | None:
    begin = tag.get("begin")
    match = _TAG_NAME.search(begin) if isinstance(begin, str) else None
    return (match.group(1) or match.group(2)) if match else None


def _render_format(fmt: Mapping[str, Any], context: RenderContext, h: int) -> str | None:
    kind = fmt.get("type")
    if kind == "const_string":
        return fmt["value"]
    if kind == "json_schema":
        return _render_json_content(fmt, None, context, h)
    if kind == "any_text":
        return context.free_text
    if kind == "sequence":
        parts = [_render_format(element, context, stable_hash(h, index))
                 for index, element in enumerate(fmt["elements"])]
        return None if any(part is None for part in parts) else "".join(parts)  # type: ignore[arg-type]
    if kind == "or":
        return next((text for element in fmt["elements"] if (text := _render_format(element, context, h)) is not None),
                    None)
    if kind in ("optional", "star"):
        return ""
    if kind in ("plus", "repeat"):
        content = _render_format(fmt["content"], context, h)
        return None if content is None else content * max(1, fmt.get("min", 1))
    if kind == "tag":
        return _render_tag(fmt, context, h)
    if kind in ("triggered_tags", "tags_with_separator"):
        return _render_calls(fmt, context, h)
    return None


def _render_tag(tag: Mapping[str, Any], context: RenderContext, h: int) -> str | None:
    begin, end = tag.get("begin"), tag.get("end")
    if not isinstance(begin, str):
        return None
    end = end[0] if isinstance(end, list) else end
    if not isinstance(end, str):
        return None
    content = tag["content"]
    if content.get("type") == "json_schema":
        text = _render_json_content(content, _tag_name(tag), context, h)
    else:
        text = _render_format(content, context, h)
    return None if text is None else begin + text + end


def _render_calls(fmt: Mapping[str, Any], context: RenderContext, h: int) -> str | None:
    """Triggered tags: the calls a model under this grammar makes. ``at_least_one``: one call, or two different
    tools when more than one is allowed and ``stop_after_first`` is off; otherwise a call only where the policy
    would make one. Tags of the tools the prompt offers are preferred (the prompt is what the model knows)."""
    tags = list(fmt["tags"])
    offered = [tool.get("name") for tool in context.tools]
    preferred = [tag for name in offered for tag in tags if _tag_name(tag) == name] or tags
    if not fmt.get("at_least_one", False) and not context.wants_call:
        return context.free_text
    count = 1 if fmt.get("stop_after_first", False) or not fmt.get("at_least_one", False) else min(2, len(preferred))
    first = h % len(preferred)
    rendered = [_render_tag(preferred[(first + i) % len(preferred)], context, stable_hash(h, i)) for i in range(count)]
    if any(text is None for text in rendered):
        return None
    separator = fmt.get("separator", "\n") if fmt.get("type") == "tags_with_separator" else "\n"
    return separator.join(rendered)  # type: ignore[arg-type]


def _render_json_content(
    content: Mapping[str, Any], tool_name: str | None, context: RenderContext, h: int
) -> str | None:
    """A tag's JSON-schema content: arguments from the schema, or, for an unconstrained one (``true``/``{}``),
    from the offered tool's parameters; written in the content's style (JSON, or Qwen XML parameters)."""
    schema = content.get("json_schema")
    schema = {} if schema is None else schema
    tool = next((tool for tool in context.tools if tool.get("name") == tool_name), None)
    if schema is True or schema == {}:
        parameters = tool.get("parameters") if tool is not None else None
        value = instance(parameters, h, "arguments", context.user_text) if isinstance(parameters, dict) else {}
    else:
        value = instance(schema, h, "arguments", context.user_text)
    style = content.get("style", "json")
    if style == "json":
        return json.dumps(value, ensure_ascii=False)
    if style == "qwen_xml" and isinstance(value, dict):
        return "\n".join(f"<parameter={key}>\n{_xml_value(item)}\n</parameter>" for key, item in value.items())
    return None


def _xml_value(value: Any) -> str:
    """A Qwen XML parameter value: strings as they are, anything else as JSON (the Qwen3.5 template's rule)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


__all__ = ["RenderContext", "render_constrained"]
