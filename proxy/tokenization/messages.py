"""OpenAI chat messages -> the plain dicts the chat templates read.

Every render in this package (full encode, incremental fragment, assistant rendering, last-step) goes through
:func:`normalize_messages`, so the same conversation always reaches the template in the same shape:

- ``content``: a string. ``None`` becomes ``""``; a content-part list ``[{"type": "text", "text": ...}, ...]`` is
  flattened by concatenating the texts with no separator (what Qwen3.5's ``render_content`` does; Qwen3's template
  would render a list as ``""``). Any non-text part (images, audio) is refused: this proxy is text-only.
- ``tool_calls[].function.arguments``: always an object. A JSON string is parsed (Qwen3.5's template rejects
  strings); an empty or blank string means ``{}``; JSON that is not an object is refused.
- ``reasoning_content``: kept when it is a string; ``reasoning`` or ``thinking`` are accepted as aliases (as
  transformers does). Whether an echoed assistant message should carry its reasoning is the prefix trie's decision,
  not this module's: the template gets exactly what the caller passes.
- ``role``: one of system, user, assistant, tool; anything else is refused (Qwen3's template would silently drop it).
- ``name`` and ``tool_call_id`` are kept when they are strings; every other key is dropped.

A message that cannot be normalized raises :class:`MessageError`; callers turn it into an ``invalid_message``
failure, never a crash.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

#: the roles a message may have (the API edge has renamed ``developer`` to ``system`` before a message gets here)
ROLES = frozenset({"system", "user", "assistant", "tool"})
#: the field names an assistant's reasoning may come under, in the order they are read (every layer reads them so)
REASONING_ALIASES = ("reasoning_content", "reasoning", "thinking")


class MessageError(ValueError):
    """A message could not be turned into template input (the text says which message and why)."""


def flatten_content(content: Any) -> str:
    """A message content (string, ``None`` or list of text parts) as one string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise MessageError(f"unsupported content part {kind!r}: only text parts are accepted")
        return "".join(texts)
    raise MessageError(f"content must be a string, null or a list of text parts, not {type(content).__name__}")


def parse_arguments(arguments: Any) -> dict[str, Any]:
    """Tool-call arguments as an object: JSON strings are parsed, blank strings are ``{}``."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            raise MessageError(f"tool-call arguments are not valid JSON: {exc}") from None
    if not isinstance(arguments, Mapping):
        raise MessageError(f"tool-call arguments must be a JSON object, not {type(arguments).__name__}")
    return dict(arguments)


def normalize_tool_call(call: Any) -> dict[str, Any]:
    """One OpenAI tool call as ``{"id"?, "type": "function", "function": {"name", "arguments": {...}}}``."""
    if not isinstance(call, Mapping):
        raise MessageError(f"a tool call must be an object, not {type(call).__name__}")
    function = call.get("function", call)
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise MessageError("a tool call needs function.name as a string")
    out: dict[str, Any] = {
        "type": "function",
        "function": {"name": function["name"], "arguments": parse_arguments(function.get("arguments"))},
    }
    if isinstance(call.get("id"), str):
        out["id"] = call["id"]
    return out


def normalize_message(message: Any) -> dict[str, Any]:
    """One OpenAI message as the plain dict the templates read (see the module docstring)."""
    if not isinstance(message, Mapping):
        raise MessageError(f"a message must be an object, not {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise MessageError(f"unsupported role {role!r}; expected one of {sorted(ROLES)}")
    out: dict[str, Any] = {"role": role, "content": flatten_content(message.get("content"))}
    for key in ("name", "tool_call_id"):
        if isinstance(message.get(key), str):
            out[key] = message[key]
    if role == "assistant":
        reasoning = next((message[k] for k in REASONING_ALIASES if isinstance(message.get(k), str)), None)
        if reasoning is not None:
            out["reasoning_content"] = reasoning
        calls = message.get("tool_calls")
        if calls:
            if not isinstance(calls, Sequence) or isinstance(calls, (str, bytes)):
                raise MessageError("tool_calls must be a list")
            out["tool_calls"] = [normalize_tool_call(call) for call in calls]
    return out


def normalize_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """All messages normalized; a :class:`MessageError` names the index of the first bad one."""
    out = []
    for index, message in enumerate(messages):
        try:
            out.append(normalize_message(message))
        except MessageError as exc:
            raise MessageError(f"messages[{index}]: {exc}") from None
    return out
