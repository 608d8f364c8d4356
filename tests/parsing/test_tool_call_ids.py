"""``tool_call_id``: deterministic ids from session, step and call index (spec §10)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from proxy.parsing import tool_call_id

keys = st.tuples(st.text(max_size=20), st.integers(0, 10**6), st.integers(0, 64))


@given(keys)
def test_same_session_step_and_index_give_the_same_openai_style_id(key: tuple[str, int, int]) -> None:
    assert tool_call_id(*key) == tool_call_id(*key)
    assert re.fullmatch(r"call_[0-9a-f]{24}", tool_call_id(*key))


@given(keys, keys)
def test_different_session_step_or_index_give_different_ids(a: tuple[str, int, int], b: tuple[str, int, int]) -> None:
    assert (tool_call_id(*a) == tool_call_id(*b)) == (a == b)


def test_ids_are_stable_across_releases() -> None:
    """Re-runs of stored trajectories must reproduce their ids: the derivation is pinned."""
    assert tool_call_id("s", 0, 0) == "call_" + __import__("hashlib").sha256(
        b'dressage-proxy/tool-call-id/v1\x00["s",0,0]').hexdigest()[:24]
    assert tool_call_id("session-1", 2, 0) != tool_call_id("session-1", 2, 1) != tool_call_id("session-1", 3, 1)


@given(keys)
def test_choice_zero_keeps_the_single_choice_id_and_every_other_choice_gets_its_own(key: tuple[str, int, int]) -> None:
    """n > 1: each choice's calls get different ids (choice 0 keeps an n = 1 request's ids), and the same choice of an
    identical retry gets the same ids."""
    assert tool_call_id(*key, 0) == tool_call_id(*key)
    ids = [tool_call_id(*key, choice) for choice in range(16)]
    assert len(set(ids)) == 16
    assert ids == [tool_call_id(*key, choice) for choice in range(16)]
    assert tool_call_id("s", 0, 0, 1) == "call_" + __import__("hashlib").sha256(
        b'dressage-proxy/tool-call-id/v1\x00["s",0,0,1]').hexdigest()[:24]
