"""Constrained decoding in the engine: the ``json_schema``, ``regex``, ``ebnf`` and ``structural_tag`` sampling
parameters, validated as SGLang 0.5.23 validates them and honoured by the default policy.

How SGLang treats them (``sglang/srt/...`` of the 0.5.23 wheel):

- ``sampling/sampling_params.py``: an empty string is unset (``self.json_schema or None``, L239-242); more than
  one set is a ``ValueError`` "Only one of json_schema, regex, ebnf, or structural_tag can be set." (L318-329),
  raised while the request is validated, so a 400 like any other bad sampling parameter.
- ``constrained/grammar_manager.py``: the grammar is compiled in the scheduler; a grammar that does not compile
  finishes the request with an abort, ``status_code`` 400, message ``Failed to compile {key} grammar: {error}``
  with key ``json``, ``regex``, ``ebnf`` or ``structural_tag`` (L186-196, L311-317; ``set_finish_with_abort`` in
  ``managers/schedule_batch.py``); a non-streaming request then gets HTTP 400.
- ``constrained/xgrammar_backend.py`` ``dispatch_json`` (``"$$ANY$$"`` is any JSON; otherwise the schema must parse
  and pass ``json_schema_validation.py::validate_xgrammar_json_schema``), ``dispatch_structural_tag`` (the legacy
  ``{"structures", "triggers", "at_least_one"}`` form becomes a ``triggered_tags`` format; otherwise ``format``).

The engine compiles a constraint into a small :class:`Grammar` (:func:`compile_constraint`): the same validation
where it is cheap (JSON parsing, the schema's shape and xgrammar's unsupported keywords, every structural-tag
format's fields, Python's ``re`` for a regex, a ``root`` rule for EBNF), and for JSON schemas and structural tags
a renderer that writes output satisfying the grammar (:meth:`Grammar.render`), used by the default policy. A
script entry is what the "model" emits, constraint or not (a way to play an upstream that lost the constraint);
regex and EBNF are validated only (the policy's reply is unchanged under them).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

import attrs

from .determinism import stable_hash

#: the constraint keys of ``sampling_params`` and SGLang's grammar-key name of each (grammar_manager.py L160-173)
CONSTRAINT_KEYS = {"json_schema": "json", "regex": "regex", "ebnf": "ebnf", "structural_tag": "structural_tag"}
#: ``json_schema`` value meaning "any JSON" (xgrammar_backend.py ``dispatch_json``)
ANY_JSON = "$$ANY$$"

# json_schema_validation.py: keywords xgrammar 0.2 would silently ignore, and the string formats it implements.
_XGRAMMAR_UNSUPPORTED_KEYWORDS = frozenset({
    "contains", "dependentRequired", "dependentSchemas", "else", "if", "maxContains", "minContains", "multipleOf",
    "not", "then", "uniqueItems",
})
_XGRAMMAR_STRING_FORMATS = frozenset({
    "date", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "json-pointer", "relative-json-pointer",
    "time", "uri", "uri-reference", "uri-template", "uuid",
})
_SUBSCHEMA_KEYWORDS = ("additionalItems", "additionalProperties", "contains", "contentSchema", "else", "if", "items",
                       "not", "propertyNames", "then", "unevaluatedItems", "unevaluatedProperties")
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUBSCHEMA_MAPS = ("$defs", "definitions", "dependentSchemas", "patternProperties", "properties")
_JSON_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean", "null"})
#: xgrammar's ``JSONSchemaFormat.style`` values (xgrammar 0.2.7 structural_tag.py)
_STYLES = frozenset({"json", "qwen_xml", "minimax_xml", "minimax_m3_xml", "deepseek_xml", "glm_xml", "cohere_xml",
                     "kimi_k3_xml", "deepseek_v4_1_xml"})
_FORMAT_TYPES = frozenset({
    "const_string", "json_schema", "any_text", "token", "exclude_token", "any_tokens", "grammar", "regex", "sequence",
    "or", "tag", "triggered_tags", "token_triggered_tags", "tags_with_separator", "optional", "plus", "star",
    "repeat", "dispatch", "token_dispatch", "qwen_xml_parameter",
})
_STRING_EXAMPLES = {
    "date": "2026-01-02", "date-time": "2026-01-02T03:04:05Z", "time": "03:04:05Z", "duration": "P1D",
    "email": "agent@example.com", "hostname": "example.com", "ipv4": "192.0.2.1", "ipv6": "2001:db8::1",
    "json-pointer": "/a", "relative-json-pointer": "0", "uri": "https://example.com/a",
    "uri-reference": "/a", "uri-template": "/a/{b}", "uuid": "0b4c7d6e-1f2a-4b3c-8d9e-0f1a2b3c4d5e",
}
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
_MAX_DEPTH = 32


class GrammarError(ValueError):
    """The constraint does not compile; the message follows ``Failed to compile <key> grammar: ``."""


@attrs.frozen
class Constraint:
    """The one constraint of a request's ``sampling_params``: SGLang's grammar key and the string sent."""

    #: ``json``, ``regex``, ``ebnf`` or ``structural_tag``
    key: str
    source: str

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Constraint | None:
        """The constraint of validated-by-type sampling params; ``ValueError`` as SGLang's ``verify``."""
        found = []
        for name, key in CONSTRAINT_KEYS.items():
            value = params.get(name)
            if value is None:
                continue
            if not isinstance(value, str):
                raise ValueError(f"{name} must be a string, got {type(value).__name__}")
            if value:
                found.append(cls(key, value))
        if len(found) > 1:
            raise ValueError("Only one of json_schema, regex, ebnf, or structural_tag can be set.")
        return found[0] if found else None

    def compile(self) -> Grammar:
        """The grammar, or :class:`GrammarError` (the request then finishes with a 400 abort)."""
        return compile_constraint(self)

    def abort_message(self, error: GrammarError) -> str:
        return f"Failed to compile {self.key} grammar: {error}"


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


@attrs.frozen
class Grammar:
    """A compiled constraint. ``kind`` is ``json`` (``schema``: a JSON schema, True = any JSON), ``structural_tag``
    (``format``: the structural-tag format tree, legacy tags converted) or ``opaque`` (regex, EBNF)."""

    kind: str
    schema: Any = None
    format: Any = None

    def render(self, context: RenderContext) -> str | None:
        """Output that satisfies the grammar, or None when the engine cannot write one (regex, EBNF, formats the
        renderer does not know): the policy's reply is then left as it is."""
        h = stable_hash("constrained", context.seed, context.user_text)
        if self.kind == "json":
            value = instance(self.schema, h, "answer", context.user_text)
            if value == {} and _open_object(self.schema):
                value = {"answer": context.free_text}  # e.g. json_object: an object with something in it
            elif self.schema is True:
                value = {"answer": context.free_text}
            return json.dumps(value, ensure_ascii=False)
        if self.kind == "structural_tag":
            return _render_format(self.format, context, h)
        return None


def _open_object(schema: Any) -> bool:
    """An object schema that admits any extra property."""
    return isinstance(schema, dict) and schema.get("additionalProperties", True) is not False and not schema.get(
        "properties") and "maxProperties" not in schema


# -- compiling ---------------------------------------------------------------------------------------------------------


def compile_constraint(constraint: Constraint) -> Grammar:
    key, source = constraint.key, constraint.source
    if key == "json":
        if source == ANY_JSON:
            return Grammar("json", schema=True)
        schema = _loads(source)
        check_json_schema(schema)
        return Grammar("json", schema=schema)
    if key == "structural_tag":
        tag = _loads(source)
        if not isinstance(tag, dict):
            raise GrammarError(f"a structural tag must be a JSON object, got {_json_type(tag)}")
        if tag.get("structures") is not None:
            return Grammar("structural_tag", format=_legacy_format(tag))
        fmt = tag.get("format")
        if not isinstance(fmt, dict):
            raise GrammarError("a structural tag needs a 'format' object (or the legacy 'structures')")
        _check_format(fmt, "format")
        return Grammar("structural_tag", format=fmt)
    if key == "regex":
        try:
            re.compile(source)
        except re.error as exc:
            raise GrammarError(f"invalid regex: {exc}") from None
        return Grammar("opaque")
    if not re.search(r"(?m)^\s*root\s*::=", source):
        raise GrammarError("the EBNF grammar has no 'root' rule")
    return Grammar("opaque")


def _loads(source: str) -> Any:
    try:
        return json.loads(source)
    except (ValueError, RecursionError) as exc:
        raise GrammarError(str(exc)) from None


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def check_json_schema(schema: Any, pointer: str = "#") -> None:
    """A JSON schema xgrammar would compile and fully enforce (bool or object; known types; none of the keywords
    ``validate_xgrammar_json_schema`` refuses). Iterative over the schema-bearing keywords."""
    stack = [(schema, pointer)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            raise GrammarError(f"JSON Schema at {where} must be an object or a boolean, got {_json_type(node)}")
        if where.count("/") > 200:
            raise GrammarError(f"JSON Schema at {where} is nested too deeply")
        unsupported = sorted(_XGRAMMAR_UNSUPPORTED_KEYWORDS.intersection(node))
        if unsupported:
            raise GrammarError(
                f"JSON Schema at {where} is not supported by xgrammar: keyword(s) {', '.join(unsupported)} would be "
                "ignored"
            )
        kinds = node.get("type")
        for kind in kinds if isinstance(kinds, list) else [kinds] if kinds is not None else []:
            if kind not in _JSON_TYPES:
                raise GrammarError(f"JSON Schema at {where}: unknown type {kind!r}")
        describes_string = kinds is None or kinds == "string" or (isinstance(kinds, list) and "string" in kinds)
        if describes_string and "format" in node and node["format"] not in _XGRAMMAR_STRING_FORMATS:
            raise GrammarError(
                f"JSON Schema at {where} is not supported by xgrammar: string format {node['format']!r} is not "
                "implemented"
            )
        for keyword in _SUBSCHEMA_KEYWORDS:
            child = node.get(keyword)
            if isinstance(child, (bool, dict)):
                stack.append((child, f"{where}/{keyword}"))
            elif keyword == "items" and isinstance(child, list):
                stack.extend((item, f"{where}/items/{index}") for index, item in enumerate(child))
        for keyword in _SUBSCHEMA_LISTS:
            children = node.get(keyword)
            if isinstance(children, list):
                stack.extend((child, f"{where}/{keyword}/{index}") for index, child in enumerate(children))
        for keyword in _SUBSCHEMA_MAPS:
            children = node.get(keyword)
            if isinstance(children, dict):
                stack.extend((child, f"{where}/{keyword}/{name}") for name, child in children.items())


def _legacy_format(tag: dict[str, Any]) -> dict[str, Any]:
    """The legacy tag as xgrammar's ``StructuralTag.from_legacy_structural_tag`` turns it into a format
    (xgrammar_backend.py ``dispatch_structural_tag``): triggered tags whose contents are JSON schemas."""
    structures, triggers = tag.get("structures"), tag.get("triggers")
    if not isinstance(structures, list) or not isinstance(triggers, list):
        raise GrammarError("a legacy structural tag needs 'structures' and 'triggers' lists")
    tags = []
    for index, structure in enumerate(structures):
        where = f"structures[{index}]"
        if not isinstance(structure, dict):
            raise GrammarError(f"{where} must be an object")
        begin, end, schema = structure.get("begin"), structure.get("end"), structure.get("schema")
        if not isinstance(begin, str) or not isinstance(end, str):
            raise GrammarError(f"{where} needs string 'begin' and 'end'")
        schema = {} if schema is None else schema
        if isinstance(schema, str):
            schema = _loads(schema)
        check_json_schema(schema, f"{where}.schema")
        tags.append({"type": "tag", "begin": begin, "content": {"type": "json_schema", "json_schema": schema},
                     "end": end})
    at_least_one = tag.get("at_least_one", False)
    if not isinstance(at_least_one, bool):
        raise GrammarError("'at_least_one' must be a boolean")
    fmt = {"type": "triggered_tags", "triggers": triggers, "tags": tags, "at_least_one": at_least_one}
    _check_format(fmt, "format")
    return fmt


def _check_format(fmt: Any, where: str, depth: int = 0) -> None:
    """Every field of a structural-tag format that xgrammar's pydantic models require (structural_tag.py)."""
    if depth > _MAX_DEPTH:
        raise GrammarError(f"{where} is nested too deeply")
    if not isinstance(fmt, dict):
        raise GrammarError(f"{where} must be a format object, got {_json_type(fmt)}")
    kind = fmt.get("type")
    if kind not in _FORMAT_TYPES:
        raise GrammarError(f"{where}: unknown format type {kind!r}")

    def strings(key: str, *, required: bool = True, non_empty: bool = False) -> list[str]:
        value = fmt.get(key)
        if value is None and not required:
            return []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise GrammarError(f"{where}.{key} must be a list of strings")
        if non_empty and not value:
            raise GrammarError(f"{where}.{key} must not be empty")
        return value

    def flag(key: str) -> None:
        if not isinstance(fmt.get(key, False), bool):
            raise GrammarError(f"{where}.{key} must be a boolean")

    if kind == "const_string" and not isinstance(fmt.get("value"), str):
        raise GrammarError(f"{where}.value must be a string")
    elif kind in ("json_schema", "qwen_xml_parameter"):
        schema = fmt.get("json_schema")
        check_json_schema({} if schema is None else schema, f"{where}.json_schema")
        if fmt.get("style", "json") not in _STYLES:
            raise GrammarError(f"{where}.style: unknown style {fmt.get('style')!r}")
        flag("any_order")
    elif kind == "any_text":
        strings("excludes", required=False)
    elif kind == "grammar" and not isinstance(fmt.get("grammar"), str):
        raise GrammarError(f"{where}.grammar must be a string")
    elif kind == "regex":
        pattern = fmt.get("pattern")
        try:
            re.compile(pattern if isinstance(pattern, str) else None)  # type: ignore[arg-type]
        except (re.error, TypeError) as exc:
            raise GrammarError(f"{where}.pattern: invalid regex ({exc})") from None
    elif kind in ("sequence", "or"):
        elements = fmt.get("elements")
        if not isinstance(elements, list) or not elements:
            raise GrammarError(f"{where}.elements must be a non-empty list")
        for index, element in enumerate(elements):
            _check_format(element, f"{where}.elements[{index}]", depth + 1)
    elif kind == "tag":
        _check_tag(fmt, where, depth)
    elif kind in ("triggered_tags", "tags_with_separator"):
        triggers = strings("triggers", non_empty=True) if kind == "triggered_tags" else []
        if kind == "tags_with_separator" and not isinstance(fmt.get("separator"), str):
            raise GrammarError(f"{where}.separator must be a string")
        tags = fmt.get("tags")
        if not isinstance(tags, list) or not tags:
            raise GrammarError(f"{where}.tags must be a non-empty list of tags")
        for index, tag in enumerate(tags):
            _check_tag(tag, f"{where}.tags[{index}]", depth)
            begin = tag["begin"]
            if triggers and sum(1 for trigger in triggers if isinstance(begin, str) and begin.startswith(trigger)) != 1:
                raise GrammarError(f"{where}.tags[{index}].begin must start with exactly one trigger")
        flag("at_least_one")
        flag("stop_after_first")
        strings("excludes", required=False)
    elif kind in ("optional", "plus", "star", "repeat"):
        if kind == "repeat":
            low, high = fmt.get("min"), fmt.get("max")
            if not isinstance(low, int) or not isinstance(high, int) or low < 0 or (high != -1 and high < low):
                raise GrammarError(f"{where}: repeat needs integers 0 <= min <= max (or max -1)")
        _check_format(fmt.get("content"), f"{where}.content", depth + 1)


def _check_tag(tag: Any, where: str, depth: int) -> None:
    if not isinstance(tag, dict) or tag.get("type", "tag") != "tag":
        raise GrammarError(f"{where} must be a tag format")
    begin, end = tag.get("begin"), tag.get("end")
    if not isinstance(begin, (str, dict)):
        raise GrammarError(f"{where}.begin must be a string")
    if not (isinstance(end, (str, dict)) or (isinstance(end, list) and end and all(isinstance(e, str) for e in end))):
        raise GrammarError(f"{where}.end must be a string or a non-empty list of strings")
    _check_format(tag.get("content"), f"{where}.content", depth + 1)


# -- rendering ---------------------------------------------------------------------------------------------------------

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


# -- JSON-schema instances ---------------------------------------------------------------------------------------------


def instance(schema: Any, h: int, name: str = "value", user_text: str = "", *, root: Any = None, depth: int = 0) -> Any:
    """A deterministic value satisfying ``schema`` (for the keywords xgrammar enforces: types, properties and
    required, items and counts, enum/const, bounds, lengths, formats, anyOf/oneOf/allOf, local ``$ref``). A
    ``pattern`` is not honoured (a plain word is written)."""
    root = schema if root is None else root
    if depth > _MAX_DEPTH or schema is True or not isinstance(schema, dict):
        return f"{_WORDS[h % len(_WORDS)]}"
    if isinstance(schema.get("$ref"), str):
        return instance(_resolve(schema["$ref"], root), h, name, user_text, root=root, depth=depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][h % len(schema["enum"])]
    for keyword in ("anyOf", "oneOf"):
        branches = schema.get(keyword)
        if isinstance(branches, list) and branches:
            return instance(branches[0], h, name, user_text, root=root, depth=depth + 1)
    if isinstance(schema.get("allOf"), list):
        merged = {key: value for key, value in schema.items() if key != "allOf"}
        for branch in schema["allOf"]:
            if isinstance(branch, dict):
                for key, value in branch.items():
                    if key == "properties" and isinstance(value, dict):
                        merged["properties"] = {**merged.get("properties", {}), **value}
                    elif key == "required" and isinstance(value, list):
                        merged["required"] = [*merged.get("required", []), *value]
                    else:
                        merged.setdefault(key, value)
        return instance(merged, h, name, user_text, root=root, depth=depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    if kind == "object":
        return _object(schema, h, user_text, root, depth)
    if kind == "array":
        return _array(schema, h, name, user_text, root, depth)
    if kind == "integer":
        return _number(schema, h % 100, integer=True)
    if kind == "number":
        return _number(schema, (h % 10000) / 100, integer=False)
    if kind == "boolean":
        return bool(h % 2)
    if kind == "null":
        return None
    return _string(schema, h, name, user_text)


def _resolve(ref: str, root: Any) -> Any:
    if not ref.startswith("#/"):
        return {}
    node = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return {}
        node = node[part]
    return node


def _object(schema: dict[str, Any], h: int, user_text: str, root: Any, depth: int) -> dict[str, Any]:
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = [key for key in schema.get("required", []) if isinstance(key, str)] if isinstance(
        schema.get("required"), list) else []
    names = list(dict.fromkeys([*[key for key in properties if key in required], *required])) or list(properties)
    minimum = schema.get("minProperties")
    if isinstance(minimum, int):
        names += [key for key in properties if key not in names][: max(0, minimum - len(names))]
    return {
        key: instance(properties.get(key, {"type": "string"}), stable_hash(h, key), key, user_text, root=root,
                      depth=depth + 1)
        for key in names
    }


def _array(schema: dict[str, Any], h: int, name: str, user_text: str, root: Any, depth: int) -> list[Any]:
    prefix = schema.get("prefixItems") if isinstance(schema.get("prefixItems"), list) else []
    items = schema.get("items")
    low = schema.get("minItems") if isinstance(schema.get("minItems"), int) else 0
    high = schema.get("maxItems") if isinstance(schema.get("maxItems"), int) else None
    count = max(low, 1, len(prefix))
    if high is not None:
        count = min(count, high)
    out = []
    for index in range(count):
        sub = prefix[index] if index < len(prefix) else items if isinstance(items, (dict, bool)) else {}
        out.append(instance(sub, stable_hash(h, index), name, user_text, root=root, depth=depth + 1))
    return out


def _number(schema: dict[str, Any], value: float, *, integer: bool) -> float | int:
    """``value`` moved into the schema's bounds (exclusive bounds by one unit, or half of one for numbers)."""
    step = 1 if integer else 0.5
    lows = [schema.get("minimum"), _shift(schema.get("exclusiveMinimum"), step)]
    highs = [schema.get("maximum"), _shift(schema.get("exclusiveMaximum"), -step)]
    low = max((b for b in lows if _is_number(b)), default=None)
    high = min((b for b in highs if _is_number(b)), default=None)
    if integer:
        value = int(value)
        low = None if low is None else math.ceil(low)
        high = None if high is None else math.floor(high)
    if low is not None and value < low:
        value = low
    if high is not None and value > high:
        value = high
    return int(value) if integer else float(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shift(bound: Any, by: float) -> Any:
    return bound + by if _is_number(bound) else None


def _string(schema: dict[str, Any], h: int, name: str, user_text: str) -> str:
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _STRING_EXAMPLES:
        return _STRING_EXAMPLES[fmt]
    from .policy import argument_value  # noqa: PLC0415 - the policy's plausible names (city, query...)

    text = str(argument_value(name, {"type": "string"}, h, user_text))
    low = schema.get("minLength") if isinstance(schema.get("minLength"), int) else 0
    high = schema.get("maxLength") if isinstance(schema.get("maxLength"), int) else None
    while len(text) < low:
        text += "x"
    return text if high is None else text[:high]


__all__ = ["ANY_JSON", "CONSTRAINT_KEYS", "Constraint", "Grammar", "GrammarError", "RenderContext", "instance"]
