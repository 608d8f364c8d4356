"""``messages_from_json``'s copy of the usual message is exactly what the full check would build."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.api.chat_messages import _message, messages_from_json
from proxy.api.errors import ApiError

ROLES = st.sampled_from(["system", "user", "assistant", "tool", "developer", "function", "", "User", "bot"])
VALUES = st.one_of(ROLES, st.text(max_size=8), st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                   st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=4)}), max_size=2))
KEYS = st.sampled_from(["role", "content", "name", "tool_call_id", "reasoning", "tool_calls", "extra"])
# Two-key messages mostly (the copied shape and its near misses), and a few of other sizes.
MESSAGES = st.one_of(
    st.fixed_dictionaries({"role": st.one_of(ROLES, VALUES), "content": VALUES}),
    st.dictionaries(KEYS, VALUES, min_size=1, max_size=3),
)


def full_check(message: Any) -> Any:
    try:
        return _message(message, "messages[0]")
    except ApiError as error:
        return ("error", error.status, error.code, error.param, str(error))


@given(MESSAGES)
def test_the_usual_message_is_copied_as_the_full_check_would_build_it(message: dict[str, Any]) -> None:
    try:
        (fast,) = messages_from_json([message])
    except ApiError as error:
        fast = ("error", error.status, error.code, error.param, str(error))
    expected = full_check(message)
    assert fast == expected
    if isinstance(fast, dict):
        assert fast is not message  # a fresh dict: the trie keeps it, the caller's may change
        assert [type(value) for value in fast.values()] == [type(value) for value in expected.values()]
