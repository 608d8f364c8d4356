"""The Anthropic Messages API end to end: the official ``anthropic`` SDK's ``messages.create`` and
``messages.stream`` against the proxy on its scripted engine, a tool-using conversation with thinking over three
turns (the SDK's own content blocks echoed back, thinking and tool_use included), then the session finalized and its
export checked: one segment, the generated spans trained (mask 1) with their logprobs, everything else mask 0.

Also: ``count_tokens`` equals the prompt the proxy sent for the same request, and errors come in Anthropic's shape
(the SDK raises its own typed exceptions), including those met before the route runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
import trio
from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter

from tests.e2e.harness import CALCULATOR_TOOLS, generated_ids

RAW_EVENT = TypeAdapter(RawMessageStreamEvent)
SYSTEM = "You are a helpful calculator assistant with access to calculator tools."
USER = "Please calculate 5 plus 3, and then multiply the result by 2."
ANSWER = "5 plus 3 equals 8. Multiplying 8 by 2 gives 16."
#: the chat calculator tools as Anthropic custom tools
TOOLS = [
    {"name": tool["function"]["name"], "description": tool["function"]["description"],
     "input_schema": tool["function"]["parameters"]}
    for tool in CALCULATOR_TOOLS
]
REASONING = ["First add 5 and 3.", "Now multiply 8 by 2.", "Done."]
TEXTS = ["I'll calculate that for you.", "Continuing the calculation.", ANSWER]
CALLS = [("add", {"a": 5, "b": 3}), ("multiply", {"a": 8, "b": 2})]


def outputs() -> list[str]:
    def call(name: str, arguments: dict[str, int]) -> str:
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"

    return [
        f"<think>\n{REASONING[0]}\n</think>\n\n{TEXTS[0]}\n" + call(*CALLS[0]),
        f"<think>\n{REASONING[1]}\n</think>\n\n{TEXTS[1]}\n" + call(*CALLS[1]),
        f"<think>\n{REASONING[2]}\n</think>\n\n{ANSWER}",
    ]


def client(proxy: Any, session: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=proxy.url, api_key="not-needed", max_retries=0, timeout=60.0,
        default_headers={"X-Session-Id": session},
    )


def request(messages: list[Any]) -> dict[str, Any]:
    return dict(
        model="claude-dressage", max_tokens=512, system=SYSTEM, messages=messages, tools=TOOLS,
        thinking={"type": "enabled", "budget_tokens": 1024},
        # The 2026 API has no sampling parameters any more; older clients send them, and they are served.
        extra_body={"temperature": 0.7, "top_p": 0.9},
    )


async def count_tokens(proxy: Any, session: str, messages: list[Any]) -> int:
    def run() -> int:
        body = request(messages)
        del body["max_tokens"], body["extra_body"]
        return client(proxy, session).messages.count_tokens(**body).input_tokens

    return await trio.to_thread.run_sync(run)


def check_answer(message: Any, turn: int) -> None:
    """The Message of turn ``turn``: thinking (signed by the proxy), text, the tool call; the stop reason."""
    kinds = [block.type for block in message.content]
    assert kinds == (["thinking", "text", "tool_use"] if turn < 2 else ["thinking", "text"]), kinds
    thinking, text = message.content[0], message.content[1]
    assert thinking.thinking.strip() == REASONING[turn]
    assert thinking.signature.startswith("dressage-v1:")
    assert text.text == TEXTS[turn]
    if turn < 2:
        call = message.content[2]
        assert (call.name, call.input) == CALLS[turn]
        assert call.id.startswith("call_")
        assert message.stop_reason == "tool_use"
    else:
        assert message.stop_reason == "end_turn"
    assert message.stop_sequence is None
    assert message.role == "assistant" and message.model == "claude-dressage"
    assert message.id.startswith("msg_")


async def run_conversation(proxy: Any, session: str, *, stream: bool) -> None:
    tito = proxy.tito
    messages: list[Any] = [{"role": "user", "content": USER}]
    results = ["8", "16"]
    events: list[str] = []
    started: list[int] = []  # message_start's input_tokens, per streamed turn
    counts: list[int] = []  # count_tokens, per turn
    for turn, output in enumerate(outputs()):
        counted = await count_tokens(proxy, session, messages)
        counts.append(counted)

        def create() -> Any:
            with client(proxy, session) as sdk:
                if not stream:
                    return sdk.messages.create(**request(messages))
                with sdk.messages.stream(**request(messages)) as answer:
                    for event in answer:
                        events.append(event.type)
                        if event.type == "message_start":
                            started.append(event.message.usage.input_tokens)
                    return answer.get_final_message()

        message = await trio.to_thread.run_sync(create)
        check_answer(message, turn)
        if not stream:
            assert message._request_id.startswith("req_")  # the request-id header, read by the SDK
        sent = proxy.requests_of(session)[-1]
        # usage and count_tokens say the prompt the proxy sent; output_tokens every generated token.
        assert message.usage.input_tokens == len(sent.input_ids) == counted
        if stream:
            assert started[-1] == len(sent.input_ids)
        assert message.usage.output_tokens == len(generated_ids(tito, output))
        assert list(sent.output_ids) == generated_ids(tito, output)
        assert (sent.sampling_params["temperature"], sent.sampling_params["top_p"]) == (0.7, 0.9)
        assert sent.sampling_params["max_new_tokens"] == 512
        # The agent echoes the SDK's own blocks back (thinking with its signature, text, tool_use), as the SDK's
        # docs show, then answers the tool call with a tool_result.
        messages.append({"role": "assistant", "content": message.content})
        if turn < 2:
            call = message.content[2]
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": results[turn]},
            ]})
    if stream:
        assert events[0] == "message_start" and events[-1] == "message_stop"
        assert {"thinking", "signature", "text", "input_json", "content_block_stop", "message_delta"} <= set(events)

    # One segment: every request continued the previous prompt and answer, token for token.
    sent = proxy.requests_of(session)
    assert len(sent) == 3
    for before, after in zip(sent, sent[1:]):
        assert after.input_ids[: len(before.input_ids) + len(before.output_ids)] == \
            before.input_ids + before.output_ids
    segments = await proxy.segments(session)
    assert len(segments) == 1, [segment["boundary_reason"] for segment in segments]
    segment = segments[0]
    last = sent[-1]
    assert segment["token_ids"] == list(last.input_ids + last.output_ids)
    expected_mask = [0] * len(segment["token_ids"])
    for record in sent:
        start = len(record.input_ids)
        expected_mask[start:start + len(record.output_ids)] = [1] * len(record.output_ids)
    assert segment["loss_mask"] == expected_mask
    # Each turn's count_tokens is where the recorded segment's trained span of that turn begins.
    starts = [i for i, mask in enumerate(expected_mask) if mask and (i == 0 or not expected_mask[i - 1])]
    assert starts == counts
    trained = [lp for lp, mask in zip(segment["logprobs"], expected_mask) if mask]
    assert len(trained) == sum(len(record.output_ids) for record in sent)
    assert all(lp != 0.0 for lp in trained[:-1])
    assert segment["num_turns"] == 3
    assert tito.decode(segment["token_ids"]).endswith(ANSWER + "<|im_end|>")


async def test_messages_create_tools_and_thinking_three_turns_one_segment(start_proxy) -> None:
    proxy = await start_proxy(model="qwen3", script=[{"session": "anth-create", "output": o} for o in outputs()])
    await run_conversation(proxy, "anth-create", stream=False)


async def test_messages_stream_tools_and_thinking_three_turns_one_segment(start_proxy) -> None:
    proxy = await start_proxy(model="qwen3", script=[{"session": "anth-stream", "output": o} for o in outputs()])
    await run_conversation(proxy, "anth-stream", stream=True)


async def test_stop_sequence_and_max_tokens(start_proxy) -> None:
    proxy = await start_proxy(model="qwen3", script=[
        {"session": "anth-stop", "output": "<think>\nOk.\n</think>\n\nHello world STOP never shown"},
        {"session": "anth-stop", "output": "one two three four five six seven eight nine ten", "eos": False},
    ])

    def run() -> tuple[Any, Any]:
        with client(proxy, "anth-stop") as sdk:
            stopped = sdk.messages.create(
                model="m", max_tokens=64, stop_sequences=["STOP"], messages=[{"role": "user", "content": "hi"}],
            )
            cut = sdk.messages.create(model="m", max_tokens=4, messages=[
                {"role": "user", "content": "hi"}, {"role": "assistant", "content": stopped.content},
                {"role": "user", "content": "count"},
            ])
            return stopped, cut

    stopped, cut = await trio.to_thread.run_sync(run)
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", "STOP")
    assert [block.type for block in stopped.content] == ["thinking", "text"]
    assert stopped.content[1].text.strip() == "Hello world"
    assert (cut.stop_reason, cut.stop_sequence, cut.usage.output_tokens) == ("max_tokens", None, 4)


async def test_errors_come_in_anthropic_shape_from_every_layer(start_proxy) -> None:
    """The SDK raises its own typed errors, whose bodies are Anthropic's; the access rules, the body limit and the
    router, which run before the route, answer in the same shape on these paths (the chat path keeps OpenAI's)."""
    proxy = await start_proxy(model="qwen3", api_key="secret", max_body_bytes=64 * 1024, script=[
        {"session": "anth-err", "output": "never", "error_status": 503},
        {"session": "anth-err", "output": "never", "error_status": 503},
    ])

    def sdk_errors() -> list[Any]:
        caught = []
        calls = [
            (anthropic.Anthropic(base_url=proxy.url, api_key="wrong", max_retries=0), {}),
            (anthropic.Anthropic(base_url=proxy.url, api_key="secret", max_retries=0), {}),
            (client(proxy, "anth-err").with_options(api_key="secret"),
             {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            (client(proxy, "anth-err").with_options(api_key="secret"), {}),
        ]
        for sdk, extra in calls:
            with pytest.raises(anthropic.APIStatusError) as error:
                sdk.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}], **extra)
            caught.append(error.value)
        # A stream refused before it started is a plain JSON error with its status, not an SSE body.
        with pytest.raises(anthropic.APIStatusError) as error, client(proxy, "anth-err").with_options(
            api_key="secret"
        ).messages.stream(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]) as stream:
            stream.get_final_message()
        assert error.value.status_code == 503 and error.value.body["error"]["type"] == "overloaded_error"
        return caught

    wrong_key, no_session, server_tool, upstream = await trio.to_thread.run_sync(sdk_errors)
    assert isinstance(wrong_key, anthropic.AuthenticationError)
    assert isinstance(no_session, anthropic.BadRequestError) and isinstance(server_tool, anthropic.BadRequestError)
    assert isinstance(upstream, anthropic.InternalServerError) and upstream.status_code == 503
    for error, kind, code in [
        (wrong_key, "authentication_error", "unauthorized"),
        (no_session, "invalid_request_error", "missing_session_id"),
        (server_tool, "invalid_request_error", "unsupported_parameter"),
        (upstream, "overloaded_error", "upstream_overloaded"),
    ]:
        assert error.body["type"] == "error" and error.body["request_id"].startswith("req_")
        assert (error.body["error"]["type"], error.body["error"]["code"]) == (kind, code)
        assert error.request_id == error.body["request_id"]
    assert "X-Session-Id" in no_session.message and "web_search_20250305" in server_tool.message

    key = {"x-api-key": "secret", "anthropic-version": "2023-06-01", "X-Session-Id": "anth-raw"}
    async with httpx.AsyncClient(base_url=proxy.url, timeout=60) as http:
        answers = {
            "not json": await http.post(
                "/v1/messages", content=b"{", headers={**key, "content-type": "application/json"}),
            "text/plain": await http.post("/v1/messages", content=b"{}", headers={**key, "content-type": "text/plain"}),
            "too large": await http.post("/v1/messages/count_tokens", json={"pad": "x" * 70_000}, headers=key),
            "unknown path": await http.post("/v1/messages/batches", json={}, headers=key),
            "wrong method": await http.get("/v1/messages", headers=key),
            "chat": await http.post("/v1/chat/completions", json={}, headers=key),
        }
    expected = {
        "not json": (400, "invalid_request_error"), "text/plain": (415, "invalid_request_error"),
        "too large": (413, "request_too_large"), "unknown path": (404, "not_found_error"),
        "wrong method": (405, "invalid_request_error"),
    }
    for name, (status, kind) in expected.items():
        answer = answers[name]
        assert answer.status_code == status, (name, answer.text)
        body = answer.json()
        assert body["type"] == "error" and body["error"]["type"] == kind, (name, body)
        assert body["request_id"] == answer.headers["x-request-id"]
        assert int(answer.headers["content-length"]) == len(answer.content)
    assert answers["chat"].status_code == 400 and "code" in answers["chat"].json()["error"]  # OpenAI's shape


async def test_a_stream_cut_upstream_ends_in_an_error_event(start_proxy) -> None:
    proxy = await start_proxy(model="qwen3", script=[
        {"session": "anth-cut", "output": "one two three four five six seven", "drop_after": 3},
    ])

    def run() -> tuple[list[str], Any]:
        seen: list[str] = []
        with client(proxy, "anth-cut") as sdk, pytest.raises(anthropic.APIStatusError) as error:
            with sdk.messages.stream(model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as s:
                for event in s:
                    seen.append(event.type)
        return seen, error.value

    seen, error = await trio.to_thread.run_sync(run)
    assert seen[0] == "message_start" and "message_stop" not in seen
    assert error.body["type"] == "error" and error.body["error"]["type"] == "api_error"
    assert error.body["error"]["code"] == "upstream_unavailable"
    assert await proxy.debug("anth-cut") is None or (await proxy.debug("anth-cut"))["steps"] == 0


# -- Claude Code's request shape (captured from Claude Code 2.1.332, trimmed: /work/notes/cli-requests, i18-clis) -----

CLAUDE_CODE_BETAS = (
    "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
    "mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,"
    "effort-2025-11-24"
)
CLAUDE_CODE_TOOLS = [
    {"name": "DeferredToolPlaceholder", "description": "Reserved placeholder; never call this tool.",
     "input_schema": {"type": "object", "properties": {}}, "defer_loading": True},
    {"name": "Write", "description": "Writes a file to the local filesystem.", "input_schema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
        "properties": {"file_path": {"description": "The absolute path", "type": "string"},
                       "content": {"description": "The content to write", "type": "string"}},
        "required": ["file_path", "content"], "additionalProperties": False}},
]
CLAUDE_CODE_SYSTEM = [
    {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.62b; cc_entrypoint=sdk-cli;"},
    {"type": "text", "text": "You are a Claude agent, built on Anthropic's Claude Agent SDK.",
     "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "\nYou are an agent working with the user toward their goals.\n\n",
     "cache_control": {"type": "ephemeral"}},
]
ENVIRONMENT = "# Environment\nYou have been invoked in the following environment:\n - Primary working directory: /w"


async def test_claude_code_shaped_requests_stay_one_segment(start_proxy) -> None:
    """Claude Code's requests as captured: ``?beta=true``, its beta headers, a system message inside ``messages``
    (as a block list, then as a string), ``cache_control`` everywhere, ``metadata``, ``defer_loading`` tools,
    adaptive thinking with ``display: "omitted"``, ``context_management``, ``output_config.effort``,
    ``max_tokens`` 32000 (clamped to what the context leaves). On Qwen3.5, whose template takes a system message
    only first, the inner one is a user turn. The thinking block comes back empty and is echoed so; its signature
    restores the recorded reasoning, and the conversation stays one segment."""
    write = ("<tool_call>\n<function=Write>\n<parameter=file_path>\n/w/hello.txt\n</parameter>\n"
             "<parameter=content>\nhello\n</parameter>\n</function>\n</tool_call>")
    script = ["I will write it.\n</think>\n\n" + write, "Done.\n</think>\n\nI wrote hello into hello.txt."]
    proxy = await start_proxy(model="qwen3_5", script=[{"session": "claude-code", "output": o} for o in script])
    user = {"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>\nAttribution for git commits.\n</system-reminder>"},
        {"type": "text", "text": "Write hello into hello.txt"},
    ]}
    inner_system = {"role": "system", "content": [
        {"type": "text", "text": ENVIRONMENT, "cache_control": {"type": "ephemeral"}}]}

    def turn(messages: list[Any]) -> tuple[Any, list[str]]:
        seen: list[str] = []
        with client(proxy, "claude-code") as sdk, sdk.messages.stream(
            model="dressage/embedded-engine", max_tokens=32000, system=CLAUDE_CODE_SYSTEM, messages=messages,
            tools=CLAUDE_CODE_TOOLS, thinking={"type": "adaptive", "display": "omitted"},
            output_config={"effort": "high"},
            metadata={"user_id": json.dumps({"device_id": "d", "account_uuid": "", "session_id": "c8db"})},
            extra_headers={"anthropic-beta": CLAUDE_CODE_BETAS, "x-app": "cli"}, extra_query={"beta": "true"},
            extra_body={"context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}},
        ) as stream:
            for event in stream:
                seen.append(event.type if event.type != "content_block_delta" else event.delta.type)
            return stream.get_final_message(), seen

    first, seen = await trio.to_thread.run_sync(turn, [user, inner_system])
    assert [block.type for block in first.content] == ["thinking", "tool_use"]
    assert first.content[0].thinking == "" and "thinking_delta" not in seen  # display: omitted
    call = first.content[1]
    assert (call.name, call.input, first.stop_reason) == ("Write", {"file_path": "/w/hello.txt", "content": "hello"},
                                                           "tool_use")
    history = [user, {"role": "system", "content": ENVIRONMENT}, {"role": "assistant", "content": first.content},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                             "content": "File created successfully at: /w/hello.txt",
                                             "cache_control": {"type": "ephemeral"}}]}]
    second, _ = await trio.to_thread.run_sync(turn, history)
    assert second.content[-1].text == "I wrote hello into hello.txt." and second.stop_reason == "end_turn"

    sent = proxy.requests_of("claude-code")
    first_step = sent[0].input_ids + sent[0].output_ids
    assert sent[1].input_ids[: len(first_step)] == first_step
    prompt = proxy.tito.decode(list(sent[0].input_ids))
    assert "<|im_start|>user\n" + ENVIRONMENT in prompt  # the inner system message, as a user turn on Qwen3.5
    assert len(sent[1].input_ids) + sent[1].sampling_params["max_new_tokens"] <= 32768  # within the context
    segments = await proxy.segments("claude-code")
    assert len(segments) == 1 and segments[0]["num_turns"] == 2
    # The recorded reasoning is the model's, restored from the signature though the client never saw it.
    assert "I will write it." in proxy.tito.decode(segments[0]["token_ids"])


async def test_tool_choice_constrains_and_thinking_disabled_reaches_the_template(start_proxy) -> None:
    call = "<tool_call>\n" + json.dumps({"name": "multiply", "arguments": {"a": 2, "b": 3}}) + "\n</tool_call>"
    proxy = await start_proxy(model="qwen3", script=[{"session": "anth-choice", "output": call}])

    def run() -> Any:
        with client(proxy, "anth-choice") as sdk:
            return sdk.messages.create(
                model="m", max_tokens=128, messages=[{"role": "user", "content": "2*3?"}], tools=TOOLS,
                tool_choice={"type": "tool", "name": "multiply", "disable_parallel_tool_use": True},
                thinking={"type": "disabled"},
            )

    message = await trio.to_thread.run_sync(run)
    assert [(block.type, block.name, block.input) for block in message.content] == \
        [("tool_use", "multiply", {"a": 2, "b": 3})]
    sent = proxy.requests_of("anth-choice")[-1]
    # A named choice renders that tool alone and constrains decoding (as the chat path does for the same choice).
    assert {"json_schema", "structural_tag"} & set(sent.sampling_params)
    prompt = proxy.tito.decode(list(sent.input_ids))
    assert '"name": "multiply"' in prompt and '"name": "add"' not in prompt
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # enable_thinking: false


async def test_claude_codes_captured_requests_are_served(start_proxy) -> None:
    """The exact bodies and headers Claude Code sent (``tests/frontends/claude_code_requests``), replayed over HTTP:
    each is answered with a well-formed stream (every event parsed by the SDK's own types). Claude Code's own
    session header keys the session where no X-Session-Id was configured."""
    proxy = await start_proxy(model="qwen3_5", session_id_headers=("X-Session-Id", "X-Claude-Code-Session-Id"))
    captures = Path(__file__).parents[1] / "frontends" / "claude_code_requests"
    for path in sorted(captures.glob("*.json")):
        exchange = json.loads(path.read_text())
        skip = {"host", "content-length", "connection", "accept-encoding"}
        headers = {name: value for name, value in exchange["headers"].items() if name.lower() not in skip}
        async with httpx.AsyncClient(base_url=proxy.url, timeout=120) as http:
            answer = await http.post(exchange["path"], json=exchange["body"], headers=headers)
        assert answer.status_code == 200, (path.name, answer.text)
        assert answer.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: ")]
        kinds = [event["type"] for event in events]
        assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"], (path.name, kinds)
        for event in events:
            if event["type"] != "ping":
                RAW_EVENT.validate_python(event)
        session = headers.get("X-Session-Id") or headers["X-Claude-Code-Session-Id"]
        assert proxy.requests_of(session), path.name
