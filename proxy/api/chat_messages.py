"""The ``messages`` of a chat request, validated and rebuilt as fresh, clean dicts (what the chat template renders
and the session trie keys on). Every problem is an :class:`~proxy.api.errors.ApiError` (4xx) naming the field.

- **Roles**: system, user, assistant, tool. ``developer`` (OpenAI's newer name for system instructions) becomes
  ``system``: the chat templates know no developer role. The legacy ``function`` role is ``unsupported_parameter``;
  any other role is ``invalid_request``.
- **Content**: a string; an array of text parts (``{"type": "text", "text": ...}``, ``type`` may be omitted),
  rebuilt as ``[{"type": "text", "text": ...}]`` (extra part keys such as ``cache_control`` dropped); or ``null``
  / absent, for assistant messages only. Image, audio and file parts are ``unsupported_parameter`` naming the part:
  the proxy serves text-only models and records text tokens.
- **Assistant messages** keep ``content``, ``name``, ``reasoning_content`` (the aliases ``reasoning`` and
  ``thinking`` are read in that order and stored as ``reasoning_content``) and ``tool_calls``. A tool call needs a
  non-empty ``function.name``; ``type`` must be ``"function"`` when present (custom tools are unsupported);
  ``id`` is optional. ``arguments`` may be a JSON string or an object and is kept as given (missing means
  ``"{}"``); a string must parse to a JSON object (blank means ``{}``), because the chat templates need an object,
  and that object must be valid Unicode like the body itself (no ``\\ud800`` escape of a lone surrogate inside it).
- **Tool messages** keep ``content``, ``tool_call_id`` (optional: the Qwen templates do not render it) and ``name``.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.api.chat_tools import function_of
from proxy.api.errors import ApiError
from proxy.api.fields import check_json, json_type, optional_str, require_valid_unicode, shown
from proxy.tokenization.messages import REASONING_ALIASES, ROLES

#: content-part types that are valid OpenAI input but not text
NON_TEXT_PARTS = frozenset({"image_url", "input_image", "image", "input_audio", "audio", "file", "input_file"})


def messages_from_json(value: Any) -> tuple[dict[str, Any], ...]:
    """The request's ``messages``: a non-empty array, each message checked and rebuilt."""
    if not isinstance(value, list):
        raise ApiError.invalid_request(f"messages must be an array, not {json_type(value)}", "messages")
    if not value:
        raise ApiError.invalid_request("messages must not be empty", "messages")
    out = []
    for index, message in enumerate(value):
        # The usual message, {"role": <system|user|assistant>, "content": <string>}, is already what the checks below
        # would rebuild: copied as is (issue 21: a long conversation re-sends hundreds of them each turn). Anything
        # else, the same message with other keys or types included, takes the full check.
        if type(message) is dict and len(message) == 2:
            role, content = message.get("role"), message.get("content")
            if type(content) is str and type(role) is str and role in _PLAIN_ROLES:
                out.append({"role": role, "content": content})
                continue
        out.append(_message(message, f"messages[{index}]"))
    return tuple(out)


#: roles whose {"role", "content": string} message the full check keeps unchanged (developer is renamed; tool and
#: function have their own rules)
_PLAIN_ROLES = frozenset({"system", "user", "assistant"})


def _message(message: Any, where: str) -> dict[str, Any]:
    if not isinstance(message, dict):
        raise ApiError.invalid_request(f"{where} must be an object, not {json_type(message)}", where)
    role = message.get("role")
    if role == "developer":
        role = "system"
    elif role == "function":
        raise ApiError.unsupported_parameter(
            f"{where}: the legacy function role is not supported; use tool messages", f"{where}.role"
        )
    elif not isinstance(role, str) or role not in ROLES:
        raise ApiError.invalid_request(
            f"{where}.role must be one of system, developer, user, assistant, tool, not {shown(role)}", f"{where}.role"
        )
    out: dict[str, Any] = {"role": role, "content": _content(message.get("content"), f"{where}.content", role)}
    name = optional_str(message, "name", f"{where}.name")
    if name is not None:
        out["name"] = name
    if role == "tool":
        call_id = optional_str(message, "tool_call_id", f"{where}.tool_call_id")
        if call_id is not None:
            out["tool_call_id"] = call_id
    elif role == "assistant":
        for alias in REASONING_ALIASES:
            reasoning = message.get(alias)
            if reasoning is None:
                continue
            if not isinstance(reasoning, str):
                raise ApiError.invalid_request(
                    f"{where}.{alias} must be a string, not {json_type(reasoning)}", f"{where}.{alias}"
                )
            out["reasoning_content"] = reasoning
            break
        calls = message.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise ApiError.invalid_request(
                    f"{where}.tool_calls must be an array, not {json_type(calls)}", f"{where}.tool_calls"
                )
            if calls:
                out["tool_calls"] = [_tool_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls)]
    return out


def _content(content: Any, where: str, role: str) -> str | list[dict[str, str]] | None:
    if isinstance(content, str):
        return content
    if content is None:
        if role == "assistant":
            return None
        raise ApiError.invalid_request(f"{where} is required for a {role} message", where)
    if not isinstance(content, list):
        raise ApiError.invalid_request(
            f"{where} must be a string or an array of text parts, not {json_type(content)}", where
        )
    parts = []
    for index, part in enumerate(content):
        param = f"{where}[{index}]"
        if not isinstance(part, dict):
            raise ApiError.invalid_request(f"{param} must be a content-part object, not {json_type(part)}", param)
        kind = part.get("type")
        if kind is None:
            kind = "text"
        if isinstance(kind, str) and kind in NON_TEXT_PARTS:
            raise ApiError.unsupported_parameter(
                f"{param} is a {kind} part: this proxy serves text-only models; send text parts only", param
            )
        if kind != "text":
            raise ApiError.invalid_request(f"{param} has an unknown content-part type {shown(kind)}", f"{param}.type")
        text = part.get("text")
        if not isinstance(text, str):
            raise ApiError.invalid_request(f"{param}.text must be a string, not {json_type(text)}", f"{param}.text")
        parts.append({"type": "text", "text": text})
    return parts


def _tool_call(call: Any, where: str) -> dict[str, Any]:
    function, name = function_of(call, where, "function tool calls")
    arguments = _arguments(function.get("arguments"), f"{where}.function.arguments")
    out: dict[str, Any] = {}
    call_id = optional_str(call, "id", f"{where}.id")
    if call_id is not None:
        out["id"] = call_id
    out["type"] = "function"
    out["function"] = {"name": name, "arguments": arguments}
    return out


def _arguments(arguments: Any, where: str) -> str | dict[str, Any]:
    if arguments is None:
        return "{}"
    if isinstance(arguments, dict):
        return check_json(arguments, where)
    if not isinstance(arguments, str):
        raise ApiError.invalid_request(
            f"{where} must be a JSON string or an object, not {json_type(arguments)}", where
        )
    if arguments.strip():
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):
            raise ApiError.invalid_request(f"{where} is not valid JSON", where) from None
        if not isinstance(parsed, dict):
            raise ApiError.invalid_request(f"{where} must encode a JSON object, not {json_type(parsed)}", where)
        _require_unicode_arguments(parsed, where)
    return arguments


def _require_unicode_arguments(parsed: dict[str, Any], where: str) -> None:
    """The object an arguments string encodes is what the chat template renders: a ``\\ud800`` escape inside the
    string (valid text itself) would decode to a lone surrogate there and fail the tokenizer (a 500). Refused like
    a lone surrogate anywhere in the body (``proxy.api.fields``), naming the arguments field."""
    try:
        require_valid_unicode(parsed, where)
    except ApiError as exc:
        raise ApiError.invalid_request(
            f"{where} encodes a string that is not valid Unicode (at {exc.param}: a JSON escape of a lone UTF-16 "
            "surrogate); every string must be valid Unicode",
            where,
        ) from None


__all__ = ["NON_TEXT_PARTS", "messages_from_json"]
