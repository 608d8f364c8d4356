"""Plain messages kept as their key (issue 21 item 5): a node whose message is ``{"role": <str>, "content": <str>}``
(in that order) and whose key holds the same two strings stores no dict; ``TrieNode.message`` rebuilds it equal, and
the echo walk (``TrieNode.holds``) answers exactly what :func:`same_message` answers against the message as sent.
Anything else (other keys, other order, other types, content a key rewrites) is stored as sent."""

from __future__ import annotations

import copy
import json

from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy.trajectory.message_keys import (
    PlainKey, context_key, message_key, reasoning_variant, same_message,
)
from proxy.trajectory.packed_text import PackedText
from proxy.trajectory.prefix_trie import PrefixTrie

# The long ones are packed (packed_text.PACK_AT): a node holds them compressed, compared by digest.
_TEXT = st.sampled_from(["", "hi", "a cch=ab12 b", "ünïcode", "x" * 40,
                        "long ü " * 200, "long ü " * 199 + "long u "])
_ROLE = st.sampled_from(["system", "user", "assistant", "tool", "developer", "narrator"])
_VALUE = st.one_of(_TEXT, st.none(), st.integers(-2, 2), st.floats(allow_nan=False), st.booleans(),
                   st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _TEXT}), max_size=2))


@st.composite
def messages(draw):
    """Mostly plain messages, and the near misses around them."""
    message = {"role": draw(_ROLE), "content": draw(_TEXT)}
    shape = draw(st.sampled_from(["plain", "plain", "reordered", "extra", "value", "no-content", "calls"]))
    if shape == "calls":  # an answer's tool calls, their arguments long or short, JSON or not (packed when long)
        message["role"] = draw(st.sampled_from(["assistant", "assistant", "user"]))
        message["tool_calls"] = draw(st.lists(st.fixed_dictionaries({
            "id": st.sampled_from(["c1", "c2"]), "type": st.just("function"),
            "function": st.fixed_dictionaries({"name": st.sampled_from(["f", "g"]), "arguments": st.one_of(
                _TEXT, _TEXT.map(lambda text: json.dumps({"text": text})),
                _TEXT.map(lambda text: json.dumps({"text": text}, indent=1)), st.none())})}), max_size=2))
    elif shape == "reordered":
        message = {"content": message["content"], "role": message["role"]}
    elif shape == "extra":
        message[draw(st.sampled_from(["name", "tool_call_id", "reasoning_content", "x"]))] = draw(_VALUE)
    elif shape == "value":
        message["content"] = draw(_VALUE)
    elif shape == "no-content":
        del message["content"]
    return message


def stored(message, ignore_cch):
    """``message`` attached below a context of a new trie: (the trie's node, the message as sent)."""
    trie = PrefixTrie()
    context = trie.context(context_key(None), None, {})
    sent = copy.deepcopy(message)
    node = trie.attach(context, [sent], [message_key(sent, ignore_cch=ignore_cch)])
    return trie, node, sent


@settings(max_examples=300, deadline=None)
@given(message=messages(), other=messages(), ignore_cch=st.booleans())
@example(message={"role": "assistant", "content": "ok", "reasoning_content": "long ü " * 200},
         other={"role": "assistant", "content": "ok", "reasoning_content": "long ü " * 199 + "long u "},
         ignore_cch=False)
def test_a_node_gives_back_the_message_it_was_given_and_holds_what_same_message_holds(message, other, ignore_cch):
    trie, node, sent = stored(message, ignore_cch)
    assert node.message == message and same_message(node.message, message)
    assert list(node.message) == list(message)  # the same keys in the same order
    assert trie.messages(node) == [message]
    # read from the stored message (no slot of its own), packed when long
    assert node.variant == reasoning_variant(message)
    for incoming in (copy.deepcopy(message), other, copy.deepcopy(other)):
        assert node.holds(incoming) == same_message(message, incoming)
    assert trie.echoed_prefix([copy.deepcopy(message)]) == [node]


def test_only_plain_messages_the_key_says_all_of_are_stored_as_their_role_and_content():
    """Fails if the node keeps the dict or the key of a plain message (the memory this saves), or compacts one it
    cannot rebuild exactly."""
    plain = {"role": "user", "content": "hello"}
    node = stored(plain, False)[1]
    assert node.plain and node._message == "user" and node._key == "hello"
    assert node.key == message_key(plain) and type(node.key) is PlainKey
    assert stored({"role": "assistant", "content": "a cch=ab12 b"}, False)[1].plain
    long = {"role": "user", "content": "long ü " * 200}  # packed (packed_text.PACK_AT): still plain
    node = stored(long, False)[1]
    assert node.plain and type(node._key) is PackedText and node.message == long and node.key == message_key(long)
    for kept in ({"content": "hello", "role": "user"}, {"role": "user", "content": ["hello"]},
                 {"role": "user", "content": "hello", "name": "ann"}, {"role": "user", "content": None}):
        node = stored(kept, False)[1]
        assert not node.plain and node._message == kept and node.key == message_key(kept)
    # under ignore_cch the key's text is not the content: the node keeps the message
    with_hash = {"role": "assistant", "content": "a cch=ab12 b"}
    assert stored(with_hash, True)[1]._message == with_hash
