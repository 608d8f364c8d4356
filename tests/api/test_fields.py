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
