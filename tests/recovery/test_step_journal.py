"""The step journal record round-trips exactly: every field, logprobs bit for bit, any text (item 2 of issue 16)."""

from __future__ import annotations

import struct
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.trajectory.pending_step import Moment
from proxy.trajectory.step_journal import FORMAT_VERSION, JournalFormatError, JournaledRequest, StepRecord, decode, encode
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


@pytest.mark.parametrize("data", [b"", bytes([FORMAT_VERSION + 1]) + b"x", bytes([FORMAT_VERSION]) + struct.pack("<I", 99)])
def test_a_record_of_another_format_or_truncated_is_refused(data: bytes) -> None:
    with pytest.raises(JournalFormatError):
        decode(data)
