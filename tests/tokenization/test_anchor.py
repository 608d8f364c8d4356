"""``anchor_absent_from`` finds the anchor no string of the values contains, as the json module's search did."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.tokenization.tito import ANCHOR, anchor_absent_from

# Texts made of pieces of the anchor (so that the anchor and its lengthened forms occur, whole and cut), any
# characters, lone surrogates (orjson cannot write them) and the characters JSON escapes.
pieces = st.sampled_from([ANCHOR, ANCHOR + "x", ANCHOR[:7], ANCHOR[7:], "x", "xx", '"', "\\", "\n", "\ud800", "é"])
texts = st.lists(pieces | st.text(max_size=3), max_size=6).map("".join)
scalars = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | texts
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts | st.integers(), inner, max_size=4),
    max_leaves=10,
)


def json_module_anchor(*values: Any) -> str:
    """The search as it was written before orjson: the oracle."""
    haystack = json.dumps(values, ensure_ascii=False, default=repr)
    anchor = ANCHOR
    while anchor in haystack:
        anchor += "x"
    return anchor


@settings(max_examples=400, deadline=None)
@given(messages=values, tools=values)
def test_the_anchor_is_the_one_the_json_module_search_finds(messages: Any, tools: Any) -> None:
    assert anchor_absent_from(messages, tools) == json_module_anchor(messages, tools)


def test_the_anchor_grows_past_every_occurrence():
    text = f"say {ANCHOR}x and {ANCHOR}xx"
    assert anchor_absent_from([{"role": "user", "content": text}], None) == ANCHOR + "xxx"
