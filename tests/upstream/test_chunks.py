"""The sans-IO stream decoder: SSE framing, cumulative and incremental chunks, the waiting-queue abort quirk."""

from __future__ import annotations

import base64
import json
from array import array
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.upstream.chunks import ChunkDecoder, SSEParser
from proxy.upstream.errors import (
    UpstreamErrorChunk,
    UpstreamHTTPError,
    UpstreamProtocolError,
    UpstreamStreamCut,
)
from proxy.upstream.events import FinishAbort, Finished, FinishLength, FinishStop, Token

STOP = {"type": "stop", "matched": 151645}
ABORT = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
QUEUED_ABORT = {"type": "abort", "message": "Abort in waiting queue"}


def lp(token_id: int) -> float:
    """A deterministic fake logprob per token id."""
    return -((token_id % 97) + 1) / 10


def chunk(
    ids: list[int],
    *,
    finish: dict[str, Any] | None = None,
    version: str = "v0",
    prompt_tokens: int | None = 5,
    completion_tokens: int | None = None,
    logprob_ids: list[int] | None = None,
    text: str = "",
    **meta: Any,
) -> dict[str, Any]:
    """One SGLang /generate chunk (native format) with logprob triples for ``logprob_ids`` (default ``ids``)."""
    info: dict[str, Any] = {
        "id": "r",
        "finish_reason": finish,
        "weight_version": version,
        "completion_tokens": len(ids) if completion_tokens is None else completion_tokens,
        "output_token_logprobs": [[lp(t), t, None] for t in (ids if logprob_ids is None else logprob_ids)],
        **meta,
    }
    if prompt_tokens is not None:
        info["prompt_tokens"] = prompt_tokens
    return {"text": text, "output_ids": ids, "meta_info": info}


def decode(chunks: list[dict[str, Any]], *, incremental: bool = False, done: bool = True) -> list[Any]:
    decoder = ChunkDecoder(rid="r", incremental=incremental)
    events: list[Any] = []
    for c in chunks:
        events.extend(decoder.feed_payload(json.dumps(c)))
    if done:
        decoder.feed_done()
    decoder.feed_eof()
    return events


def tokens_of(events: list[Any]) -> list[Token]:
    return [e for e in events if isinstance(e, Token)]


def check_exactly_once(events: list[Any], ids: list[int]) -> Finished:
    """Each id of ``ids`` appears exactly once, in order, with consecutive indices; then one Finished."""
    tokens = tokens_of(events)
    assert [t.token_id for t in tokens] == ids
    assert [t.index for t in tokens] == list(range(len(ids)))
    assert [t.logprob for t in tokens] == [lp(t) for t in ids]
    assert isinstance(events[-1], Finished) and sum(isinstance(e, Finished) for e in events) == 1
    final = events[-1]
    assert list(final.output_ids) == ids
    assert list(final.output_logprobs) == [lp(t) for t in ids]
    assert list(final.weight_versions) == [t.weight_version for t in tokens]
    return final


@st.composite
def split_sequences(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """A token sequence and the cumulative lengths of the chunks that deliver it (empty chunks allowed)."""
    ids = draw(st.lists(st.integers(0, 151_935), max_size=40))
    cuts = sorted(draw(st.lists(st.integers(0, len(ids)), max_size=12)))
    return ids, [*cuts, len(ids)]


# -- properties ------------------------------------------------------------------------------------------------


@given(split_sequences(), st.lists(st.sampled_from(["v0", "v1", "v2"]), min_size=13, max_size=13))
def test_cumulative_any_split_yields_each_token_exactly_once(split, versions):
    ids, cuts = split
    chunks = [chunk(ids[:cut], version=versions[i]) for i, cut in enumerate(cuts)]
    chunks[-1]["meta_info"]["finish_reason"] = STOP
    events = decode(chunks)
    final = check_exactly_once(events, ids)
    # Each token carries the version of the chunk that first delivered it.
    expected_versions = []
    for i, cut in enumerate(cuts):
        expected_versions += [versions[i]] * (cut - len(expected_versions))
    assert list(final.weight_versions) == expected_versions
    assert final.weight_version == versions[len(cuts) - 1]


@given(split_sequences())
def test_incremental_any_split_yields_each_token_exactly_once(split):
    ids, cuts = split
    bounds = [0, *cuts]
    # completion_tokens counts every token so far in both modes (SGLang's scheduler sends len(req.output_ids))
    chunks = [chunk(ids[a:b], text="x" * (b - a), completion_tokens=b) for a, b in zip(bounds, bounds[1:])]
    chunks[-1]["meta_info"]["finish_reason"] = STOP
    final = check_exactly_once(decode(chunks, incremental=True), ids)
    assert final.text == "x" * len(ids)


@given(split_sequences(), st.data())
def test_sse_framing_any_byte_split_gives_the_same_payloads(split, data):
    ids, cuts = split
    payloads = [json.dumps(chunk(ids[:cut])) for cut in cuts] + ["[DONE]"]
    newline = data.draw(st.sampled_from([b"\n", b"\r\n"]))
    stream = b"".join(b"data: " + p.encode() + newline + newline for p in payloads)
    pieces = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    parser = SSEParser()
    got: list[str] = []
    for a, b in zip([0, *pieces], [*pieces, len(stream)]):
        got += parser.feed(stream[a:b])
    assert got == payloads
    assert parser.pending_bytes == 0


@given(split_sequences(), st.data())
def test_queued_abort_quirk_never_shrinks_or_duplicates(split, data):
    """The stream shows a prefix of the output, then the quirk chunk: ``output_ids=[last]``, the true count in
    ``completion_tokens``, no ``prompt_tokens``. With its full logprob list the decoder recovers every token;
    without logprobs it keeps what it saw (plus the one token if exactly one was missing)."""
    ids, cuts = split
    seen_chunks = cuts[: data.draw(st.integers(0, len(cuts)))]
    with_logprobs = data.draw(st.booleans())
    incremental = data.draw(st.booleans())
    if incremental:
        bounds = [0, *seen_chunks]
        chunks = [chunk(ids[a:b], completion_tokens=b) for a, b in zip(bounds, bounds[1:])]
    else:
        chunks = [chunk(ids[:cut]) for cut in seen_chunks]
    seen = seen_chunks[-1] if seen_chunks else 0
    last = chunk(
        ids[-1:],
        finish=QUEUED_ABORT,
        prompt_tokens=None,
        completion_tokens=len(ids),
        logprob_ids=ids if with_logprobs else None,
    )
    if not with_logprobs:
        del last["meta_info"]["output_token_logprobs"]
    events = decode([*chunks, last], incremental=incremental)
    if with_logprobs:
        expected = ids
    elif len(ids) == seen + 1:
        expected = ids
    else:
        expected = ids[:seen]
    tokens = tokens_of(events)
    assert [t.token_id for t in tokens] == expected
    assert [t.index for t in tokens] == list(range(len(expected)))
    final = events[-1]
    assert isinstance(final, Finished)
    assert list(final.output_ids) == expected
    assert final.prompt_tokens is None
    assert final.completion_tokens == len(ids)
    assert final.finish_reason == FinishAbort("Abort in waiting queue")


# -- examples --------------------------------------------------------------------------------------------------


def test_coalesced_chunk_brings_several_tokens():
    events = decode([chunk([1]), chunk([1, 2, 3, 4]), chunk([1, 2, 3, 4, 5], finish=STOP)])
    assert [e.token_id for e in tokens_of(events)] == [1, 2, 3, 4, 5]
    final = events[-1]
    assert final.finish_reason == FinishStop(151645)
    assert final.prompt_tokens == 5 and final.completion_tokens == 5


def test_finish_reasons_are_typed():
    assert decode([chunk([1], finish={"type": "stop", "matched": "</s>"})])[-1].finish_reason == FinishStop("</s>")
    assert decode([chunk([1], finish={"type": "length", "length": 1})])[-1].finish_reason == FinishLength(1)
    abort = decode([chunk([1], finish={**ABORT, "status_code": 503, "err_type": "overload"})])[-1].finish_reason
    assert abort == FinishAbort("Aborted", 503, "overload") and abort.is_error and abort.kind == "abort"
    assert not FinishAbort("Aborted").is_error


def test_unknown_finish_reason_is_a_protocol_error():
    with pytest.raises(UpstreamProtocolError):
        decode([chunk([1], finish={"type": "exploded"})])


def test_abort_while_running_keeps_partial_tokens():
    events = decode([chunk([7]), chunk([7, 8], finish=ABORT)])
    final = check_exactly_once(events, [7, 8])
    assert final.finish_reason == FinishAbort("Aborted")
    assert final.prompt_tokens == 5


def test_queued_abort_with_nothing_generated():
    final = decode([chunk([], finish=QUEUED_ABORT, prompt_tokens=None, completion_tokens=0)])[-1]
    assert final.output_ids == () and final.finish_reason.kind == "abort"


def test_queued_abort_non_streaming_body_is_complete():
    """The non-streaming body of a queued abort has the full ``output_ids``: all of them are taken."""
    body = chunk([4, 5, 6], finish=QUEUED_ABORT, prompt_tokens=None)
    assert check_exactly_once(decode([body]), [4, 5, 6]).prompt_tokens is None


def test_error_chunk_raises_with_partial_tokens():
    decoder = ChunkDecoder(rid="r")
    decoder.feed_chunk(chunk([1, 2]))
    error = {"error": {"message": "bad", "type": "invalid_request_error", "code": 400, "retryable": False}}
    with pytest.raises(UpstreamErrorChunk) as info:
        decoder.feed_payload(json.dumps(error))
    assert isinstance(info.value, UpstreamHTTPError)
    assert info.value.status == 400 and info.value.message == "bad"
    assert info.value.err_type == "invalid_request_error"
    assert info.value.partial.output_ids == (1, 2)


def test_eof_without_finish_is_a_stream_cut_with_partial_tokens():
    decoder = ChunkDecoder(rid="r")
    decoder.feed_chunk(chunk([1]))
    decoder.feed_chunk(chunk([1, 2, 3]))
    with pytest.raises(UpstreamStreamCut) as info:
        decoder.feed_eof()
    assert info.value.partial.output_ids == (1, 2, 3)
    assert info.value.partial.output_logprobs == (lp(1), lp(2), lp(3))
    assert info.value.partial.rid == "r"


def test_eof_after_finish_without_done_is_accepted():
    decoder = ChunkDecoder()
    decoder.feed_chunk(chunk([1], finish=STOP))
    decoder.feed_eof()
    assert decoder.result is not None and decoder.rid == "r"


def test_done_without_finish_is_a_protocol_error():
    decoder = ChunkDecoder()
    decoder.feed_chunk(chunk([1]))
    with pytest.raises(UpstreamProtocolError) as info:
        decoder.feed_payload("[DONE]")
    assert info.value.partial.output_ids == (1,)


@pytest.mark.parametrize(
    "bad",
    [
        "{not json",
        "[1, 2]",
        json.dumps({"text": "", "meta_info": {}}),
        json.dumps(chunk([1, "2"], logprob_ids=[])).replace("[]", "null"),
        json.dumps(chunk([1, 2], logprob_ids=[1, 3])),
        json.dumps(chunk([1, 2], logprob_ids=[1])),
    ],
)
def test_malformed_chunks_are_protocol_errors(bad):
    with pytest.raises(UpstreamProtocolError):
        ChunkDecoder().feed_payload(bad)


@pytest.mark.parametrize("incremental", [False, True], ids=["cumulative", "incremental"])
def test_token_id_outside_the_vocabulary_is_a_protocol_error_after_the_good_tokens(incremental):
    decoder = ChunkDecoder(vocab_size=100, incremental=incremental, url="http://10.0.0.7:30000/generate")
    assert [e.token_id for e in decoder.feed_chunk(chunk([1, 99]))] == [1, 99]
    with pytest.raises(UpstreamProtocolError, match=r"output token id 100 is outside the vocabulary \(ids 0 to 99\)") as info:
        decoder.feed_chunk(chunk([100], completion_tokens=3) if incremental else chunk([1, 99, 100]))
    assert info.value.partial.output_ids == (1, 99) and "10.0.0.7" not in info.value.message
    # Negative ids are never tokens, with or without a known vocabulary.
    with pytest.raises(UpstreamProtocolError, match="outside the vocabulary"):
        ChunkDecoder().feed_chunk(chunk([-1]))
    # The quirk's ids (taken from the logprob triples) are checked too.
    decoder = ChunkDecoder(vocab_size=100)
    with pytest.raises(UpstreamProtocolError, match="outside the vocabulary"):
        decoder.feed_chunk(chunk([123], finish=QUEUED_ABORT, prompt_tokens=None, logprob_ids=[5, 123],
                                 completion_tokens=2))


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"text": "", "output_ids": [1]}, "no meta_info"),
        ({"text": "", "meta_info": {"id": "r", "finish_reason": None}}, "no output_ids"),
        (chunk([1, 2], logprob_ids=[1]), "2 ids but 1 logprob triples"),
        (chunk([1, 2], logprob_ids=[1, 3]), "does not match output id 2"),
        (chunk([1], output_token_logprobs=[[True, 1, None]]), "is not a number"),
    ],
)
def test_protocol_errors_say_what_was_wrong(bad, says):
    with pytest.raises(UpstreamProtocolError, match=says):
        ChunkDecoder(vocab_size=100).feed_chunk(bad)


def test_shrinking_or_diverging_cumulative_chunk_is_a_protocol_error():
    for second in (chunk([1]), chunk([1, 9, 3])):
        decoder = ChunkDecoder()
        decoder.feed_chunk(chunk([1, 2]))
        with pytest.raises(UpstreamProtocolError):
            decoder.feed_chunk(second)


def test_chunk_after_the_final_chunk_is_a_protocol_error():
    decoder = ChunkDecoder()
    decoder.feed_chunk(chunk([1], finish=STOP))
    with pytest.raises(UpstreamProtocolError):
        decoder.feed_chunk(chunk([1, 2]))


def test_without_logprobs_tokens_have_none():
    c = chunk([3, 4], finish=STOP)
    del c["meta_info"]["output_token_logprobs"]
    events = decode([c])
    assert [t.logprob for t in tokens_of(events)] == [None, None]


def test_routed_experts_decode_to_rows_and_raw():
    prompt, layers, topk, start = 4, 3, 2, 1
    ids = [10, 11, 12]
    rows = prompt + len(ids) - 1 - start
    values = array("i", range(rows * layers * topk))
    encoded = base64.b64encode(values.tobytes()).decode()
    decoder = ChunkDecoder(routed_experts_start_len=start)
    decoder.feed_chunk(chunk(ids, finish=STOP, prompt_tokens=prompt, routed_experts=encoded))
    experts = decoder.result.routed_experts
    assert experts.num_rows == rows and experts.start_len == start
    assert experts.shape(layers) == (rows, layers, topk)
    assert experts.values().tolist() == list(range(rows * layers * topk))
    nested = experts.rows(layers)
    assert nested[0] == ((0, 1), (2, 3), (4, 5))
    assert nested[-1][-1] == (rows * layers * topk - 2, rows * layers * topk - 1)
    with pytest.raises(ValueError):
        experts.shape(4)


def test_routed_experts_with_the_wrong_row_count_is_a_protocol_error():
    encoded = base64.b64encode(array("i", range(7)).tobytes()).decode()
    decoder = ChunkDecoder()
    with pytest.raises(UpstreamProtocolError):
        decoder.feed_chunk(chunk([1, 2], finish=STOP, prompt_tokens=3, routed_experts=encoded))


def test_sse_ignores_comments_and_other_fields_and_joins_data_lines():
    parser = SSEParser()
    assert parser.feed(b": ping\nevent: x\nid: 3\ndata: a\ndata: b\n\ndata:[DONE]\n\n") == ["a\nb", "[DONE]"]
    assert parser.feed(b"data: unterminated") == []
    assert parser.pending_bytes == len(b"data: unterminated")
