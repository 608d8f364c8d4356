"""Normalization of OpenAI messages into template input."""

from __future__ import annotations

import pytest

from proxy.tokenization.messages import MessageError, normalize_message, normalize_messages


def test_normalize_message_null_content_becomes_empty_string():
    assert normalize_message({"role": "assistant", "content": None}) == {"role": "assistant", "content": ""}


def test_normalize_message_flattens_text_parts_without_separator():
    message = {"role": "user", "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "b"}]}
    assert normalize_message(message)["content"] == "a b"


def test_normalize_message_refuses_image_parts():
    message = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
    with pytest.raises(MessageError, match="image_url"):
        normalize_message(message)


def test_normalize_message_refuses_unknown_role():
    with pytest.raises(MessageError, match="developer"):
        normalize_message({"role": "developer", "content": "x"})


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"a": {"b": [1, "ü"]}}', {"a": {"b": [1, "ü"]}}),
        ("", {}),
        ("  ", {}),
        (None, {}),
        ({"x": 1}, {"x": 1}),
    ],
)
def test_normalize_message_tool_call_arguments_become_objects(arguments, expected):
    message = {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": arguments}}]}
    call = normalize_message(message)["tool_calls"][0]
    assert call == {"id": "c", "type": "function", "function": {"name": "f", "arguments": expected}}


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]", "3", '"s"'])
def test_normalize_message_refuses_arguments_that_are_not_a_json_object(arguments):
    message = {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": arguments}}]}
    with pytest.raises(MessageError, match="arguments"):
        normalize_message(message)


def test_normalize_message_refuses_tool_call_without_name():
    with pytest.raises(MessageError, match="name"):
        normalize_message({"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]})


def test_normalize_message_keeps_reasoning_and_accepts_aliases():
    assert normalize_message({"role": "assistant", "content": "", "reasoning_content": "r"})["reasoning_content"] == "r"
    assert normalize_message({"role": "assistant", "content": "", "reasoning": "r2"})["reasoning_content"] == "r2"
    assert "reasoning_content" not in normalize_message({"role": "assistant", "reasoning_content": None})


def test_normalize_message_keeps_tool_call_id_and_drops_unknown_keys():
    message = {"role": "tool", "content": "ok", "tool_call_id": "c1", "extra": 1, "name": "f"}
    assert normalize_message(message) == {"role": "tool", "content": "ok", "tool_call_id": "c1", "name": "f"}


def test_normalize_messages_names_the_bad_message():
    with pytest.raises(MessageError, match=r"messages\[1\]"):
        normalize_messages([{"role": "user", "content": "x"}, {"role": "nobody"}])
