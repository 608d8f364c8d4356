"""Canonical message and context keys: what counts as the same trie edge (spec 5.1)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.trajectory.message_keys import (
    MessageKeyError,
    PlainKey,
    ToolCallKey,
    context_key,
    effective_template_kwargs,
    message_key,
    reasoning_variant,
)


def call(arguments, call_id="call_1", name="search", **extra):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}, **extra}


def test_message_key_content_none_and_empty_string_are_the_same():
    assert message_key({"role": "assistant", "content": None}) == message_key({"role": "assistant", "content": ""})
    assert message_key({"role": "assistant"}) == message_key({"role": "assistant", "content": ""})


def test_message_key_text_parts_equal_their_concatenation():
    parts = [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]
    assert message_key({"role": "user", "content": parts}) == message_key({"role": "user", "content": "hello world"})


def test_message_key_non_text_content_is_compared_structurally_and_never_equals_text():
    image = [{"type": "image_url", "image_url": {"url": "x"}}]
    key = message_key({"role": "user", "content": image})
    assert key.content == ("json", '[{"image_url":{"url":"x"},"type":"image_url"}]')
    assert key != message_key({"role": "user", "content": "json:" + key.content[1]})
    assert key == message_key({"role": "user", "content": [{"image_url": {"url": "x"}, "type": "image_url"}]})


def test_message_key_role_name_and_tool_call_id_distinguish_messages():
    base = {"role": "tool", "content": "8", "tool_call_id": "call_1"}
    assert message_key(base) != message_key({**base, "tool_call_id": "call_2"})
    assert message_key(base) != message_key({**base, "role": "user"})
    assert message_key({"role": "user", "content": "a", "name": "x"}) != message_key({"role": "user", "content": "a"})


def test_message_key_tool_call_arguments_are_canonical_json():
    as_string = message_key({"role": "assistant", "tool_calls": [call('{"b": 2, "a": [1, {"y": 1, "x": 0}]}')]})
    compact = message_key({"role": "assistant", "tool_calls": [call('{"a":[1,{"x":0,"y":1}],"b":2}')]})
    as_object = message_key({"role": "assistant", "tool_calls": [call({"a": [1, {"x": 0, "y": 1}], "b": 2})]})
    assert as_string == compact == as_object
    assert as_string.tool_calls == (ToolCallKey("call_1", "search", '{"a":[1,{"x":0,"y":1}],"b":2}'),)


def test_message_key_tool_call_ids_are_kept_and_type_is_ignored():
    original = message_key({"role": "assistant", "tool_calls": [call({"q": 1})]})
    assert original != message_key({"role": "assistant", "tool_calls": [call({"q": 1}, call_id="call_9")]})
    untyped = {"id": "call_1", "function": {"name": "search", "arguments": {"q": 1}}}
    assert original == message_key({"role": "assistant", "tool_calls": [untyped]})


def test_message_key_blank_and_invalid_arguments():
    blank = message_key({"role": "assistant", "tool_calls": [call("  ")]})
    assert blank == message_key({"role": "assistant", "tool_calls": [call({})]})
    broken = message_key({"role": "assistant", "tool_calls": [call("{not json")]})
    assert broken.tool_calls[0].arguments == "raw:{not json"


def test_message_key_ignores_reasoning_and_unknown_fields():
    plain = message_key({"role": "assistant", "content": "hi"})
    assert plain == message_key({"role": "assistant", "content": "hi", "reasoning_content": "think", "refusal": None})


@pytest.mark.parametrize(
    "message, variant",
    [
        ({"role": "assistant", "content": "x", "reasoning_content": "r"}, "r"),
        ({"role": "assistant", "content": "x", "reasoning": "r2"}, "r2"),
        ({"role": "assistant", "content": "x", "thinking": "r3"}, "r3"),
        ({"role": "assistant", "content": "x", "reasoning_content": ""}, None),
        ({"role": "assistant", "content": "x"}, None),
        ({"role": "user", "content": "x", "reasoning_content": "r"}, None),
    ],
)
def test_reasoning_variant_reads_the_aliases_and_treats_empty_as_none(message, variant):
    assert reasoning_variant(message) == variant


def test_message_key_cch_hashes_match_only_when_ignored_and_the_message_is_untouched():
    old = {"role": "tool", "tool_call_id": "c", "content": "ok cch=abc_DEF-1 done"}
    new = {"role": "tool", "tool_call_id": "c", "content": "ok cch=zz9 done"}
    assert message_key(old) != message_key(new)
    assert message_key(old, ignore_cch=True) == message_key(new, ignore_cch=True)
    assert old["content"] == "ok cch=abc_DEF-1 done"
    # Inside tool-call arguments too.
    a = {"role": "assistant", "tool_calls": [call({"url": "x?cch=1"})]}
    b = {"role": "assistant", "tool_calls": [call({"url": "x?cch=2"})]}
    assert message_key(a, ignore_cch=True) == message_key(b, ignore_cch=True) != message_key(a)


@pytest.mark.parametrize("message", ["text", None, {"content": "no role"}, {"role": 3}])
def test_message_key_refuses_what_cannot_be_an_edge(message):
    with pytest.raises(MessageKeyError):
        message_key(message)


def test_context_key_tools_order_matters_and_empty_tools_are_none():
    t1 = {"type": "function", "function": {"name": "a"}}
    t2 = {"type": "function", "function": {"name": "b"}}
    assert context_key([t1, t2]) != context_key([t2, t1])
    assert context_key([]) == context_key(None)
    assert context_key([{"function": {"name": "a"}, "type": "function"}]) == context_key([t1])


def test_context_key_uses_effective_template_kwargs():
    assert effective_template_kwargs({"enable_thinking": False, "tools": 1}, {"enable_thinking": True, "x": 1}) == {
        "enable_thinking": False, "x": 1,
    }
    assert context_key(None, {"enable_thinking": False}) != context_key(None, {})
    assert context_key(None, {}, default_template_kwargs={"enable_thinking": False}) == context_key(
        None, {"enable_thinking": False}
    )
    # Reserved variables never reach the template, so they never split a context.
    assert context_key(None, {"add_generation_prompt": False}) == context_key(None, None)


def _fields(key):
    return (type(key) is PlainKey, key.role, key.content, key.name, key.tool_calls, key.tool_call_id)


_NAMES = st.one_of(st.none(), st.sampled_from(["", "bob", "cch=a1"]), st.integers(0, 1))
_CALLS = st.one_of(st.none(), st.just([]), st.just([{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]))
_MESSAGES = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"]), "content": st.one_of(st.none(), st.sampled_from(["", "hi"]))},
    optional={"name": _NAMES, "tool_call_id": _NAMES, "tool_calls": _CALLS})


@given(_MESSAGES, _MESSAGES)
def test_a_message_without_name_calls_or_call_id_gets_a_plain_key_equal_only_to_its_own_kind(first, second):
    # PlainKey (a tuple a plain trie node builds when asked) for the common message; the two key kinds never describe
    # the same message, so keys are equal exactly when every field the key compares is (issue 21 item 5).
    a, b = message_key(first), message_key(second)
    name, call_id = first.get("name"), first.get("tool_call_id")
    plain = not first.get("tool_calls") and not isinstance(name, str) and not isinstance(call_id, str)
    assert (type(a) is PlainKey) == plain
    assert (a.name, a.tool_call_id) == (name if isinstance(name, str) else None,
                                        call_id if isinstance(call_id, str) else None)
    assert len(a.tool_calls) == len(first.get("tool_calls") or ())
    assert (a == b) == (_fields(a) == _fields(b)) and (a != b) == (_fields(a) != _fields(b))
    if a == b:
        assert hash(a) == hash(b)
    with pytest.raises(AttributeError):  # frozen (attrs' FrozenInstanceError is an AttributeError)
        a.content = "changed"
