"""The engine's deterministic plausible text: sentences, the topic of a user's message, and a plausible value for a
tool parameter. Everything is a function of a hash (``determinism.stable_hash``) and the conversation, never of
randomness or time.

Shared by the default policy (:mod:`engine.policy`: its replies and tool-call arguments) and the JSON-schema
instances of constrained output (:mod:`engine.schema_instances`: a string parameter named ``city`` gets a city).
"""

from __future__ import annotations

import re
from typing import Any

from .determinism import stable_hash

#: the words of every generated sentence
_WORDS = (
    "the", "plan", "is", "to", "check", "each", "step", "carefully", "and", "then", "report", "what", "was",
    "found", "clearly", "results", "look", "consistent", "with", "expectations", "so", "far", "overall", "value",
    "summary", "details", "answer", "question", "data", "simple", "short", "next", "first", "finally",
)
#: the values of parameters that name a place
_CITIES = ("Paris", "Berlin", "Tokyo", "Lima", "Oslo", "Cairo")


def sentence(h: int, n_words: int) -> str:
    """``n_words`` words chosen by ``h``, as a capitalized sentence."""
    words = [_WORDS[stable_hash("word", h, i) % len(_WORDS)] for i in range(n_words)]
    return " ".join(words).capitalize() + "."


def topic(user_text: str) -> str:
    """The first few words of the user's text, quoted (what a reply is "about")."""
    words = re.findall(r"[A-Za-z0-9']+", user_text)
    return '"' + " ".join(words[:6]) + '"' if words else "this request"


def argument_value(name: str, schema: Any, h: int, user_text: str) -> Any:
    """A plausible value for one parameter, from its JSON schema (enum, type) and its name."""
    schema = schema if isinstance(schema, dict) else {}
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][h % len(schema["enum"])]
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        return h % 100
    if kind == "number":
        return round((h % 10000) / 100, 2)
    if kind == "boolean":
        return bool(h % 2)
    if kind == "array":
        return [argument_value(name, schema.get("items", {"type": "string"}), h >> 7, user_text)]
    if kind == "object":
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        return {key: argument_value(key, sub, h >> 5, user_text) for key, sub in list(properties.items())[:3]}
    lowered = name.lower()
    if any(part in lowered for part in ("city", "location", "place", "town")):
        return _CITIES[h % len(_CITIES)]
    if any(part in lowered for part in ("query", "question", "text", "prompt", "search")):
        return topic(user_text).strip('"')
    return f"{_WORDS[h % len(_WORDS)]}_{h % 1000}"


__all__ = ["argument_value", "sentence", "topic"]
