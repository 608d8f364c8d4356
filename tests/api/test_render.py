"""Rendering: the official openai SDK types parse our completions and chunks; SSE framing is exact."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx2
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai._streaming import SSEDecoder
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from proxy.api.chat_request import ChatCompletionRequest
from proxy.api.errors import ApiError
from proxy.api.render import (
    LOGPROB_FLOOR,
    SSE_DONE,
    AssistantTurn,
    ChunkFormat,
    CompletionMeta,
    Delta,
    FinishReason,
    TokenExtras,
    TokenLogprob,
    ToolCall,
    ToolCallDelta,
    TopLogprob,
    Usage,
    dumps,
    render_completion,
    sse_error,
    sse_event,
    sse_events,
)
from tests.api import strategies as s

META = CompletionMeta("chatcmpl-sess-1-3", 1_730_000_000, "qwen3")
RENDER = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def strict_loads(data: bytes) -> Any:
    """JSON as a strict parser reads it: NaN and infinities are errors."""
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(data, parse_constant=refuse)


def floored(logprob: float) -> float:
    return logprob if math.isfinite(logprob) else LOGPROB_FLOOR


def wire(value: Any) -> Any:
    """What a client sees: our bytes, parsed strictly."""
    return strict_loads(dumps(value))


# -- non-streaming -----------------------------------------------------------------------------------------------------


@RENDER
@given(turn=s.turns, usage=s.usages, logprobs=st.none() | st.lists(s.token_logprobs, max_size=4),
       extras=st.booleans())
def test_render_completion_parses_as_openai_chat_completion(
    turn: AssistantTurn, usage: Usage, logprobs: list[TokenLogprob] | None, extras: bool
) -> None:
    token_extras = TokenExtras([1, 2, 3], [7, 8], [-0.5, float("-inf")], ["v1", "v2"]) if extras else None
    completion = ChatCompletion.model_validate(
        wire(render_completion(META, turn, usage, logprobs=logprobs, extras=token_extras))
    )
    assert (completion.id, completion.created, completion.model, completion.object) == (
        META.id, META.created, META.model, "chat.completion")
    [choice] = completion.choices
    assert choice.index == 0
    assert choice.finish_reason == turn.finish_reason.value
    assert choice.message.role == "assistant"
    assert choice.message.content == turn.content
    assert (choice.message.model_extra or {}).get("reasoning_content") == turn.reasoning_content
    calls = choice.message.tool_calls or []
    assert [(call.id, call.type, call.function.name, call.function.arguments) for call in calls] == [
        (call.id, "function", call.name, call.arguments) for call in turn.tool_calls]
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens, completion.usage.total_tokens) == (
        usage.prompt_tokens, usage.completion_tokens, usage.prompt_tokens + usage.completion_tokens)
    if usage.reasoning_tokens is not None:
        assert completion.usage.completion_tokens_details.reasoning_tokens == usage.reasoning_tokens
    if usage.cached_tokens is not None:
        assert completion.usage.prompt_tokens_details.cached_tokens == usage.cached_tokens
    if logprobs is None:
        assert choice.logprobs is None
    else:
        assert choice.logprobs is not None
        got = [(entry.token, entry.logprob, entry.bytes, [(top.token, top.logprob) for top in entry.top_logprobs])
               for entry in choice.logprobs.content]
        assert got == [
            (entry.token, floored(entry.logprob), list(entry.token.encode()),
             [(top.token, floored(top.logprob)) for top in entry.top_logprobs])
            for entry in logprobs
        ]
    extra = completion.model_extra or {}
    if extras:
        assert extra == {"prompt_token_ids": [1, 2, 3], "token_ids": [7, 8], "token_logprobs": [-0.5, LOGPROB_FLOOR],
                         "weight_versions": ["v1", "v2"]}
    else:
        assert extra == {}


def test_message_omits_reasoning_and_tool_calls_when_absent() -> None:
    message = render_completion(META, AssistantTurn("hello"), Usage(3, 1))["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "hello"}


@pytest.mark.parametrize(
    ("turn", "reason"),
    [(AssistantTurn("x"), "stop"), (AssistantTurn(None, tool_calls=(ToolCall("c", "f", "{}"),)), "tool_calls"),
     (AssistantTurn("x", truncated=True), "length"),
     (AssistantTurn(None, tool_calls=(ToolCall("c", "f", "{}"),), truncated=True), "length")],
)
def test_finish_reason_is_length_when_truncated_else_tool_calls_when_calling_else_stop(
    turn: AssistantTurn, reason: str
) -> None:
    assert render_completion(META, turn, Usage(1, 1))["choices"][0]["finish_reason"] == reason


@pytest.mark.parametrize(("name", "call_id"), [("", "c"), ("f", "")])
def test_tool_call_refuses_an_empty_name_or_id(name: str, call_id: str) -> None:
    with pytest.raises(ValueError):
        ToolCall(call_id, name, "{}")


def test_token_logprob_bytes_default_to_utf8_and_can_be_given() -> None:
    assert TokenLogprob("é", -0.1).to_json()["bytes"] == [0xC3, 0xA9]
    assert TokenLogprob("\ufffd", -0.1, (0xE4,)).to_json()["bytes"] == [0xE4]
    assert TopLogprob("a", float("-inf")).to_json() == {"token": "a", "logprob": LOGPROB_FLOOR, "bytes": [97]}


# -- streaming ---------------------------------------------------------------------------------------------------------


@st.composite
def pieces(draw: st.DrawFn, text: str | None) -> list[str]:
    """``text`` cut at random places (no pieces for None or "")."""
    if not text:
        return []
    cuts = sorted(draw(st.sets(st.integers(1, len(text) - 1), max_size=4))) if len(text) > 1 else []
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@st.composite
def streamed_turns(draw: st.DrawFn) -> tuple[AssistantTurn, list[Delta]]:
    """A turn and the deltas that stream it: reasoning pieces, content pieces, then each tool call in fragments."""
    turn = draw(s.turns)
    deltas = [Delta(reasoning_content=piece) for piece in draw(pieces(turn.reasoning_content))]
    deltas += [Delta(content=piece, logprobs=tuple(draw(st.lists(s.token_logprobs, max_size=2))),
                     extras=TokenExtras(token_ids=[len(piece)], weight_versions=["v1"]))
               for piece in draw(pieces(turn.content))]
    for index, call in enumerate(turn.tool_calls):
        fragments = draw(pieces(call.arguments)) or [""]
        deltas.append(Delta(tool_calls=(ToolCallDelta(index, call.id, call.name, fragments[0]),)))
        deltas += [Delta(tool_calls=(ToolCallDelta(index, arguments=fragment),)) for fragment in fragments[1:]]
    return turn, deltas


def render_stream(fmt: ChunkFormat, turn: AssistantTurn, deltas: list[Delta], usage: Usage) -> list[dict]:
    return [fmt.first(prompt_token_ids=[1, 2]), *(fmt.delta(d) for d in deltas), *fmt.finish(turn.finish_reason, usage)]


@RENDER
@given(streamed=streamed_turns(), usage=s.usages, include_usage=st.booleans(), logprobs=st.booleans(),
       token_extras=st.booleans())
def test_streamed_chunks_parse_as_openai_chunks_and_accumulate_to_the_turn(
    streamed: tuple[AssistantTurn, list[Delta]], usage: Usage, include_usage: bool, logprobs: bool,
    token_extras: bool,
) -> None:
    turn, deltas = streamed
    fmt = ChunkFormat(META, include_usage=include_usage, logprobs=logprobs, token_extras=token_extras)
    chunks = [ChatCompletionChunk.model_validate(wire(event)) for event in render_stream(fmt, turn, deltas, usage)]
    assert {(c.id, c.created, c.model, c.object) for c in chunks} == {
        (META.id, META.created, META.model, "chat.completion.chunk")}
    assert chunks[0].choices[0].delta.role == "assistant"
    assert ("prompt_token_ids" in (chunks[0].model_extra or {})) is token_extras
    if include_usage:
        *chunks, usage_chunk = chunks
        assert usage_chunk.choices == []
        assert usage_chunk.usage is not None and usage_chunk.usage.total_tokens == usage.total_tokens
    assert [c.choices[0].finish_reason for c in chunks] == [None] * (len(chunks) - 1) + [turn.finish_reason.value]
    assert all(c.usage is None for c in chunks)
    assert all((c.choices[0].logprobs is not None) == (logprobs and bool(d.logprobs))
               for c, d in zip(chunks[1:-1], deltas, strict=True))

    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    # The snapshot, not get_final_completion(): the SDK's parse step refuses finish_reason "length" by design.
    message = state.current_completion_snapshot.choices[0].message
    assert (message.content or "") == (turn.content or "")
    assert (message.model_extra or {}).get("reasoning_content") == (turn.reasoning_content or None)
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []] == [
        (c.id, c.name, c.arguments) for c in turn.tool_calls]


NON_FINITE = st.sampled_from([float("nan"), float("inf"), float("-inf")])
ANY_LOGPROB = st.floats(max_value=0.0) | NON_FINITE


@RENDER
@given(streamed=streamed_turns(), usage=s.usages, lps=st.lists(ANY_LOGPROB, min_size=1, max_size=4),
       tops=st.lists(ANY_LOGPROB, max_size=3))
def test_sse_events_are_the_checked_dumps_bytes_even_with_non_finite_logprobs(
    streamed: tuple[AssistantTurn, list[Delta]], usage: Usage, lps: list[float], tops: list[float],
) -> None:
    # sse_event skips dumps' walk for non-finite floats (issue 21: most of a small chunk's cost), because every
    # float a chunk holds is a floored logprob. Fails if a NaN or an infinity ever reaches a chunk unfloored.
    turn, deltas = streamed
    hostile = Delta(content="x", logprobs=(TokenLogprob("x", lps[0], top_logprobs=tuple(
        TopLogprob("y", value) for value in tops)),), extras=TokenExtras(token_ids=[1] * len(lps), token_logprobs=lps))
    fmt = ChunkFormat(META, include_usage=True, logprobs=True, token_extras=True)
    for event in [*render_stream(fmt, turn, [*deltas, hostile], usage), ApiError.invalid_request("bad").to_json()]:
        assert sse_event(event) == b"data: " + dumps(event) + b"\n\n"
        strict_loads(sse_event(event)[len(b"data: "):])


@RENDER
@given(turn=s.turns)
def test_turn_as_deltas_streams_the_same_message(turn: AssistantTurn) -> None:
    fmt = ChunkFormat(META)
    state = ChatCompletionStreamState()
    for event in [fmt.first(), *map(fmt.delta, turn.as_deltas()), *fmt.finish(turn.finish_reason)]:
        state.handle_chunk(ChatCompletionChunk.model_validate(wire(event)))
    final = state.current_completion_snapshot.choices[0]
    assert final.finish_reason == turn.finish_reason.value
    assert (final.message.content or "") == (turn.content or "")
    assert [(c.id, c.function.name, c.function.arguments) for c in final.message.tool_calls or []] == [
        (c.id, c.name, c.arguments) for c in turn.tool_calls]


def test_first_tool_call_delta_names_the_call_and_later_ones_carry_only_arguments() -> None:
    fmt = ChunkFormat(META)
    first = fmt.delta(Delta(tool_calls=(ToolCallDelta(0, "call_1", "add", '{"a"'),)))["choices"][0]["delta"]
    later = fmt.delta(Delta(tool_calls=(ToolCallDelta(0, arguments=": 1}"),)))["choices"][0]["delta"]
    assert first == {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                     "function": {"name": "add", "arguments": '{"a"'}}]}
    assert later == {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}


def test_finish_emits_the_usage_chunk_only_when_the_request_asked() -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    plain = ChunkFormat.for_request(ChatCompletionRequest.from_http(body, {"X-Session-Id": "s"}), META)
    asked = ChunkFormat.for_request(
        ChatCompletionRequest.from_http({**body, "stream_options": {"include_usage": True}}, {"X-Session-Id": "s"}),
        META,
    )
    assert len(plain.finish(FinishReason.STOP, Usage(1, 2))) == 1
    closing, usage = asked.finish("stop", Usage(1, 2))
    assert closing["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert usage == {"id": META.id, "object": "chat.completion.chunk", "created": META.created, "model": META.model,
                     "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}


def test_chunk_format_for_request_takes_token_extras_from_the_request_or_the_server_flag() -> None:
    request = ChatCompletionRequest.from_http({"messages": [{"role": "user", "content": "x"}], "logprobs": True},
                                              {"X-Session-Id": "s"})
    assert ChunkFormat.for_request(request, META, token_ids_default=True) == ChunkFormat(META, False, True, True)
    assert ChunkFormat.for_request(request, META) == ChunkFormat(META, False, True, False)


# -- SSE framing -------------------------------------------------------------------------------------------------------


def test_sse_event_framing_is_exact() -> None:
    assert sse_event({"a": "é", "b": [1, None]}) == 'data: {"a":"é","b":[1,null]}\n\n'.encode()
    assert SSE_DONE == b"data: [DONE]\n\n"
    assert sse_events([{"x": 1}, {"y": 2}, SSE_DONE]) == b'data: {"x":1}\n\ndata: {"y":2}\n\ndata: [DONE]\n\n'
    assert sse_events([]) == b""


@pytest.mark.parametrize("text", ["a\u2028b", "a\u2029b", "a\u0085b", "line\nbreak\r\n", "\x1c\x1d\x1e"])
def test_sse_events_never_contain_a_raw_line_break_inside_the_json(text: str) -> None:
    frame = sse_event({"content": text})
    decoded = frame.decode("utf-8")
    assert decoded.splitlines() == [decoded[:-2], ""]
    assert strict_loads(frame[len(b"data: "):-2]) == {"content": text}


def test_dumps_falls_back_to_ascii_escapes_for_lone_surrogates() -> None:
    data = dumps({"t": "a\ud800b"})
    assert data == b'{"t":"a\\ud800b"}'


def test_sse_error_frames_the_openai_error_body() -> None:
    error = ApiError.upstream_unavailable("stream cut")
    assert sse_error(error) == b"data: " + error.to_body() + b"\n\n"


@RENDER
@given(streamed=streamed_turns(), cuts=st.lists(st.integers(0, 10_000), max_size=6))
def test_sdk_sse_decoder_reads_our_coalesced_blob_split_anywhere(
    streamed: tuple[AssistantTurn, list[Delta]], cuts: list[int]
) -> None:
    turn, deltas = streamed
    events = render_stream(ChunkFormat(META, include_usage=True), turn, deltas, Usage(1, 1))
    blob = sse_events([*events, SSE_DONE])
    bounds = sorted({0, len(blob), *(c % (len(blob) + 1) for c in cuts)})
    parts = [blob[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    decoded = list(SSEDecoder().iter_bytes(iter(parts)))
    assert [sse.data for sse in decoded] == [*(dumps(e).decode() for e in events), "[DONE]"]
    assert [json.loads(sse.data) for sse in decoded[:-1]] == json.loads(json.dumps(events))


# -- the SDK client end to end -----------------------------------------------------------------------------------------


def sdk_client(status: int, body: bytes, content_type: str) -> openai.OpenAI:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, content=body, headers={"content-type": content_type})

    return openai.OpenAI(api_key="x", base_url="http://proxy.test/v1", max_retries=0,
                         http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))


TURN = AssistantTurn("Let me add.", "5 + 3 is simple.", (ToolCall("call_s1_1_0", "add", '{"a": 5, "b": 3}'),))


def test_openai_client_reads_a_non_streaming_response_with_extensions() -> None:
    body = dumps(render_completion(META, TURN, Usage(20, 9), extras=TokenExtras([1, 2], [3, 4], [-0.1, -0.2])))
    completion = sdk_client(200, body, "application/json").chat.completions.create(
        model="qwen3", messages=[{"role": "user", "content": "add 5 and 3"}])
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.choices[0].message.tool_calls[0].function.arguments == '{"a": 5, "b": 3}'
    assert completion.choices[0].message.model_extra["reasoning_content"] == "5 + 3 is simple."
    assert (completion.model_extra["prompt_token_ids"], completion.model_extra["token_ids"]) == ([1, 2], [3, 4])


def test_openai_client_reads_a_stream_with_usage_and_stops_at_done() -> None:
    fmt = ChunkFormat(META, include_usage=True, token_extras=True)
    events = [fmt.first(prompt_token_ids=[1, 2, 3]), *map(fmt.delta, TURN.as_deltas()),
              *fmt.finish(TURN.finish_reason, Usage(3, 9))]
    blob = sse_events([*events, SSE_DONE, b'data: {"never": "read"}\n\n'])
    stream = sdk_client(200, blob, "text/event-stream").chat.completions.create(
        model="qwen3", messages=[{"role": "user", "content": "add"}], stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    assert len(chunks) == len(events)
    assert chunks[0].model_extra["prompt_token_ids"] == [1, 2, 3]
    assert chunks[-1].usage.total_tokens == 12
    assert chunks[-2].choices[0].finish_reason == "tool_calls"


def test_openai_client_raises_on_an_error_event_mid_stream() -> None:
    fmt = ChunkFormat(META)
    blob = sse_events([fmt.first(), fmt.delta(Delta(content="par")), sse_error(ApiError.upstream_unavailable("cut")),
                       SSE_DONE])
    stream = sdk_client(200, blob, "text/event-stream").chat.completions.create(
        model="qwen3", messages=[{"role": "user", "content": "x"}], stream=True)
    with pytest.raises(openai.APIError) as info:
        list(stream)
    assert info.value.code == "upstream_unavailable"


# -- several choices (n > 1) -------------------------------------------------------------------------------------------


def test_each_choice_renders_its_index_and_the_sdk_assembles_the_multiplexed_stream() -> None:
    """Chunks of three choices, interleaved as the proxy multiplexes them, with one usage chunk and one [DONE]: the
    SDK's own stream accumulator puts each choice back together by its index."""
    formats = [ChunkFormat(META, index=index) for index in range(3)]
    texts = ["Alpha one.", "Beta two.", "Gamma three."]
    opening = [fmt.first() for fmt in formats]
    pieces = [[fmt.delta(Delta(content=word + " ")) for word in text.split()] for fmt, text in zip(formats, texts)]
    interleaved = [chunk for group in zip(*pieces, strict=False) for chunk in group]
    finishing = [fmt.finish("stop")[0] for fmt in reversed(formats)]
    usage = ChunkFormat(META, include_usage=True).usage_chunk(Usage(7, 12))
    assert all(chunk["choices"][0]["index"] == index for index, chunk in enumerate(opening))
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 19
    state = ChatCompletionStreamState()
    for event in [*opening, *interleaved, *finishing, usage]:
        state.handle_chunk(ChatCompletionChunk.model_validate(event))
    completion = state.get_final_completion()
    assert [choice.index for choice in completion.choices] == [0, 1, 2]
    assert [choice.message.content for choice in completion.choices] == [text + " " for text in texts]
    assert [choice.finish_reason for choice in completion.choices] == ["stop"] * 3
    assert completion.usage.completion_tokens == 12


def test_render_completion_renders_the_choice_index() -> None:
    completion = render_completion(META, AssistantTurn("hi"), Usage(1, 1), index=3)
    assert completion["choices"][0]["index"] == 3
    assert ChatCompletion.model_validate(completion).choices[0].index == 3
