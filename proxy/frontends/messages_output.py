"""``POST /v1/messages``: a chat answer read back as Anthropic's ``Message`` object (non-streaming).

The chat completion of the translated request (``proxy/frontends/chat_bridge.py``) becomes::

    {"id": "msg_...", "type": "message", "role": "assistant", "model",
     "content": [{"type": "thinking", "thinking", "signature"}?, {"type": "text", "text"}?,
                 {"type": "tool_use", "id", "name", "input"}*],
     "stop_reason": "end_turn" | "max_tokens" | "stop_sequence" | "tool_use", "stop_sequence": str | null,
     "usage": {"input_tokens", "output_tokens", "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}

- The blocks hold exactly the recorded assistant message (``reasoning_content``, ``content``, ``tool_calls`` with
  their ids, ``input`` = the parsed arguments), so echoing them back continues the checkpoint
  (``messages_request.py``: the echo rule). Empty reasoning or content makes no block.
- **Signatures**: a thinking block is signed with :func:`thinking_signature`, a hash of its text under this
  proxy's prefix: stable across restarts and across the proxies of a fleet, and recognisable
  (:func:`is_own_signature`) when a client echoes the block back. It is an integrity mark, not a secret: the
  client owns its history anyway.
- **stop_reason**: chat ``length`` -> ``max_tokens``; ``tool_calls`` -> ``tool_use``; ``stop`` -> ``stop_sequence``
  (with ``stop_sequence`` set) when the generation ended on one of the request's ``stop_sequences``, else
  ``end_turn``.
- **usage**: ``input_tokens`` is the whole prompt the proxy sent (the proxy reuses the session's tokens but has no
  prompt cache to bill: the cache counters are 0), ``output_tokens`` every generated token.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

#: the prefix of every signature this proxy writes (versioned, should the scheme ever change)
SIGNATURE_PREFIX = "dressage-v1:"
_SIGNATURE_DOMAIN = b"dressage-proxy thinking signature\0"

#: chat finish_reason -> Anthropic stop_reason (``stop`` is refined by the stop sequence, :func:`stop_reason`)
STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use", "stop": "end_turn"}


def thinking_signature(thinking: str) -> str:
    """The signature of a thinking block's text written by this proxy."""
    digest = hashlib.sha256(_SIGNATURE_DOMAIN + thinking.encode("utf-8", "surrogatepass")).hexdigest()
    return SIGNATURE_PREFIX + digest[:40]


def is_own_signature(thinking: str, signature: str) -> bool:
    """Whether ``signature`` is this proxy's for ``thinking`` (the block came from this proxy, unchanged)."""
    return signature.startswith(SIGNATURE_PREFIX) and signature == thinking_signature(thinking)


def stop_reason(finish_reason: str | None, matched_stop: Any, stop_sequences: Sequence[str] | None) -> tuple[str, str | None]:
    """``(stop_reason, stop_sequence)`` of a chat ``finish_reason``; ``matched_stop`` is what the generation
    stopped on (SGLang's ``matched``: a stop string, a token id, or None)."""
    if finish_reason == "stop" and isinstance(matched_stop, str) and matched_stop in (stop_sequences or ()):
        return "stop_sequence", matched_stop
    return STOP_REASONS.get(finish_reason or "stop", "end_turn"), None


def message_id(request_id: str) -> str:
    """An Anthropic-style id (``msg_...``) from a request id (``req_<hex>``)."""
    return "msg_" + request_id.rsplit("_", 1)[-1]


def tool_input(arguments: Any) -> dict[str, Any]:
    """A tool call's ``input`` object from its chat ``arguments`` (JSON text; the parsers always write an object)."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments) if isinstance(arguments, str) and arguments.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def usage_json(usage: dict[str, Any] | None) -> dict[str, Any]:
    usage = usage or {}
    return {
        "input_tokens": int(usage.get("prompt_tokens") or 0),
        "output_tokens": int(usage.get("completion_tokens") or 0),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def content_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The content blocks of a chat assistant message: thinking, text, then one tool_use per call."""
    blocks: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content")
    if reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": thinking_signature(reasoning)})
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        function = call["function"]
        blocks.append({
            "type": "tool_use", "id": call["id"], "name": function["name"], "input": tool_input(function["arguments"]),
        })
    return blocks


def message_json(
    completion: dict[str, Any], model: str, matched_stop: Any, stop_sequences: Sequence[str] | None, msg_id: str,
) -> dict[str, Any]:
    """The ``Message`` object of a non-streaming chat completion (``model``: the name the client asked for)."""
    choice = completion["choices"][0]
    reason, sequence = stop_reason(choice.get("finish_reason"), matched_stop, stop_sequences)
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(choice["message"]),
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage_json(completion.get("usage")),
    }


__all__ = [
    "SIGNATURE_PREFIX", "content_blocks", "is_own_signature", "message_id", "message_json", "stop_reason",
    "thinking_signature", "tool_input", "usage_json",
]
