"""The chat answer read back as Anthropic's ``Message`` and typed SSE (``proxy/frontends/messages_output.py``,
``messages_stream.py``), checked with the SDK itself: the events are parsed into the SDK's event types and
accumulated by ``messages.stream()``'s own ``accumulate_event``, and the result must be the non-streaming
``Message`` of the same answer; errors in Anthropic's shape (``messages_errors.py``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from proxy.api import ApiError
from proxy.frontends.messages_errors import anthropic_error, sse_error_event
from proxy.frontends.messages_output import message_json, stop_reason, thinking_signature
from proxy.frontends.messages_stream import MessageStreamWriter, frame

EVENT = TypeAdapter(RawMessageStreamEvent)
ARGUMENTS = '{"path": "a.txt", "text": "hi \\u00e9"}'


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **top: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": choices, **top}


def chat_stream() -> list[dict[str, Any]]:
    """A chat stream as the proxy writes it: role, reasoning, content, two tool calls in pieces, finish, usage."""
    return [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "Let me "}),
        chunk({"reasoning_content": "write it."}),
        chunk({"content": "Writing "}),
        chunk({"content": "the file."}),
        chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                               "function": {"name": "write", "arguments": ARGUMENTS[:9]}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ARGUMENTS[9:]}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                               "function": {"name": "noop", "arguments": ""}}]}),
        chunk({}, "tool_calls"),
        chunk(usage={"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}),
    ]


COMPLETION = {
    "id": "chatcmpl-1",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Writing the file.", "reasoning_content": "Let me write it.",
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "write", "arguments": ARGUMENTS}},
            {"id": "call_b", "type": "function", "function": {"name": "noop", "arguments": "{}"}},
        ],
    }}],
    "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42},
}


def parse_sse(blob: bytes) -> list[tuple[str, dict[str, Any]]]:
    """``event:``/``data:`` pairs of an SSE blob, checking the event name equals the data's type."""
    out = []
    for event in blob.decode().split("\n\n"):
        if not event:
            continue
        lines = dict(line.split(": ", 1) for line in event.split("\n"))
        data = json.loads(lines["data"])
        assert lines["event"] == data["type"]
        out.append((lines["event"], data))
    return out


def stream_events(chunks: list[dict[str, Any]], matched_stop: Any = None, stop: list[str] | None = None) -> bytes:
    writer = MessageStreamWriter("msg_1", "claude-x", 30, stop)
    events = writer.start()
    for item in chunks:
        events += writer.feed(item)
    return frame(events + writer.finish(matched_stop))


def test_the_stream_accumulates_in_the_sdk_to_the_non_streaming_message() -> None:
    events = parse_sse(stream_events(chat_stream()))
    snapshot = None
    buffers: dict[int, bytes] = {}
    for kind, data in events:
        if kind == "ping":
            continue  # not a message event: the SDK's stream skips it
        snapshot = accumulate_event(
            event=EVENT.validate_python(data), current_snapshot=snapshot, json_bufs=buffers,
        )
    assert snapshot is not None
    expected = Message.model_validate(message_json(COMPLETION, "claude-x", None, None, "msg_1"))
    assert snapshot.model_dump(exclude_none=True) == expected.model_dump(exclude_none=True)
    assert expected.content[0].signature == thinking_signature("Let me write it.")  # type: ignore[union-attr]
    assert expected.content[2].input == {"path": "a.txt", "text": "hi é"}  # type: ignore[union-attr]
    kinds = [(kind, data.get("delta", data.get("content_block", {})).get("type")) for kind, data in events]
    assert kinds == [
        ("message_start", None), ("ping", None),
        ("content_block_start", "thinking"), ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "thinking_delta"), ("content_block_delta", "signature_delta"),
        ("content_block_stop", None),
        ("content_block_start", "text"), ("content_block_delta", "text_delta"), ("content_block_delta", "text_delta"),
        ("content_block_stop", None),
        ("content_block_start", "tool_use"), ("content_block_delta", "input_json_delta"),
        ("content_block_delta", "input_json_delta"), ("content_block_stop", None),
        ("content_block_start", "tool_use"), ("content_block_stop", None),
        ("message_delta", None), ("message_stop", None),
    ]
    assert [data["index"] for kind, data in events if kind == "content_block_stop"] == [0, 1, 2, 3]
    final = events[-2][1]
    assert final["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert (final["usage"]["input_tokens"], final["usage"]["output_tokens"]) == (30, 12)


@pytest.mark.parametrize(
    ("finish", "matched", "stop", "expected"),
    [
        ("stop", None, None, ("end_turn", None)),
        ("stop", "END", ["END"], ("stop_sequence", "END")),
        ("stop", 151645, ["END"], ("end_turn", None)),  # the end-of-turn token, not a stop sequence
        ("length", None, None, ("max_tokens", None)),
        ("tool_calls", None, None, ("tool_use", None)),
    ],
)
def test_stop_reasons(finish: str, matched: Any, stop: list[str] | None, expected: tuple[str, str | None]) -> None:
    assert stop_reason(finish, matched, stop) == expected
    events = parse_sse(stream_events([chunk({"content": "x"}), chunk({}, finish)], matched, stop))
    assert events[-2][1]["delta"] == {"stop_reason": expected[0], "stop_sequence": expected[1]}


def test_errors_in_anthropic_shape() -> None:
    error = ApiError.of("upstream_overloaded", "busy")
    body = anthropic_error(error.to_json(), error.status)
    assert body == {"type": "error", "error": {"type": "overloaded_error", "message": "busy",
                                               "code": "upstream_overloaded"}}
    event = parse_sse(sse_error_event(ApiError.of("generation_restarted", "restarted").to_json()))
    assert event == [("error", {"type": "error", "error": {
        "type": "overloaded_error", "message": "restarted", "code": "generation_restarted"}})]
    statuses = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 415: "invalid_request_error", 500: "api_error"}
    for status, kind in statuses.items():
        assert anthropic_error({"error": {"message": "m"}}, status)["error"]["type"] == kind


def _pieces(text: str, cuts: list[int]) -> list[str]:
    points = sorted({cut % (len(text) + 1) for cut in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:]) if text[a:b]]


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
_cuts = st.lists(st.integers(0, 100), max_size=4)


@settings(max_examples=150, deadline=None)
@given(
    reasoning=_text, content=_text, cuts=_cuts, show=st.booleans(),
    calls=st.lists(st.dictionaries(st.text(min_size=1, max_size=4), st.integers() | _text, max_size=3), max_size=3),
)
def test_any_split_of_an_answer_streams_to_the_same_message(
    reasoning: str, content: str, cuts: list[int], show: bool, calls: list[dict[str, Any]]
) -> None:
    """However the chat stream splits the reasoning, the text and each call's arguments, the SDK accumulates the
    events to the non-streaming Message of the same answer (thinking shown or omitted)."""
    arguments = [json.dumps(call) for call in calls]
    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"reasoning_content": piece}) for piece in _pieces(reasoning, cuts)]
    chunks += [chunk({"content": piece}) for piece in _pieces(content, cuts)]
    for index, text in enumerate(arguments):
        pieces = _pieces(text, cuts)
        chunks.append(chunk({"tool_calls": [{"index": index, "id": f"call_{index}", "type": "function",
                                             "function": {"name": "f", "arguments": pieces[0]}}]}))
        chunks += [chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}) for p in pieces[1:]]
    finish = "tool_calls" if calls else "stop"
    chunks += [chunk({}, finish), chunk(usage={"prompt_tokens": 30, "completion_tokens": 12})]
    writer = MessageStreamWriter("msg_1", "claude-x", 30, None, show)
    events = writer.start()
    for item in chunks:
        events += writer.feed(item)
    snapshot = None
    buffers: dict[int, bytes] = {}
    for kind, data in parse_sse(frame(events + writer.finish(None))):
        if kind != "ping":
            snapshot = accumulate_event(event=EVENT.validate_python(data), current_snapshot=snapshot, json_bufs=buffers)
    message = {"role": "assistant", "content": content or None, "reasoning_content": reasoning, "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": "f", "arguments": a}}
        for i, a in enumerate(arguments)]}
    completion = {"id": "c", "choices": [{"finish_reason": finish, "message": message}],
                  "usage": {"prompt_tokens": 30, "completion_tokens": 12}}
    expected = Message.model_validate(message_json(completion, "claude-x", None, None, "msg_1", show_thinking=show))
    assert snapshot is not None
    assert snapshot.model_dump(exclude_none=True) == expected.model_dump(exclude_none=True)
