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
- **Signatures**: a thinking block's ``signature`` (:func:`thinking_signature`) carries its reasoning (base64) and
  a hash of it under this proxy's prefix: stable across restarts and across the proxies of a fleet, recognised
  when a client echoes the block back (:func:`reasoning_from_signature`), and enough to restore the recorded
  reasoning when the client asked for ``thinking.display: "omitted"`` (the block's ``thinking`` is then empty, as
  Anthropic's). It is an integrity mark, not a secret: the client owns its history anyway.
- **stop_reason**: chat ``length`` -> ``max_tokens``; ``tool_calls`` -> ``tool_use``; ``stop`` -> ``stop_sequence``
  (with ``stop_sequence`` set) when the generation ended on one of the request's ``stop_sequences``, else
  ``end_turn``.
- **usage**: ``input_tokens`` is the whole prompt the proxy sent (the proxy reuses the session's tokens but has no
  prompt cache to bill: the cache counters are 0), ``output_tokens`` every generated token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Sequence
from typing import Any

#: the prefix of every signature this proxy writes (versioned, should the scheme ever change)
SIGNATURE_PREFIX = "dressage-v1:"
_SIGNATURE_DOMAIN = b"dressage-proxy thinking signature\0"

#: chat finish_reason -> Anthropic stop_reason (``stop`` is refined by the stop sequence, :func:`stop_reason`)
STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use", "stop": "end_turn"}


def thinking_signature(thinking: str) -> str:
    """The signature of a thinking block written by this proxy: ``dressage-v1:<base64url of the reasoning>.<hash>``.
    It carries the reasoning itself, as Anthropic's signatures carry theirs (encrypted): a client that asked for
    the thinking ``display: "omitted"`` gets an empty ``thinking`` and still echoes the recorded reasoning back."""
    data = thinking.encode("utf-8", "surrogatepass")
    return SIGNATURE_PREFIX + base64.urlsafe_b64encode(data).decode("ascii") + "." + _digest(data)


def reasoning_from_signature(signature: str) -> str | None:
    """The reasoning a signature of this proxy carries, or None for any other signature (another model's, or one
    whose text or hash was changed)."""
    if not signature.startswith(SIGNATURE_PREFIX):
        return None
    encoded, dot, digest = signature[len(SIGNATURE_PREFIX):].rpartition(".")
    try:
        data = base64.urlsafe_b64decode(encoded.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        return None
    if not dot or not hmac.compare_digest(digest, _digest(data)):
        return None
    return data.decode("utf-8", "surrogatepass")


def _digest(data: bytes) -> str:
    return hashlib.sha256(_SIGNATURE_DOMAIN + data).hexdigest()[:32]


def stop_reason(
    finish_reason: str | None, matched_stop: Any, stop_sequences: Sequence[str] | None
) -> tuple[str, str | None]:
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


def content_blocks(message: dict[str, Any], *, show_thinking: bool = True) -> list[dict[str, Any]]:
    """The content blocks of a chat assistant message: thinking (its text empty unless ``show_thinking``: the
    request's ``thinking.display: "omitted"``; the signature carries it), text, then one tool_use per call."""
    blocks: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content")
    if reasoning:
        shown_text = reasoning if show_thinking else ""
        blocks.append({"type": "thinking", "thinking": shown_text, "signature": thinking_signature(reasoning)})
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
    *, show_thinking: bool = True,
) -> dict[str, Any]:
    """The ``Message`` object of a non-streaming chat completion (``model``: the name the client asked for)."""
    choice = completion["choices"][0]
    reason, sequence = stop_reason(choice.get("finish_reason"), matched_stop, stop_sequences)
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(choice["message"], show_thinking=show_thinking),
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage_json(completion.get("usage")),
    }


__all__ = [
    "SIGNATURE_PREFIX", "content_blocks", "message_id", "message_json", "reasoning_from_signature", "stop_reason",
    "thinking_signature", "tool_input", "usage_json",
]
