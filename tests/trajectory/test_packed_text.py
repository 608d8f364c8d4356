"""Long message text held packed (issue 21 item 5, ``proxy/trajectory/packed_text.py``): compressed, equal by a
digest, read back exactly; keys and the echo comparison see the same messages as with the text held whole."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from proxy.trajectory import packed_text
from proxy.trajectory.message_keys import PlainKey, message_key, same_message
from proxy.trajectory.packed_text import PACK_AT, PackedText, packed, plain_text, same_text

# Any code point, lone surrogates included (a JSON body may carry one; UTF-8 cannot without surrogatepass).
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=3000)


def long_text(salt: int = 0) -> str:
    return "".join(f"line {salt}.{i}: the keeper climbed the stairs; é ü 中文 🙂\n" for i in range(40))


@settings(max_examples=300)
@given(ANY_TEXT)
def test_a_packed_text_reads_back_exactly_and_matches_only_itself(text):
    held = PackedText.of(text)
    assert held.text == text and type(held.text) is str
    assert held.matches(text) and held == PackedText.of(text) and hash(held) == hash(PackedText.of(text))
    assert not held.matches(text + "x") and not held.matches("x" + text)
    assert not held.matches(text.encode("utf-8", "surrogatepass"))  # bytes are not the text
    if text:
        assert not held.matches(text[:-1]) and held != PackedText.of(text[:-1])


@given(st.text(st.characters(exclude_categories=()), min_size=1, max_size=2000), st.data())
def test_any_one_character_changed_is_a_different_text(text, data):
    at = data.draw(st.integers(0, len(text) - 1))
    other = data.draw(st.characters(exclude_categories=()).filter(lambda c: c != text[at]))
    changed = text[:at] + other + text[at + 1:]
    assert not PackedText.of(text).matches(changed) and PackedText.of(text) != PackedText.of(changed)


def test_texts_are_packed_from_pack_at_characters_and_held_smaller():
    short, long = "x" * (PACK_AT - 1), long_text()
    assert packed(short) is short and type(packed(long)) is PackedText
    assert plain_text(packed(long)) == long and plain_text(short) is short
    assert packed(long).nbytes < len(long.encode()) // 2  # repetitive text: compressed far
    assert same_text(short, short) and same_text(packed(long), long) and not same_text(packed(long), long[1:])
    assert not same_text(("json", "[]"), "[]") and not same_text(packed(long), None)


def test_a_packed_text_never_equals_a_string_and_is_immutable():
    text = long_text()
    held = PackedText.of(text)
    assert held != text and text != held
    with pytest.raises(AttributeError):
        held.digest = 0


def test_long_contents_are_keyed_packed_and_the_keys_compare_as_the_texts_do():
    text = long_text()
    key = message_key({"role": "user", "content": text})
    assert type(key) is PlainKey and type(key.content) is PackedText and key.content.text == text
    assert key == message_key({"role": "user", "content": text})
    assert key != message_key({"role": "user", "content": text + "!"})
    assert key != message_key({"role": "assistant", "content": text})
    # A list of text parts is its joined text, packed the same way.
    half = len(text) // 2
    parts = [{"type": "text", "text": text[:half]}, {"type": "text", "text": text[half:]}]
    assert message_key({"role": "user", "content": parts}) == key
    # A tool result keeps its call id beside the packed content.
    tool = message_key({"role": "tool", "tool_call_id": "call_1", "content": text})
    assert type(tool.content) is PackedText and tool.tool_call_id == "call_1"
    assert tool != message_key({"role": "tool", "tool_call_id": "call_2", "content": text})


def test_keys_and_packed_texts_copy_and_pickle_to_equal_values():
    import copy
    import pickle

    for message in ({"role": "user", "content": "short"}, {"role": "user", "content": long_text()},
                    {"role": "tool", "tool_call_id": "c", "content": long_text(1)}):
        key = message_key(message)
        for again in (copy.deepcopy(key), pickle.loads(pickle.dumps(key))):
            assert again == key and type(again) is type(key) and hash(again) == hash(key)
    held = PackedText.of(long_text())
    assert pickle.loads(pickle.dumps(held)) == held and copy.deepcopy(held).text == long_text()


def test_billing_hashes_are_blanked_before_packing():
    text = long_text()
    one = message_key({"role": "tool", "tool_call_id": "c", "content": text + " cch=ab12"}, ignore_cch=True)
    two = message_key({"role": "tool", "tool_call_id": "c", "content": text + " cch=zz99"}, ignore_cch=True)
    assert one == two and one.content.text == text + " cch=*"
    assert message_key({"role": "user", "content": text + " cch=ab12"}) != message_key(
        {"role": "user", "content": text + " cch=zz99"})


def test_same_message_compares_a_packed_content_by_its_digest():
    text = long_text()
    stored = {"role": "tool", "tool_call_id": "c", "content": PackedText.of(text)}
    assert same_message(stored, {"role": "tool", "tool_call_id": "c", "content": text})
    assert not same_message(stored, {"role": "tool", "tool_call_id": "c", "content": text.replace("é", "e", 1)})
    assert not same_message(stored, {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": text}]})


def test_a_fresh_seed_each_process_keeps_digests_apart_between_seeds(monkeypatch):
    text = long_text()
    first = PackedText.of(text)
    monkeypatch.setattr(packed_text, "_SEED", packed_text._SEED ^ 1)
    assert PackedText.of(text) != first and PackedText.of(text).text == text


def test_packed_like_returns_the_packed_text_already_held_for_the_same_text_and_packs_anything_else():
    text = "ü long text " * 100
    held = PackedText.of(text)
    assert packed(text, like=(PackedText.of("other " * 300), held)) is held
    fresh = packed(text + "!", like=(held,))
    assert type(fresh) is PackedText and fresh is not held and fresh.text == text + "!"
    assert packed("short", like=(held,)) == "short"
