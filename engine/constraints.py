"""Constrained decoding in the engine: the ``json_schema``, ``regex``, ``ebnf`` and ``structural_tag`` sampling
parameters, validated and compiled as SGLang 0.5.23 validates and compiles them.

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
format's fields, Python's ``re`` for a regex, a ``root`` rule for EBNF). What the default policy writes under a
grammar is :mod:`engine.constrained_output`'s job. A script entry is what the "model" emits, constraint or not (a
way to play an upstream that lost the constraint); regex and EBNF are validated only (the policy's reply is
unchanged under them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

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
#: how deep a structural-tag format may nest
_MAX_FORMAT_DEPTH = 32


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
class Grammar:
    """A compiled constraint. ``kind`` is ``json`` (``schema``: a JSON schema, True = any JSON), ``structural_tag``
    (``format``: the structural-tag format tree, legacy tags converted) or ``opaque`` (regex, EBNF)."""

    kind: str
    schema: Any = None
    format: Any = None


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
    if depth > _MAX_FORMAT_DEPTH:
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


__all__ = [
    "ANY_JSON", "CONSTRAINT_KEYS", "Constraint", "Grammar", "GrammarError", "check_json_schema", "compile_constraint",
]
