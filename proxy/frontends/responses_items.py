"""Responses API items <-> chat messages: the one translation both directions of ``/v1/responses`` share.

``items_to_messages`` turns an ``input`` item list (or a response's ``output``, which is the same kind of list) into
chat messages. Output items become exactly the chat assistant message the proxy recorded when it generated them, so
an agent that echoes its items back continues its checkpoint (``docs/sessions.md``, "Matching rules"): the trie keys
an assistant message on its content and tool calls (id, name, arguments) and picks its reasoning variant by its
``reasoning_content``.

Grouping (the Responses API flattens one assistant turn into several items; the chat model has one message):

- a ``reasoning`` item starts a new assistant message (its text is that message's ``reasoning_content``);
- an assistant ``message`` item joins the open assistant message if that one has neither content nor tool calls
  yet (i.e. it follows the turn's reasoning), else starts a new one;
- a ``function_call`` item joins the open assistant message as one more ``tool_calls`` entry (``call_id`` is the
  chat tool call id), else starts a new one;
- any other item (user/system/developer messages, ``function_call_output``) closes the open assistant message;
- an item whose id carries another response's tag (the proxy's ids are ``<kind>_<response tag>_<n>``,
  :func:`item_id`) starts a new assistant message: two answers in a row (text, then calls without reasoning) stay
  two messages. Ids of other forms (or none) leave the positional rules above alone.

Reasoning text is read from the item's ``content`` (``reasoning_text`` parts, as the proxy answers), else its
``summary`` (``summary_text`` parts), else the proxy's own ``encrypted_content`` (:func:`encrypt_reasoning`, for a
client that asked for ``include: ["reasoning.encrypted_content"]`` and echoes only that, as Codex CLI does).
Items the proxy cannot serve (images, files, hosted-tool calls, ``item_reference``) are ``unsupported_parameter``
naming the item.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator
from typing import Any

from proxy.api.errors import ApiError
from proxy.api.fields import json_type, shown

#: the prefix of the ``encrypted_content`` the proxy writes: the reasoning text, base64 (nothing is secret here;
#: the field exists so a stateless client can hand the reasoning back)
ENCRYPTED_PREFIX = "dressage-reasoning-v1:"
#: text content-part types, read as text in any message
TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})
#: roles of input messages (``developer`` becomes ``system`` in the chat model)
INPUT_ROLES = frozenset({"user", "system", "developer", "assistant"})


def item_id(prefix: str, tag: str, index: int) -> str:
    """The id of output item ``index`` of the response tagged ``tag`` (its id without ``resp_``)."""
    return f"{prefix}_{tag}_{index}"


def _tag_of(item: dict[str, Any]) -> str | None:
    """The response tag of an item id the proxy wrote (``<kind>_<tag>_<n>``), else None."""
    value = item.get("id")
    if not isinstance(value, str):
        return None
    parts = value.split("_")
    return parts[1] if len(parts) == 3 and parts[2].isdigit() and len(parts[1]) == 32 else None


def objects_of(value: list[Any], where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(path, object)`` for each entry of the array ``value`` at ``where``; a non-object entry is refused."""
    for index, entry in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(entry, dict):
            raise ApiError.invalid_request(f"{at} must be an object, not {json_type(entry)}", at)
        yield at, entry


def encrypt_reasoning(text: str) -> str:
    """The ``encrypted_content`` of a reasoning item the proxy answers: its text, recoverable by the proxy."""
    return ENCRYPTED_PREFIX + base64.b64encode(text.encode("utf-8")).decode("ascii")


def decrypt_reasoning(value: Any) -> str | None:
    """The text of an ``encrypted_content`` the proxy wrote, or None (someone else's, or not a string)."""
    if not isinstance(value, str) or not value.startswith(ENCRYPTED_PREFIX):
        return None
    try:
        return base64.b64decode(value[len(ENCRYPTED_PREFIX):], validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def items_to_messages(items: Any, where: str = "input") -> list[dict[str, Any]]:
    """Chat messages for a Responses ``input``: a string (one user message) or an array of items."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise ApiError.invalid_request(f"{where} must be a string or an array of items, not {json_type(items)}", where)
    messages: list[dict[str, Any]] = []
    open_turn: dict[str, Any] | None = None  # the assistant message items are still joining
    open_tag: str | None = None  # the response tag of the open turn's items (None: not the proxy's ids)
    for at, item in objects_of(items, where):
        kind = item.get("type", "message")  # EasyInputMessage may omit its type
        tag = _tag_of(item)
        if open_turn is not None and tag is not None and open_tag is not None and tag != open_tag:
            open_turn = None  # another answer's item
        if open_turn is None or open_tag is None:
            open_tag = tag
        if kind == "message":
            message = _message(item, at)
            if message["role"] != "assistant":
                open_turn = None
                messages.append(message)
            elif open_turn is not None and not open_turn.get("content") and not open_turn.get("tool_calls"):
                open_turn["content"] = message["content"]
            else:
                open_turn = message
                messages.append(open_turn)
        elif kind == "reasoning":
            open_turn = {"role": "assistant", "content": None}
            reasoning = _reasoning_text(item, at)
            if reasoning is not None:
                open_turn["reasoning_content"] = reasoning
            messages.append(open_turn)
        elif kind == "function_call":
            if open_turn is None:
                open_turn = {"role": "assistant", "content": None}
                messages.append(open_turn)
            open_turn.setdefault("tool_calls", []).append(_function_call(item, at))
        elif kind == "function_call_output":
            open_turn = None
            messages.append(_function_call_output(item, at))
        elif isinstance(kind, str):
            raise ApiError.unsupported_parameter(
                f"{at} is a {shown(kind)} item: only message, reasoning, function_call and function_call_output "
                "items are supported (the proxy serves function tools of a text model; it keeps no items by id)",
                f"{at}.type",
            )
        else:
            raise ApiError.invalid_request(f"{at}.type must be a string, not {json_type(kind)}", f"{at}.type")
    return messages


def _message(item: dict[str, Any], at: str) -> dict[str, Any]:
    role = item.get("role")
    if not isinstance(role, str) or role not in INPUT_ROLES:
        raise ApiError.invalid_request(
            f"{at}.role must be one of user, system, developer, assistant, not {shown(role)}", f"{at}.role"
        )
    content = item.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "".join(_part_text(part, f"{at}.content[{i}]") for i, part in enumerate(content))
    else:
        raise ApiError.invalid_request(
            f"{at}.content must be a string or an array of content parts, not {json_type(content)}", f"{at}.content"
        )
    return {"role": "system" if role == "developer" else role, "content": text}


def _part_text(part: Any, at: str) -> str:
    if not isinstance(part, dict):
        raise ApiError.invalid_request(f"{at} must be a content-part object, not {json_type(part)}", at)
    kind = part.get("type")
    if kind == "refusal":
        text = part.get("refusal")
    elif kind in TEXT_PARTS:
        text = part.get("text")
    elif isinstance(kind, str):
        raise ApiError.unsupported_parameter(
            f"{at} is a {shown(kind)} part: this proxy serves text-only models; send input_text parts only", at
        )
    else:
        raise ApiError.invalid_request(f"{at}.type must be a string, not {json_type(kind)}", f"{at}.type")
    if not isinstance(text, str):
        raise ApiError.invalid_request(f"{at}.text must be a string, not {json_type(text)}", f"{at}.text")
    return text


def _reasoning_text(item: dict[str, Any], at: str) -> str | None:
    for key in ("content", "summary"):
        parts = item.get(key)
        if parts is None:
            continue
        if not isinstance(parts, list):
            raise ApiError.invalid_request(f"{at}.{key} must be an array, not {json_type(parts)}", f"{at}.{key}")
        if parts:
            return "\n\n".join(_part_text(part, f"{at}.{key}[{i}]") for i, part in enumerate(parts))
    return decrypt_reasoning(item.get("encrypted_content"))


def _function_call(item: dict[str, Any], at: str) -> dict[str, Any]:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments", "{}")
    for key, value in (("call_id", call_id), ("name", name)):
        if not isinstance(value, str) or not value:
            raise ApiError.invalid_request(f"{at}.{key} must be a non-empty string, not {shown(value)}", f"{at}.{key}")
    if not isinstance(arguments, str):
        raise ApiError.invalid_request(
            f"{at}.arguments must be a JSON string, not {json_type(arguments)}", f"{at}.arguments"
        )
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _function_call_output(item: dict[str, Any], at: str) -> dict[str, Any]:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str) or not call_id:
        raise ApiError.invalid_request(
            f"{at}.call_id must be a non-empty string, not {shown(call_id)}", f"{at}.call_id"
        )
    if isinstance(output, list):
        output = "".join(_part_text(part, f"{at}.output[{i}]") for i, part in enumerate(output))
    elif not isinstance(output, str):
        raise ApiError.invalid_request(
            f"{at}.output must be a string or an array of input_text parts, not {json_type(output)}", f"{at}.output"
        )
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def merge_leading_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with its leading system messages (``instructions``, ``system`` and ``developer`` input
    messages before the first other message) joined into one, blank-line separated: the Qwen templates take one
    system message, first (Qwen3.5's refuses a second), and Codex CLI sends two ``developer`` messages. Applied to
    the whole conversation every turn, so the same history always renders the same prompt."""
    count = 0
    while count < len(messages) and messages[count]["role"] == "system":
        count += 1
    if count < 2:
        return messages
    text = "\n\n".join(message["content"] for message in messages[:count])
    return [{"role": "system", "content": text}, *messages[count:]]


__all__ = ["ENCRYPTED_PREFIX", "decrypt_reasoning", "encrypt_reasoning", "item_id", "items_to_messages", "merge_leading_system",
           "objects_of"]
