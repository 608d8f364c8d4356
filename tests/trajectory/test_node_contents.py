"""What a trie node keeps of a message that is not plain (``node_contents.stored_form``): every long string packed,
wherever it is, and each long text the key or the reasoning variant already holds packed is that same object."""

from __future__ import annotations

import json

from proxy.canonical_json import canonical_json
from proxy.trajectory.message_keys import message_key, reasoning_variant
from proxy.trajectory import packed_text
from proxy.trajectory.node_contents import stored_form, unpacked
from proxy.trajectory.packed_text import PACK_AT, PackedText

LONG = "def f(x):\n    return x  # é\n" * 60


def test_every_long_string_is_packed_and_the_ones_key_and_variant_hold_are_not_packed_again():
    arguments = {"path": "a.py", "content": LONG}
    message = {"role": "assistant", "content": LONG, "reasoning_content": "Thinking. " * 150, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "write", "arguments": canonical_json(arguments)}},
        {"id": "c2", "type": "function", "function": {"name": "write", "arguments": json.dumps(arguments)}}],
        "extra": [{"type": "text", "text": LONG + "!"}, "short"]}
    key, variant = message_key(message), reasoning_variant(message)
    assert type(variant) is PackedText and len(LONG) >= PACK_AT
    stored_key, stored = stored_form(key, message, variant)
    assert stored_key is key and stored is not message and unpacked(stored) == message
    assert stored["content"] is key.content and stored["reasoning_content"] is variant  # held once
    calls = stored["tool_calls"]
    assert calls[0]["function"]["arguments"] is key.tool_calls[0].arguments  # sent in canonical form: the key's
    assert type(calls[1]["function"]["arguments"]) is PackedText  # spelled otherwise: its own
    assert calls[1]["function"]["arguments"] is not key.tool_calls[1].arguments
    assert type(stored["extra"][0]["text"]) is PackedText and stored["extra"][1] == "short"


def test_a_message_with_nothing_long_is_kept_as_it_is():
    message = {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}]}
    assert stored_form(message_key(message), message)[1] is message
    assert unpacked(message) is message


def test_the_role_stays_a_string_whatever_the_threshold_so_the_variant_is_read(monkeypatch):
    # reasoning_variant reads a stored answer's role as it is: packing it (here every string is long) lost variants.
    monkeypatch.setattr(packed_text, "PACK_AT", 1)
    message = {"role": "assistant", "content": "ok", "reasoning_content": "because"}
    variant = reasoning_variant(message)
    stored = stored_form(message_key(message), message, variant)[1]
    assert stored["role"] == "assistant" and type(stored["content"]) is PackedText
    assert reasoning_variant(stored) is variant and unpacked(stored) == message
