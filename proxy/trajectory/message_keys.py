"""Canonical keys: what makes two messages "the same" edge of the prefix trie, and two requests the same context.

Matching rules (spec 5.1, documented in docs/sessions.md):

- A message's key is its role, its content, its name, its tool calls and its ``tool_call_id``. Content is compared
  as the template sees it: ``None`` and ``""`` are equal, a list of text parts equals the concatenation of its texts
  (other content is compared as canonical JSON). A tool call is its id (kept: a client that rewrites call ids
  rewrote its history), its function name, and its arguments parsed from JSON and re-serialized canonically (sorted
  keys, no whitespace), so ``'{"a": 1, "b": 2}'``, ``'{"b":2,"a":1}'`` and the object ``{"a": 1, "b": 2}`` are the
  same call. Arguments that are not valid JSON are compared as the raw string. ``type`` and unknown fields are
  ignored.
- ``reasoning_content`` (or its aliases ``reasoning`` / ``thinking``) is **not** part of the key. It is the
  *variant* of an assistant node: two generated answers that differ only in their reasoning are two sibling nodes
  with the same key, and an echoed assistant message picks the variant with its exact reasoning if there is one,
  otherwise the most recently committed variant. So an agent that drops (or trims) the reasoning when it echoes the
  history still continues its own chain; see :func:`reasoning_variant`.
- With ``ignore_cch`` (``--ignore-cch-for-prefix-hash``), every ``cch=[A-Za-z0-9_-]+`` inside content, names and
  tool-call arguments is replaced by ``cch=*`` in the key only. The stored messages are never changed.
- The context key, the trie's first level, is the canonical JSON of the tool schemas (their order kept: it is the
  order the template renders) and of the *effective* chat-template kwargs: the proxy's defaults overridden by the
  request's, minus the variables the proxy controls itself (``messages``, ``tools``, ``add_generation_prompt``...).

Keys are plain frozen values: cheap to build (a string content is used as is, or packed from
``packed_text.PACK_AT`` characters: compressed, equal by a digest; JSON work only for tool calls, cached by argument
string, and non-string content), hashable, and never hold the original message.

Incremental keys (issue 21 item 4): every request re-sends the whole history, so the session reuses the key of every
leading message that is :func:`same_message` as the one its trie stored on that path (``PrefixTrie.echoed_prefix``)
and computes keys only for the rest. ``same_message`` is strict (the same JSON types all the way down, floats by
their text), so a message it calls the same has the same key and variant: an earlier message that changed in any
way a key can see is keyed again and matched exactly as before.
"""

from __future__ import annotations

import functools
import json
import operator
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from proxy.canonical_json import canonical_json
from proxy.trajectory.packed_text import PACK_AT, PackedText, packed
from proxy.tokenization.messages import REASONING_ALIASES
from proxy.tokenization.tito import RESERVED_TEMPLATE_KWARGS

# The billing-hash pattern one coding CLI rewrites inside old tool results (spec 5.1).
CCH_PATTERN = re.compile(r"cch=[A-Za-z0-9_-]+")
_CCH_PLACEHOLDER = "cch=*"


class MessageKeyError(ValueError):
    """A message is not an object with a string role: it cannot be a trie edge (the API answers 400)."""


# No cached hash (issue 21 item 5: 64 bytes a key, one key per message a session holds): a key's hash is its fields'
# tuple hash, and the strings in it cache their own hashes, so the O(text) part is paid once either way.
@attrs.frozen(weakref_slot=False)
class ToolCallKey:
    """One tool call as compared: id (kept), function name, canonical arguments."""

    call_id: str | None
    name: str
    # Canonical JSON of the parsed arguments, or ``"raw:" + the string`` when it is not valid JSON; packed from
    # PACK_AT characters (equal by digest).
    arguments: str | PackedText


@attrs.frozen(weakref_slot=False)
class MessageKey:
    """The canonical identity of one message: a trie edge. Reasoning is deliberately absent (it is the variant)."""

    role: str
    # The text the template sees (a PackedText from ``PACK_AT`` characters: packed_text.py), or ``("json", canonical
    # JSON)`` for content that is not text (a tuple, so it never equals a string).
    content: str | PackedText | tuple[str, str]
    name: str | None = None
    tool_calls: tuple[ToolCallKey, ...] = ()
    tool_call_id: str | None = None


class PlainKey(tuple):
    """The key of a message with no name, tool calls or call id (nearly every message of a conversation): a
    :class:`MessageKey`'s role and content alone, as a ``(role, content)`` tuple. It reads like a MessageKey (the
    three absent fields are class attributes). :func:`message_key` builds a PlainKey exactly when those fields are
    absent, so the two kinds never describe the same message (an attrs key never equals a tuple).

    A tuple, not a class of slots: a trie node of a plain message holds the role and content itself, and builds its
    key when asked (``prefix_trie.py:TrieNode.key``), which a tuple makes cheap (~0.2 us, where a slotted class with
    its frozen ``__setattr__`` took ~1.5: issue 21 item 5)."""

    __slots__ = ()
    name: str | None = None
    tool_calls: tuple[ToolCallKey, ...] = ()
    tool_call_id: str | None = None
    role = property(operator.itemgetter(0))
    content = property(operator.itemgetter(1))

    def __new__(cls, role: str, content: str | PackedText | tuple[str, str]) -> PlainKey:
        return tuple.__new__(cls, (role, content))

    def __getnewargs__(self) -> tuple[Any, Any]:  # copy and pickle call __new__ with these (a tuple's: one tuple)
        return self[0], self[1]

    def __repr__(self) -> str:
        return f"PlainKey(role={self[0]!r}, content={self[1]!r})"


@attrs.frozen(cache_hash=True)
class ContextKey:
    """The trie's first level: canonical tool schemas and effective chat-template kwargs."""

    # Canonical JSON of the tools list (order kept), or None without tools (an empty list counts as none).
    tools: str | None
    # Canonical JSON of the effective template kwargs (sorted keys).
    template_kwargs: str


def _text(value: str, ignore_cch: bool) -> str:
    """A string as compared: with ``ignore_cch``, billing hashes are blanked."""
    return CCH_PATTERN.sub(_CCH_PLACEHOLDER, value) if ignore_cch and "cch=" in value else value


def _content(content: Any, ignore_cch: bool) -> str | PackedText | tuple[str, str]:
    """Content as the template sees it: text, or a list of text parts joined (packed from ``PACK_AT`` characters);
    anything else as canonical JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return packed(_text(content, ignore_cch))
    if isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                # Not text (an image part...): compare the whole content structurally; tokenization will refuse it.
                return ("json", _text(canonical_json(content), ignore_cch))
        return packed(_text("".join(texts), ignore_cch))
    return ("json", _text(canonical_json(content), ignore_cch))


def _canonical_arguments(arguments: str, ignore_cch: bool) -> str:
    """Canonical form of a JSON arguments string."""
    if not arguments.strip():
        return "{}"
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return "raw:" + _text(arguments, ignore_cch)
    return _text(canonical_json(parsed), ignore_cch)


#: Short arguments' canonical forms, cached by value: the same strings come back turn after turn (a dict lookup
#: instead of a JSON round trip). Long ones are not kept: 16,384 entries of file contents an agent wrote would hold
#: hundreds of megabytes after their sessions ended (issue 21 item 5), and keys are computed once per new message.
_cached_arguments = functools.lru_cache(maxsize=16_384)(_canonical_arguments)


def _arguments_text(arguments: str, ignore_cch: bool) -> str | PackedText:
    """Canonical form of a JSON arguments string, packed from ``PACK_AT`` characters (decided on the canonical text
    alone, so two spellings of the same arguments key alike)."""
    if len(arguments) >= PACK_AT:
        return packed(_canonical_arguments(arguments, ignore_cch))
    return packed(_cached_arguments(arguments, ignore_cch))


def _arguments(arguments: Any, ignore_cch: bool) -> str | PackedText:
    """Tool-call arguments parsed from JSON and re-serialized canonically (blank means ``{}``), packed when long."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return _arguments_text(arguments, ignore_cch)
    return packed(_text(canonical_json(arguments), ignore_cch))


def _is_mapping(value: Any) -> bool:
    """``isinstance(value, Mapping)``, with the common case (a dict parsed from JSON) first: ABC checks are slow."""
    return type(value) is dict or isinstance(value, Mapping)


def _tool_call(call: Any, ignore_cch: bool) -> ToolCallKey:
    """One OpenAI tool call (``{"id", "function": {"name", "arguments"}}``, or the function object itself)."""
    if not _is_mapping(call):
        return ToolCallKey(None, "", "raw:" + canonical_json(call))
    function = call.get("function", call)
    if not _is_mapping(function):
        function = {}
    call_id = call.get("id") if isinstance(call.get("id"), str) else None
    name = function.get("name") if isinstance(function.get("name"), str) else ""
    return ToolCallKey(call_id, _text(name, ignore_cch), _arguments(function.get("arguments"), ignore_cch))


_ROLES = {role: role for role in ("system", "developer", "user", "assistant", "tool", "function")}


def message_key(message: Any, *, ignore_cch: bool = False) -> MessageKey | PlainKey:
    """The canonical key of one OpenAI chat message (see the module docstring): a :class:`PlainKey` when it has no
    name, tool calls or call id; raises :class:`MessageKeyError`."""
    if not _is_mapping(message):
        raise MessageKeyError(f"a message must be an object, not {type(message).__name__}")
    role = message.get("role")
    if not isinstance(role, str):
        raise MessageKeyError(f"a message needs a string role, not {role!r}")
    # One string object per known role: a parsed body holds a new "user" per message, ~53 bytes a key kept
    role = _ROLES.get(role, role)
    name = message.get("name")
    call_id = message.get("tool_call_id")
    calls = message.get("tool_calls") or ()
    # The common types first: the Sequence ABC check is slow.
    if type(calls) not in (list, tuple) and (isinstance(calls, (str, bytes)) or not isinstance(calls, Sequence)):
        calls = (calls,)
    if not calls and not isinstance(name, str) and not isinstance(call_id, str):
        return PlainKey(role, _content(message.get("content"), ignore_cch))
    return MessageKey(
        role=role,
        content=_content(message.get("content"), ignore_cch),
        name=_text(name, ignore_cch) if isinstance(name, str) else None,
        tool_calls=tuple(_tool_call(call, ignore_cch) for call in calls),
        tool_call_id=call_id if isinstance(call_id, str) else None,
    )


_MISSING = object()


def same_message(stored: Any, incoming: Any) -> bool:
    """``stored == incoming`` with the same types all the way down (dicts, lists, strings, ints, bools, None; floats
    by their repr, which is the text canonical JSON writes): then :func:`message_key` (under either ``ignore_cch``)
    and :func:`reasoning_variant` read the same from both. Plain ``==`` is not enough: ``1 == 1.0 == True`` and
    ``0.0 == -0.0`` have different canonical JSON, so a key can tell them apart. Anything else (a tuple, a custom
    mapping) is never the same: its key is computed. O(size of the message), C-level for strings."""
    kind = type(stored)
    if kind is PackedText:  # a long content a node holds packed (node_contents.py): by its digest
        return stored.matches(incoming)
    if kind is not type(incoming):
        return False
    if kind is str or kind is int or kind is bool or stored is None:
        return stored == incoming
    if kind is dict:
        if len(stored) != len(incoming):
            return False
        for name, value in stored.items():
            other = incoming.get(name, _MISSING)
            if type(value) is str:  # the usual value (role, content), inline: no call per value
                if type(other) is not str or value != other:
                    return False
            elif other is _MISSING or not same_message(value, other):
                return False
        return True
    if kind is list:
        return len(stored) == len(incoming) and all(map(same_message, stored, incoming))
    if kind is float:
        return repr(stored) == repr(incoming)
    return False


def reasoning_variant(message: Any) -> str | PackedText | None:
    """An assistant message's reasoning, which tells sibling answers with the same key apart: the first of
    ``reasoning_content``, ``reasoning``, ``thinking`` that is a non-empty string, as a key holds text (packed from
    ``PACK_AT`` characters, so variants compare with ``==`` whichever side was packed first); None when there is none.
    A trie node's stored answer holds a long reasoning already packed (``node_contents.py``).

    It is never part of the key: see :mod:`proxy.trajectory.prefix_trie` for how an echo picks its variant.
    """
    if not _is_mapping(message) or message.get("role") != "assistant":
        return None
    for alias in REASONING_ALIASES:
        value = message.get(alias)
        if isinstance(value, str):
            return packed(value) if value else None
        if type(value) is PackedText:
            return value
    return None


def effective_template_kwargs(
    request_kwargs: Mapping[str, Any] | None, defaults: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The proxy's default chat-template kwargs overridden by the request's, minus the reserved variables."""
    merged = {**(defaults or {}), **(request_kwargs or {})}
    return {key: value for key, value in merged.items() if key not in RESERVED_TEMPLATE_KWARGS}


def context_key(
    tools: Sequence[Any] | None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    *,
    default_template_kwargs: Mapping[str, Any] | None = None,
) -> ContextKey:
    """The context key of a request: canonical tools and effective template kwargs."""
    kwargs = effective_template_kwargs(chat_template_kwargs, default_template_kwargs)
    return ContextKey(canonical_json(list(tools)) if tools else None, canonical_json(kwargs))


__all__ = [
    "CCH_PATTERN", "ContextKey", "MessageKey", "MessageKeyError", "PlainKey", "ToolCallKey",
    "canonical_json", "context_key", "effective_template_kwargs", "message_key", "reasoning_variant", "same_message",
]
