"""The step journal record round-trips exactly: every field, logprobs bit for bit, any text (item 2 of issue 16), the
request's Idempotency-Key and fingerprint included (format 2); a record written by format 1 still loads."""

from __future__ import annotations

import base64
import struct
from array import array

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.trajectory.pending_step import Moment
from proxy.trajectory.step_journal import (
    FORMAT_VERSION,
    READ_VERSIONS,
    JournalFormatError,
    JournaledRequest,
    StepRecord,
    decode,
    encode,
)
from proxy.trajectory.tokens import RoutedChunk, exact_logprobs
from proxy.trajectory.version_stamp import VersionStamp

# Any text JSON can carry (no lone surrogates: the API refuses them before a session sees them).
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=6,
)
message = st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": text},
                                optional={"extra": json_value})
ids = st.lists(st.integers(-(2**31), 2**31 - 1), max_size=40).map(lambda values: array("i", values))
moment = st.builds(Moment, st.integers(0, 2**40), st.integers(0, 2**40), st.integers(0, 2**40))
# float32 values (SGLang's) and arbitrary float64 ones: either way the stored array keeps exactly what it got.
logprobs = st.one_of(
    st.none(),
    st.lists(st.floats(allow_nan=False, width=32), max_size=20).map(exact_logprobs),
    st.lists(st.floats(allow_nan=False), max_size=20).map(exact_logprobs),
)


@st.composite
def records(draw) -> StepRecord:
    generated = draw(ids)
    context = draw(ids)
    return StepRecord(
        step_id=draw(st.integers(1, 2**40)), chain_id=draw(st.integers(1, 2**40)),
        generation_id=draw(text),
        request=JournaledRequest(
            draw(st.lists(message, max_size=5)), draw(st.none() | st.lists(json_value, max_size=3)),
            draw(st.none() | st.dictionaries(text, json_value, max_size=3)), draw(st.none() | text),
            draw(st.none() | text),
            idempotency=draw(st.none() | st.tuples(
                st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=255),
                st.text("0123456789abcdef", min_size=64, max_size=64))),
        ),
        context_ids=context,
        context_mask=draw(st.none() | st.binary(min_size=len(context), max_size=len(context))),
        tito_detail=draw(st.none() | text), boundary_reason=draw(st.none() | text),
        generated_ids=generated, logprobs=draw(logprobs), logprobs_invalid=draw(st.booleans()),
        version_runs=tuple(draw(st.lists(st.tuples(st.none() | text, st.integers(1, 2**31)), max_size=4))),
        routed_experts=tuple(draw(st.lists(
            st.builds(RoutedChunk, st.binary(max_size=64), st.integers(0, 2**31), st.integers(0, 2**31)), max_size=3,
        ))),
        finish_reason=draw(st.sampled_from(["stop", "length", "tool_calls", "abort"])),
        assistant_message=draw(message),
        version_stamp=draw(st.none() | st.builds(VersionStamp, st.integers(0, 2**40), st.none() | text)),
        prepared=draw(moment), restarted=draw(st.none() | moment), committed=draw(moment),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records())
def test_a_record_round_trips_exactly(record: StepRecord) -> None:
    data = encode(record)
    assert data[0] == FORMAT_VERSION
    back = decode(data)
    assert back == record
    if record.logprobs is not None:
        # Bit for bit, in the width it was stored in.
        assert back.logprobs.typecode == record.logprobs.typecode
        assert back.logprobs.tobytes() == record.logprobs.tobytes()


def test_a_float64_logprob_is_not_rounded_through_text_or_float32() -> None:
    value = 0.1 + 2**-40
    record = StepRecord(
        1, 1, "s#g1", JournaledRequest([{"role": "user", "content": "é😀"}]), array("i", [1]), None, None, None,
        array("i", [2]), exact_logprobs([value]), False, ((None, 1),), (), "stop", {"role": "assistant", "content": ""},
        None, Moment(0, 0, 0), None, Moment(1, 1, 1),
    )
    back = decode(encode(record))
    assert back.logprobs.typecode == "d" and back.logprobs[0] == value
    assert back.request.messages[0]["content"] == "é😀"


def test_the_idempotency_key_and_fingerprint_travel_with_the_step() -> None:
    keyed = JournaledRequest([{"role": "user", "content": "Hi"}], idempotency=("retry-\\\"1", "ab" * 32))
    record = StepRecord(
        3, 1, "s#g3", keyed.after_prefix(1, 2), array("i", [1]), None, None, None, array("i", [2]), None, True,
        ((None, 1),), (), "stop", {"role": "assistant", "content": "Hello"}, None, Moment(0, 0, 0), None,
        Moment(1, 1, 1),
    )
    data = encode(record)
    assert data[0] == FORMAT_VERSION == 2
    back = decode(data)
    assert back.request.idempotency == ("retry-\\\"1", "ab" * 32)
    assert (back.request.prefix_step, back.request.prefix_depth) == (1, 2)
    # A record without a key says so (None), not an empty key.
    assert decode(encode(attrs.evolve(record, request=JournaledRequest([])))).request.idempotency is None


#: a record written by format 1 (main before the keys were journaled: ``step_journal.encode`` of that version), kept
#: as its bytes: a journal written by an older proxy must still load after an upgrade
FORMAT_1_RECORD = base64.b64decode(
    "AT8CAABveyJzdGVwX2lkIjo3LCJjaGFpbl9pZCI6MiwiZ2VuZXJhdGlvbl9pZCI6InMjZzkiLCJtZXNzYWdlcyI6W3sicm9sZSI6InVzZXIiLCJj"
    "b250ZW50IjoiQW5kIHRoZW4/In1dLCJ0b29scyI6W3sidHlwZSI6ImZ1bmN0aW9uIiwiZnVuY3Rpb24iOnsibmFtZSI6ImFkZCJ9fV0sImNoYXRf"
    "dGVtcGxhdGVfa3dhcmdzIjp7ImVuYWJsZV90aGlua2luZyI6ZmFsc2V9LCJpbnN0YW5jZV9pZCI6Imluc3QiLCJ0dXJuX2lkIjoidHVybi0zIiwi"
    "cHJlZml4IjpbNCwzXSwibWFzayI6dHJ1ZSwidGl0b19kZXRhaWwiOm51bGwsImJvdW5kYXJ5X3JlYXNvbiI6InRpdG9fZmFpbGVkIiwibG9ncHJv"
    "YnMiOiJmIiwibG9ncHJvYnNfaW52YWxpZCI6ZmFsc2UsInZlcnNpb25fcnVucyI6W1sidjEiLDJdXSwicm91dGVkIjpbWzEsNV1dLCJmaW5pc2hf"
    "cmVhc29uIjoic3RvcCIsImFzc2lzdGFudF9tZXNzYWdlIjp7InJvbGUiOiJhc3Npc3RhbnQiLCJjb250ZW50IjoiVGhlbiB0aGlzLiJ9LCJ2ZXJz"
    "aW9uX3N0YW1wIjpbMywidjEiXSwicHJlcGFyZWQiOls1LDksMl0sInJlc3RhcnRlZCI6bnVsbCwiY29tbWl0dGVkIjpbNiw5LDJdfQwAAAALAAAA"
    "DAAAAA0AAAAIAAAAFQAAABYAAAAIAAAAAAAAvwAAoL8DAAAAAAEAAgAAAAEC"
)


def test_a_format_1_record_still_loads_without_a_key() -> None:
    assert FORMAT_1_RECORD[0] == 1 and 1 in READ_VERSIONS
    expected = StepRecord(
        7, 2, "s#g9",
        JournaledRequest([{"role": "user", "content": "And then?"}], [{"type": "function", "function": {"name": "add"}}],
                         {"enable_thinking": False}, "inst", "turn-3", 4, 3),
        array("i", [11, 12, 13]), b"\x00\x01\x00", None, "tito_failed", array("i", [21, 22]),
        exact_logprobs([-0.5, -1.25]), False, (("v1", 2),), (RoutedChunk(b"\x01\x02", 1, 5),), "stop",
        {"role": "assistant", "content": "Then this."}, VersionStamp(3, "v1"), Moment(5, 9, 2), None, Moment(6, 9, 2),
    )
    back = decode(FORMAT_1_RECORD)
    assert back == expected and back.request.idempotency is None


def test_a_format_1_header_cannot_smuggle_a_key() -> None:
    # Only format 2 reads the field: a format-1 record is keyless whatever its header holds.
    record = StepRecord(
        1, 1, "s#g1", JournaledRequest([], idempotency=("k", "f" * 64)), array("i"), None, None, None, array("i"),
        None, True, (), (), "stop", {"role": "assistant", "content": ""}, None, Moment(0, 0, 0), None,
        Moment(1, 1, 1),
    )
    assert decode(bytes([1]) + encode(record)[1:]).request.idempotency is None


@pytest.mark.parametrize("data", [b"", bytes([FORMAT_VERSION + 1]) + b"x", bytes([0]) + b"x",
                                  bytes([FORMAT_VERSION]) + struct.pack("<I", 99)])
def test_a_record_of_another_format_or_truncated_is_refused(data: bytes) -> None:
    with pytest.raises(JournalFormatError):
        decode(data)
