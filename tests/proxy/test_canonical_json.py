"""``canonical_json`` spells values as the json module's sorted, compact spelling did, up to the spelling itself: the
same values get the same key, different values different keys (1, 1.0 and true apart; NaN and infinities not
``null``), and what is not JSON is spelled by ``default`` or refused."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.canonical_json import canonical_json

texts = st.text(max_size=4) | st.sampled_from(["\ud800", "\x00slot", "é", "\u2028"])
scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.sampled_from([0, 1])
           | st.floats() | st.sampled_from([0.0, 1.0, -0.0, math.inf, -math.inf, math.nan]) | texts)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
                      max_leaves=8)


def json_module_key(value: Any) -> str:
    """The spelling the keys had before (the oracle)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)


@settings(max_examples=500, deadline=None)
@given(a=values, b=values)
def test_two_values_share_a_key_exactly_when_the_json_module_spelled_them_alike(a: Any, b: Any) -> None:
    assert (canonical_json(a) == canonical_json(b)) == (json_module_key(a) == json_module_key(b))


@settings(max_examples=300, deadline=None)
@given(value=values)
def test_a_key_is_its_value_spelled_as_json(value: Any) -> None:
    key = canonical_json(value)
    assert key == canonical_json(value)
    assert json.loads(key) == json.loads(json_module_key(value)) or "NaN" in key


def test_what_is_not_json_is_spelled_by_default_or_refused():
    marker = object()
    assert canonical_json({"a": marker}) == json_module_key({"a": repr(marker)})
    with pytest.raises(TypeError):
        canonical_json({"a": marker}, default=None)
    assert canonical_json([None, math.inf]) != canonical_json([None, None])
