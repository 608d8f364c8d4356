"""Deterministic JSON values that satisfy a JSON schema: what the engine writes for ``json_schema`` constraints and
for a structural tag's arguments (:mod:`engine.constrained_output`).

:func:`instance` follows the keywords xgrammar enforces (types, properties and ``required``, ``items`` and counts,
``enum``/``const``, bounds, lengths, string formats, ``anyOf``/``oneOf`` (first branch), ``allOf``, local
``$ref``); a string ``pattern`` is not honoured (a plain word is written). Strings without a format are the
plausible values of :func:`engine.plausible_text.argument_value` (a city for ``city``...).
"""

from __future__ import annotations

import math
from typing import Any

from .determinism import stable_hash
from .plausible_text import argument_value

#: a valid example of each string format xgrammar implements
_STRING_EXAMPLES = {
    "date": "2026-01-02", "date-time": "2026-01-02T03:04:05Z", "time": "03:04:05Z", "duration": "P1D",
    "email": "agent@example.com", "hostname": "example.com", "ipv4": "192.0.2.1", "ipv6": "2001:db8::1",
    "json-pointer": "/a", "relative-json-pointer": "0", "uri": "https://example.com/a",
    "uri-reference": "/a", "uri-template": "/a/{b}", "uuid": "0b4c7d6e-1f2a-4b3c-8d9e-0f1a2b3c4d5e",
}
#: what stands in for a value nested too deep, or for a schema that is not an object
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
#: how deep an instance is built before a plain word stands in for the rest
_MAX_DEPTH = 32


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
    text = str(argument_value(name, {"type": "string"}, h, user_text))
    low = schema.get("minLength") if isinstance(schema.get("minLength"), int) else 0
    high = schema.get("maxLength") if isinstance(schema.get("maxLength"), int) else None
    while len(text) < low:
        text += "x"
    return text if high is None else text[:high]


__all__ = ["instance"]
