"""parse_json_body and the shared field readers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings

from proxy.api.errors import ApiError, ErrorCode
from proxy.api.fields import check_json, identifier, parse_json_body
from tests.api import strategies as s


@pytest.mark.parametrize(
    "raw",
    [b"{", b"\xff\xfe", b'{"a": NaN}', b"[Infinity]", b"-Infinity", b"[" * 100_000 + b"]" * 100_000,
     b"1" * 5000, "{'a': 1}"],
    ids=["truncated", "not-utf8", "nan", "infinity", "minus-infinity", "deep", "too-many-digits", "single-quotes"],
)
def test_parse_json_body_refuses_what_is_not_strict_json(raw: bytes | str) -> None:
    with pytest.raises(ApiError) as info:
        parse_json_body(raw)
    assert (info.value.status, info.value.code) == (400, ErrorCode.INVALID_REQUEST)


@pytest.mark.parametrize(("raw", "value"), [(b"", None), (b"  \n", None), (b'{"a": [1, 2.5, null]}',
                                                                            {"a": [1, 2.5, None]})])
def test_parse_json_body_parses_json_and_treats_an_empty_body_as_none(raw: bytes, value: Any) -> None:
    assert parse_json_body(raw) == value


@settings(max_examples=200, deadline=None)
@given(s.json_values)
def test_check_json_accepts_exactly_the_values_json_can_write(value: Any) -> None:
    try:
        strict = json.dumps(value, allow_nan=False)
    except ValueError:
        with pytest.raises(ApiError):
            check_json(value, "p")
    else:
        assert check_json(value, "p") is value
        assert parse_json_body(strict) == value


def test_check_json_limits_depth_at_one_hundred_levels() -> None:
    value: Any = 0
    for _ in range(100):
        value = [value]
    assert check_json(value, "p") is value
    with pytest.raises(ApiError):
        check_json([value], "p")


@pytest.mark.parametrize(("value", "expected"), [("abc-1:2", "abc-1:2"), (42, "42"), ("a b", "a b")])
def test_identifier_accepts_printable_ascii_and_integers(value: Any, expected: str) -> None:
    assert identifier(value, "p") == expected


@pytest.mark.parametrize("value", ["", "\x00", "a\r\nX-Evil: 1", "\u00e9", "a ", False, None, 2**70, 1.0])
def test_identifier_refuses_what_cannot_be_an_upstream_header_value(value: Any) -> None:
    with pytest.raises(ApiError):
        identifier(value, "p")


# -- valid Unicode (issue 13) ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (rb'{"messages": [{"content": "a"}, {"content": "\ud800"}]}', "messages[1].content"),
        (rb'{"messages": [{"tool_calls": [{"function": {"arguments": "{\"a\": \"\udfff\"}"}}]}]}',
         "messages[0].tool_calls[0].function.arguments"),
        (rb'{"reward_info": {"scores": {"\udc00b": 1}}}', 'reward_info.scores["\\udc00b"]'),
        (rb'{"a b": {"x-y_z": ["ok", "\uDBFF"]}}', '["a b"].x-y_z[1]'),
        # The first bad string in document order; a key before its own value.
        (rb'{"x": "\udfff", "y": "\ud800"}', "x"),
        (rb'{"k\ud800": {"z": "\ud800"}}', '["k\\ud800"]'),
        (rb'{"a": [{"b": "\ud800"}], "c\ud800": 1}', "a[0].b"),
        # A high surrogate followed by anything but a low one stays lone; so does a low one on its own.
        (rb'{"s": "\ud83d\u0041"}', "s"),
        (rb'{"s": "\ude00\ud83d"}', "s"),
        (rb'"\ud800"', None),
        # A str body (not bytes) may hold a raw surrogate, without any escape.
        ('{"a": ["\ud800"]}', "a[0]"),
        # Deeper than Python's recursion limit would allow a recursive walk.
        (b"[" * 900 + rb'"\ud800"' + b"]" * 900, "[0]" * 900),
    ],
)
def test_parse_json_body_refuses_a_lone_surrogate_naming_its_path(raw: bytes | str, param: str | None) -> None:
    with pytest.raises(ApiError) as info:
        parse_json_body(raw)
    assert (info.value.status, info.value.code, info.value.param) == (400, ErrorCode.INVALID_REQUEST, param)
    assert "valid Unicode" in info.value.message
    # The error itself is always encodable: its param and message escape the surrogate.
    assert json.loads(info.value.to_body())["error"]["param"] == param


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (rb'{"e": "\ud83d\ude00"}', {"e": "\N{GRINNING FACE}"}),  # an escaped pair is one valid character
        (rb'{"e": "\\ud800"}', {"e": "\\ud800"}),  # an escaped backslash: six plain characters
        ('{"é": "ü"}'.encode(), {"é": "ü"}),
    ],
)
def test_parse_json_body_accepts_valid_unicode_however_it_is_spelled(raw: bytes, value: Any) -> None:
    assert parse_json_body(raw) == value


@settings(max_examples=300, deadline=None)
@given(s.json_with_any_text)
def test_parse_json_body_refuses_exactly_the_bodies_with_a_string_utf8_cannot_encode(value: Any) -> None:
    raw = s.wire(value)
    parsed = json.loads(raw)
    expected = s.first_bad_path(parsed)
    if expected is None:
        assert parse_json_body(raw) == parsed
        return
    with pytest.raises(ApiError) as info:
        parse_json_body(raw)
    assert (info.value.code, info.value.param) == (ErrorCode.INVALID_REQUEST, expected or None)
