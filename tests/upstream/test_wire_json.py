"""``proxy.upstream.wire_json.loads`` decodes as ``json.loads``: orjson's fast path, the fallback, the one
difference."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.upstream.wire_json import loads

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=30,
)


def same(a, b) -> bool:
    """Equal values of equal types all the way down (1 and 1.0 and True are not the same JSON)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


@given(value=JSON_VALUES, ascii_only=st.booleans(), compact=st.booleans())
def test_any_json_text_decodes_as_the_standard_library_decodes_it(value, ascii_only, compact):
    text = json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":") if compact else None)
    for data in (text, text.encode("utf-8")):
        assert same(loads(data), json.loads(data))


# Without 19-digit runs: integers beyond 64 bits are the one difference (the last test).
@given(text=st.text(max_size=40).filter(lambda t: not re.search(r"[0-9]{19}", t)))
def test_arbitrary_text_decodes_or_fails_as_the_standard_library_does(text):
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            loads(text)
    else:
        assert same(loads(text), expected)


@pytest.mark.parametrize("text", [
    "[NaN, Infinity, -Infinity]",  # Python's extensions: orjson refuses them
    '"\\ud800"',  # a lone surrogate escape
    '{"a": 1, "a": 2}',  # duplicate keys: the last wins in both
    "1e400",  # out of the double range
])
def test_what_orjson_refuses_falls_back_to_the_standard_library(text):
    assert same(loads(text), json.loads(text))


def test_nesting_beyond_both_limits_fails_as_the_standard_library_does():
    with pytest.raises(RecursionError):
        loads("[" * 5000 + "]" * 5000)


def test_the_one_difference_integers_beyond_64_bits_become_floats():
    # SGLang never sends them (its encoder, orjson, cannot write them); the chunk decoder refuses a float id.
    assert json.loads("123456789012345678901234567890") == 123456789012345678901234567890
    assert loads("123456789012345678901234567890") == 1.2345678901234568e29
