"""``text_size``: the characters of string content, for any value a body may hold (it runs before validation)."""

from __future__ import annotations

from collections import OrderedDict, UserList

from hypothesis import given
from hypothesis import strategies as st

from proxy.controllers.session_entries import text_size

contents = st.one_of(st.none(), st.integers(), st.text(max_size=8),
                     st.lists(st.one_of(st.text(max_size=3), st.fixed_dictionaries({"text": st.text(max_size=8)}),
                                        st.fixed_dictionaries({"text": st.integers()})), max_size=3))
messages = st.fixed_dictionaries({"role": st.just("user"), "content": contents})


def expected(items) -> int:
    size = 0
    for message in items:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            size += len(content)
        elif isinstance(content, list):
            size += sum(len(part["text"]) for part in content if isinstance(part, dict)
                        and isinstance(part.get("text"), str))
    return size


@given(st.lists(st.one_of(messages, st.integers(), st.text(max_size=2)), max_size=5))
def test_lists_and_other_sequences_of_messages_count_their_text(items):
    assert text_size(items) == expected(items)
    assert text_size(tuple(items)) == expected(items)
    assert text_size(UserList(items)) == expected(items)
    assert text_size([OrderedDict(m) if isinstance(m, dict) else m for m in items]) == expected(items)


def test_what_is_not_a_sequence_of_messages_counts_nothing():
    for value in ("text", b"bytes", {"content": "x"}, 7, None):
        assert text_size(value) == 0
