"""The Idempotency-Key records of one session on trio (``proxy/controllers/idempotency.py``), without a server: the
key syntax, the canonical fingerprint, claims (record, release, wait, 422) and the streaming body's recording.
The end-to-end behaviour through a real proxy is ``tests/e2e/test_idempotency.py``."""

from __future__ import annotations

import gc

import pytest
import trio
import trio.testing
from werkzeug.datastructures import Headers

from proxy.api import ApiError
from proxy.controllers.idempotency import (
    Claim,
    IdempotencyKeys,
    RecordedResponse,
    RecordingBody,
    fingerprint,
    key_from_headers,
    parse_key,
)


@pytest.mark.parametrize(
    ("raw", "key"),
    [("abc", "abc"), ('"abc"', "abc"), ("  a b  ", "a b"), ('"a\\"b\\\\c"', 'a"b\\c'), ("x" * 255, "x" * 255),
     ("~!#$%&'()*+,-./:;<=>?@[]^_`{|}", "~!#$%&'()*+,-./:;<=>?@[]^_`{|}")],
)
def test_keys_are_1_to_255_printable_ascii_characters_quoted_or_not(raw, key):
    assert parse_key(raw) == key


@pytest.mark.parametrize("raw", ["", "  ", '""', "x" * 256, "caf\u00e9", "tab\there", "nul\x00", '"a"b"', '"a\\x"'])
def test_anything_else_is_invalid_idempotency_key(raw):
    with pytest.raises(ApiError) as caught:
        parse_key(raw)
    assert (caught.value.status, caught.value.code, caught.value.param) == (400, "invalid_idempotency_key",
                                                                            "Idempotency-Key")


def test_the_header_is_optional_and_case_insensitive_but_single():
    assert key_from_headers({"content-type": "application/json"}) is None
    assert key_from_headers({"idempotency-key": "k"}) == "k"
    assert key_from_headers(Headers([("IDEMPOTENCY-KEY", "k")])) == "k"
    with pytest.raises(ApiError):
        key_from_headers(Headers([("Idempotency-Key", "k"), ("idempotency-key", "k")]))


def test_the_fingerprint_is_the_canonical_json():
    one = {"model": "m", "messages": [{"role": "user", "content": "hé"}], "temperature": 0.5}
    two = {"temperature": 0.5, "messages": [{"content": "hé", "role": "user"}], "model": "m"}
    assert fingerprint(one) == fingerprint(two)
    assert fingerprint(one) != fingerprint({**one, "temperature": 0.6})
    assert fingerprint({"n": 1}) != fingerprint({"n": 1.0})
    # List order is content.
    assert fingerprint({"stop": ["a", "b"]}) != fingerprint({"stop": ["b", "a"]})


RESPONSE = RecordedResponse(b'{"id":"chatcmpl-1"}', "application/json", False, 1)


async def test_a_claim_records_and_repeats_get_the_record():
    keys = IdempotencyKeys()
    claim = await keys.claim("k", "f1")
    assert isinstance(claim, Claim)
    claim.record(RESPONSE)
    claim.release()  # a no-op once recorded
    assert await keys.claim("k", "f1") is RESPONSE
    with pytest.raises(ApiError) as caught:
        await keys.claim("k", "f2")
    assert (caught.value.status, caught.value.code) == (422, "idempotency_key_reused")
    assert len(keys) == 1


async def test_a_released_claim_frees_the_key():
    keys = IdempotencyKeys()
    (await keys.claim("k", "f1")).release()
    assert len(keys) == 0
    # Any request may use the key now (the failed one recorded nothing).
    assert isinstance(await keys.claim("k", "f2"), Claim)


async def test_a_repeat_waits_for_the_running_request_and_gets_its_record_or_runs():
    keys = IdempotencyKeys()
    outcomes = []

    async def repeat():
        outcomes.append(await keys.claim("k", "f"))

    first = await keys.claim("k", "f")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(repeat)
        nursery.start_soon(repeat)
        await trio.testing.wait_all_tasks_blocked()
        assert outcomes == []
        # A different request under the running key is refused at once.
        with pytest.raises(ApiError):
            await keys.claim("k", "other")
        first.release()
        await trio.testing.wait_all_tasks_blocked()
        # One repeat took the key; the other waits for it in turn.
        (owner,) = outcomes
        assert isinstance(owner, Claim)
        owner.record(RESPONSE)
    assert outcomes == [owner, RESPONSE]


async def _chunks():
    yield b"data: 1\n\n"
    yield b"data: [DONE]\n\n"


async def test_a_streamed_answer_is_recorded_at_its_end_if_its_step_committed():
    keys = IdempotencyKeys()
    body = RecordingBody(_chunks(), await keys.claim("k", "f"), lambda: 7, "text/event-stream")
    assert [chunk async for chunk in body] == [b"data: 1\n\n", b"data: [DONE]\n\n"]
    recorded = await keys.claim("k", "f")
    assert recorded == RecordedResponse(b"data: 1\n\ndata: [DONE]\n\n", "text/event-stream", True, 7)


async def test_a_stream_that_committed_nothing_or_ended_early_frees_the_key():
    keys = IdempotencyKeys()
    body = RecordingBody(_chunks(), await keys.claim("k", "f"), lambda: None, "text/event-stream")
    assert len([chunk async for chunk in body]) == 2
    assert len(keys) == 0
    body = RecordingBody(_chunks(), await keys.claim("k", "f"), lambda: 7, "text/event-stream")
    await body.__anext__()
    await body.aclose()  # the client left mid-stream
    assert len(keys) == 0


async def test_a_stream_body_never_started_frees_the_key_when_dropped():
    keys = IdempotencyKeys()
    body = RecordingBody(_chunks(), await keys.claim("k", "f"), lambda: 7, "text/event-stream")
    del body
    gc.collect()
    await trio.testing.wait_all_tasks_blocked()
    assert len(keys) == 0
