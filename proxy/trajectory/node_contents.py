"""What a trie node keeps of its message or its context, and how it gives the message back (issue 21 item 5).

A session's trie holds every message of its conversation, so what a node keeps of one is most of a live session's
memory. :func:`stored_form` decides it once, when a message node is made:

- a **plain** message, ``{"role": <str>, "content": <str>}`` in that order whose key holds the same two strings (no
  name, tool calls or call id; content the key did not rewrite), is kept as its content (the key's: a string, or the
  :class:`PackedText` of a long one) and its role, a string, which says the node is plain: no key and no dict
  (``TrieNode.key`` and ``TrieNode.message`` rebuild them equal). Most of a conversation's messages are plain; a
  dict and its table were ~184 bytes of each, the key 48;
- any other message is kept as its key and a copy of the message with **every string of** ``PACK_AT`` **characters
  or more packed** wherever it is (content, text parts, reasoning, tool-call arguments, any other field) but the
  role, which is read as it is (``reasoning_variant``): the text an agent's session holds is mostly its long texts
  (files read and written, thinking). A long text the key or
  the reasoning variant already holds packed is that same object (``packed(..., like=...)``: one digest, no second
  compression), so it is held once.

:func:`unpacked` gives the message back exactly (a new container wherever something was packed). The echo walk
compares a stored message with an incoming one by ``same_message``, which compares packed texts by digest.

A context node keeps its :class:`ContextInfo` (tools and template kwargs) and key, shared between the live sessions
that sent the same ones (:func:`context_contents`): every session of a rollout sends the same tool schemas.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import orjson

from proxy.trajectory.message_keys import ContextKey, MessageKey, PlainKey
from proxy.trajectory.packed_text import PackedText, packed, same_text


@attrs.frozen
class ContextInfo:
    """What a context node stores: the request's tools and effective template kwargs (for re-encodes, exports)."""

    tools: tuple[Any, ...] | None
    template_kwargs: Mapping[str, Any]


#: Context keys and infos many sessions hold alike (every session of a rollout sends the same tools), shared while
#: any session holds them: weak tables, since a tool set can be large and a workload may send ever-new ones.
#: (Keyed by the key's strings, not the key: a weak table's entry holds its dict key strongly.)
_CONTEXT_KEYS: weakref.WeakValueDictionary[tuple[str | None, str], ContextKey] = weakref.WeakValueDictionary()
_CONTEXT_INFOS: weakref.WeakValueDictionary[tuple[ContextKey, bytes | None], ContextInfo] = (
    weakref.WeakValueDictionary())


def context_contents(key: ContextKey, tools: Sequence[Any] | None,
                    template_kwargs: Mapping[str, Any]) -> tuple[ContextKey, ContextInfo]:
    """The key and info a new context node keeps (its ``_key`` and ``_message``), shared with other live sessions'
    contexts made of the same request fields (issue 21 item 5: each session held its own copy of the tool schemas,
    often kilobytes, twice: parsed in the info, canonical in the key). The context key is canonical, but the tools
    are shared only between requests that spelled them alike, key order included: a template renders them in the
    order sent (``tojson`` keeps it), so a re-encode renders what this session sent."""
    key = _CONTEXT_KEYS.setdefault((key.tools, key.template_kwargs), key)
    spelled = None
    if tools:
        try:  # the key tells values apart (NaN from null, 1 from 1.0); the spelling adds each object's key order
            spelled = orjson.dumps(list(tools))
        except TypeError:  # not JSON as it stands (a non-string key, an odd value): kept, not shared
            return key, ContextInfo(tuple(tools), types.MappingProxyType(dict(template_kwargs)))
    info = _CONTEXT_INFOS.get((key, spelled))
    if info is None:
        info = ContextInfo(tuple(tools) if tools else None, types.MappingProxyType(dict(template_kwargs)))
        _CONTEXT_INFOS[key, spelled] = info
    return key, info


def stored_form(key: Any, message: Any, variant: Any = None) -> tuple[Any, Any]:
    """What a node keeps of ``key`` and ``message`` (its ``_key`` and ``_message``: the module docstring);
    ``variant`` is the message's reasoning as the caller's lookups computed it (packed when long)."""
    if type(message) is not dict:
        return key, message
    if type(key) is PlainKey and len(message) == 2:
        role = message.get("role")
        if (type(role) is str and role == key.role and same_text(key.content, message.get("content"))
                and next(iter(message)) == "role"):
            return key.content, key.role
    return key, _packed(message, _held_packed(key, variant), keep=_KEPT_AS_IS)


def _held_packed(key: Any, variant: Any) -> tuple[PackedText, ...]:
    """The packed texts the key and the variant already hold (a node's long texts are these, when the same)."""
    held = [variant] if type(variant) is PackedText else []
    if type(key) in (PlainKey, MessageKey):
        if type(key.content) is PackedText:
            held.append(key.content)
        if type(key) is MessageKey:
            held += [call.arguments for call in key.tool_calls if type(call.arguments) is PackedText]
    return tuple(held)


def _packed(value: Any, like: tuple[PackedText, ...], keep: frozenset[str] = frozenset()) -> Any:
    """``value`` with every long string in it packed (one of ``like`` when the same text), but ``keep``'s fields of
    ``value`` itself: a new container wherever one was packed, the same object where none was."""
    kind = type(value)
    if kind is str:
        return packed(value, like)
    if kind is dict:
        out = None
        for name, item in value.items():
            if type(item) in _PACKABLE and name not in keep and (new := _packed(item, like)) is not item:
                if out is None:
                    out = dict(value)
                out[name] = new
        return value if out is None else out
    if kind is list:
        items = [_packed(item, like) for item in value]
        return items if any(new is not item for new, item in zip(items, value)) else value
    return value


def unpacked(value: Any) -> Any:
    """``value`` with every packed text in it unpacked: a new container equal to the one stored wherever one was
    packed, the same object where none was."""
    kind = type(value)
    if kind is PackedText:
        return value.text
    if kind is dict:
        out = None
        for name, item in value.items():
            if type(item) in _UNPACKABLE and (new := unpacked(item)) is not item:
                if out is None:
                    out = dict(value)
                out[name] = new
        return value if out is None else out
    if kind is list:
        items = [unpacked(item) for item in value]
        return items if any(new is not item for new, item in zip(items, value)) else value
    return value


_PACKABLE = (str, dict, list)
#: a message's fields held as they are whatever their length: the role is read as it is (``reasoning_variant``)
_KEPT_AS_IS = frozenset({"role"})
_UNPACKABLE = (PackedText, dict, list)

__all__ = ["ContextInfo", "context_contents", "stored_form", "unpacked"]
