"""tool_choice, parallel_tool_calls and response_format end to end (issue 14, items 5 and 6), through the official
openai SDK: the proxy renders, constrains and parses as SGLang 0.5.23's OpenAI server does, the embedded engine
honours the constraint, and the recorded trajectory is what the model saw."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest

from engine import EngineConfig, serve_engine
from proxy.cli import run_proxy
from proxy.config import ProxyConfig
from tests.api.sglang_expected import qwen3_coder_tag, qwen25_tag
from tests.e2e.gateway import smg_gateway
from tests.e2e.harness import CALCULATOR_TOOLS, assistant_echo

USER = [{"role": "user", "content": "Please calculate 5 plus 3."}]
NAMED = {"type": "function", "function": {"name": "multiply"}}
ADD_JSON = '<tool_call>\n{"name": "add", "arguments": {"a": 5, "b": 3}}\n</tool_call>'
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in CALCULATOR_TOOLS}
CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "population": {"type": "integer", "minimum": 0},
        "districts": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "climate": {"enum": ["cold", "mild", "hot"]},
    },
    "required": ["city", "population", "districts", "climate"],
    "additionalProperties": False,
}


def headers(session: str) -> dict[str, str]:
    return {"X-Session-Id": session}


def constraint_of(record: Any) -> dict[str, str]:
    return {key: value for key, value in record.sampling_params.items()
            if key in ("json_schema", "regex", "ebnf", "structural_tag")}


# Pinned from SGLang 0.5.23 (see tests/api/sglang_expected.py for the file and line of every piece).
EXPECTED = {
    ("qwen3", "auto"): {},
    ("qwen3", "none"): {},
    ("qwen3", "required"): {"structural_tag": qwen25_tag(["add", "multiply"], at_least_one=True)},
    ("qwen3", "named"): {"structural_tag": qwen25_tag(["add", "multiply"], at_least_one=True)},
    ("qwen3", "required-serial"): {"structural_tag": qwen25_tag(["add", "multiply"], at_least_one=True)},
    ("qwen3_5", "auto"): {},
    ("qwen3_5", "none"): {},
    ("qwen3_5", "required"): {"structural_tag": qwen3_coder_tag(["add", "multiply"])},
    ("qwen3_5", "named"): {"structural_tag": qwen3_coder_tag(["multiply"], forced=True)},
    ("qwen3_5", "required-serial"): {"structural_tag": qwen3_coder_tag(["add", "multiply"], parallel=False)},
}
CHOICES: dict[str, dict[str, Any]] = {
    "auto": {"tool_choice": "auto"},
    "none": {"tool_choice": "none"},
    "required": {"tool_choice": "required"},
    "named": {"tool_choice": NAMED},
    "required-serial": {"tool_choice": "required", "parallel_tool_calls": False},
}


@pytest.mark.parametrize("model", ["qwen3", "qwen3_5"])
async def test_the_constraint_sent_upstream_is_sglangs_for_every_tool_choice(start_proxy, model: str) -> None:
    proxy = await start_proxy(model=model)
    async with proxy.async_client() as client:
        for name, extra in CHOICES.items():
            session = f"{model}-{name}"
            await client.chat.completions.create(
                model="m", messages=USER, tools=CALCULATOR_TOOLS, extra_headers=headers(session), **extra)
            [record] = proxy.requests_of(session)
            assert constraint_of(record) == EXPECTED[(model, name)], name


@pytest.mark.parametrize("model", ["qwen3", "qwen3_5"])
async def test_required_and_named_choices_answer_with_a_conforming_call(start_proxy, model: str) -> None:
    """The default policy under SGLang's constraint; the named choice's prompt offers that tool alone."""
    proxy = await start_proxy(model=model)
    async with proxy.async_client() as client:
        required = await client.chat.completions.create(
            model="m", messages=USER, tools=CALCULATOR_TOOLS, tool_choice="required", extra_headers=headers("r"))
        named = await client.chat.completions.create(
            model="m", messages=USER, tools=CALCULATOR_TOOLS, tool_choice=NAMED, extra_headers=headers("n"))
    for completion in (required, named):
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
        for call in choice.message.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    assert [call.function.name for call in named.choices[0].message.tool_calls] == ["multiply"]
    [named_record] = proxy.requests_of("n")
    prompt = proxy.tito.decode(list(named_record.input_ids))
    assert '"name": "multiply"' in prompt and '"name": "add"' not in prompt
    assert list(named_record.input_ids) == proxy.tito.encode_full(USER, [CALCULATOR_TOOLS[1]], {})
    segment = (await proxy.segments("n"))[0]
    assert segment["tools"] == [CALCULATOR_TOOLS[1]]
    assert segment["token_ids"] == list(named_record.input_ids) + list(named_record.output_ids)


async def test_parallel_tool_calls_false_keeps_one_call_where_sglang_enforces_it(start_proxy) -> None:
    """Qwen3.5: the qwen_3_coder tag's ``stop_after_first`` holds a required answer to one call (two without it)."""
    proxy = await start_proxy(model="qwen3_5")
    async with proxy.async_client() as client:
        counts = []
        for parallel in (True, False):
            completion = await client.chat.completions.create(
                model="m", messages=USER, tools=CALCULATOR_TOOLS, tool_choice="required",
                parallel_tool_calls=parallel, extra_headers=headers(f"parallel-{parallel}"))
            counts.append(len(completion.choices[0].message.tool_calls))
    assert counts == [2, 1]


async def test_qwen3_legacy_tag_does_not_limit_calls_as_in_sglang(start_proxy) -> None:
    """SGLang 0.5.23 enforces ``parallel_tool_calls: false`` only through the grammar, and the qwen25 legacy tag
    has no call limit: the proxy sends the same and answers every call the model made (cutting calls would make
    the answer disagree with the recorded tokens)."""
    proxy = await start_proxy(model="qwen3")
    async with proxy.async_client() as client:
        completion = await client.chat.completions.create(
            model="m", messages=USER, tools=CALCULATOR_TOOLS, tool_choice="required", parallel_tool_calls=False,
            extra_headers=headers("serial"))
    assert len(completion.choices[0].message.tool_calls) == 2


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_choice_none_renders_no_tools_and_parses_no_calls(start_proxy, stream: bool) -> None:
    """SGLang renders the template without tools and runs no tool-call parser: call markup stays content. The
    session's context is what was rendered, so switching to ``auto`` (tools offered) starts a new segment."""
    session = "none"
    proxy = await start_proxy(script=[{"session": session, "output": "Here: " + ADD_JSON},
                                      {"session": session, "output": "Now with tools."}])
    messages = list(USER)
    async with proxy.async_client() as client:
        kwargs = dict(model="m", messages=messages, tools=CALCULATOR_TOOLS, tool_choice="none",
                      extra_headers=headers(session))
        if stream:
            chunks = [chunk async for chunk in await client.chat.completions.create(stream=True, **kwargs)]
            content = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
            finish = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1]
            assert not any(chunk.choices[0].delta.tool_calls for chunk in chunks if chunk.choices)
        else:
            completion = await client.chat.completions.create(**kwargs)
            content, finish = completion.choices[0].message.content, completion.choices[0].finish_reason
            assert completion.choices[0].message.tool_calls is None
        assert content == "Here: " + ADD_JSON and finish == "stop"
        messages += [{"role": "assistant", "content": content}, {"role": "user", "content": "Use the tools."}]
        await client.chat.completions.create(model="m", messages=messages, tools=CALCULATOR_TOOLS,
                                             extra_headers=headers(session))
    first, second = proxy.requests_of(session)
    assert list(first.input_ids) == proxy.tito.encode_full(USER, None, {})
    assert "<tools>" not in proxy.tito.decode(list(first.input_ids))
    assert list(second.input_ids) == proxy.tito.encode_full(messages, CALCULATOR_TOOLS, {})
    segments = await proxy.segments(session)
    assert [(segment["tools"], segment["boundary_reason"]) for segment in segments] == [
        (None, "session_start"), (CALCULATOR_TOOLS, "context_changed")]
    assert segments[0]["token_ids"] == list(first.input_ids) + list(first.output_ids)


async def test_a_required_output_without_a_call_is_answered_as_text_like_sglang(start_proxy) -> None:
    """An upstream that did not apply the constraint (smg 1.13 drops structural_tag): SGLang answers the text,
    no calls, finish_reason stop (serving_chat.py ``_process_tool_calls``); so does the proxy, and records it."""
    proxy = await start_proxy(script=[{"session": "unmet", "output": "<think>\nhm\n</think>\n\nNo tool for me."}])
    async with proxy.async_client() as client:
        completion = await client.chat.completions.create(
            model="m", messages=USER, tools=CALCULATOR_TOOLS, tool_choice="required", extra_headers=headers("unmet"))
    choice = completion.choices[0]
    assert (choice.message.content, choice.message.tool_calls, choice.finish_reason) == (
        "No tool for me.", None, "stop")
    [record] = proxy.requests_of("unmet")
    assert constraint_of(record) == {"structural_tag": qwen25_tag(["add", "multiply"], at_least_one=True)}
    [segment] = await proxy.segments("unmet")
    assert segment["token_ids"] == list(record.input_ids) + list(record.output_ids)


@pytest.mark.parametrize("model", ["qwen3", "qwen3_5"])
@pytest.mark.parametrize("stream", [False, True])
async def test_response_format_json_schema_output_parses_and_conforms(start_proxy, model: str, stream: bool) -> None:
    proxy = await start_proxy(model=model)
    response_format = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}}
    async with proxy.async_client() as client:
        kwargs = dict(model="m", messages=[{"role": "user", "content": "Describe Oslo."}],
                      response_format=response_format, extra_headers=headers("json"))
        if stream:
            chunks = [chunk async for chunk in await client.chat.completions.create(stream=True, **kwargs)]
            content = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        else:
            content = (await client.chat.completions.create(**kwargs)).choices[0].message.content
        jsonschema.validate(json.loads(content), CITY)
        [record] = proxy.requests_of("json")
        # protocol.py L1238-1247: json.dumps of the schema.
        assert constraint_of(record) == {"json_schema": json.dumps(CITY)}
        plain = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Describe Oslo."}],
            response_format={"type": "json_object"}, extra_headers=headers("object"))
    assert isinstance(json.loads(plain.choices[0].message.content), dict)
    assert constraint_of(proxy.requests_of("object")[0]) == {"json_schema": '{"type": "object"}'}


async def test_response_format_and_tool_calls_in_one_agent_loop(start_proxy) -> None:
    """A tool step, then a structured final answer, in one session and one segment (the format is not rendered)."""
    proxy = await start_proxy()
    messages: list[dict[str, Any]] = list(USER)
    async with proxy.async_client() as client:
        step = await client.chat.completions.create(
            model="m", messages=messages, tools=CALCULATOR_TOOLS, tool_choice="required", extra_headers=headers("loop"))
        call = step.choices[0].message.tool_calls[0]
        messages += [assistant_echo(step.choices[0].message), {"role": "tool", "tool_call_id": call.id, "content": "8"}]
        schema = {"type": "object", "properties": {"result": {"type": "integer"}}, "required": ["result"]}
        final = await client.chat.completions.create(
            model="m", messages=messages, tools=CALCULATOR_TOOLS, extra_headers=headers("loop"),
            response_format={"type": "json_schema", "json_schema": {"name": "result", "schema": schema}})
    jsonschema.validate(json.loads(final.choices[0].message.content), schema)
    segments = await proxy.segments("loop")
    assert [segment["step_ids"] for segment in segments] == [[1, 2]]


async def test_bad_constraints_are_400s_and_record_nothing(start_proxy) -> None:
    proxy = await start_proxy()
    async with proxy.async_client() as client:
        with pytest.raises(openai.BadRequestError) as conflict:
            await client.chat.completions.create(
                model="m", messages=USER, tools=CALCULATOR_TOOLS, tool_choice="required",
                response_format={"type": "json_object"}, extra_headers=headers("bad"))
        assert conflict.value.body["code"] == "invalid_request" and conflict.value.body["param"] == "tool_choice"
        with pytest.raises(openai.BadRequestError) as missing:
            await client.chat.completions.create(
                model="m", messages=USER, response_format={"type": "json_schema", "json_schema": {"name": "x"}},
                extra_headers=headers("bad"))
        assert missing.value.body["message"] == "schema_ is required for json_schema response format request."
        # A schema the grammar backend refuses: SGLang's 400 abort, passed on as upstream_rejected (400).
        with pytest.raises(openai.BadRequestError) as grammar:
            await client.chat.completions.create(
                model="m", messages=USER, extra_headers=headers("bad"), response_format={
                    "type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {"type": "string"}}}})
        assert grammar.value.body["code"] == "upstream_rejected"
        assert "Failed to compile json grammar" in grammar.value.body["message"]
    assert await proxy.debug("bad") is None or not (await proxy.segments("bad"))


async def test_behind_smg_json_schema_arrives_and_structural_tag_is_dropped(nursery, qwen3_path) -> None:
    """The gateway's closed ``sampling_params`` (smg 1.13, sglang-protocol.md 4.2) keeps ``json_schema`` and drops
    ``structural_tag``: behind it, ``response_format`` is enforced but a required or named tool call is not (the
    proxy then answers what the model wrote, as SGLang does; docs/api.md)."""
    engine = await nursery.start(serve_engine, EngineConfig(port=0, tokenizer_path=qwen3_path))
    async with smg_gateway([engine.url]) as router:
        proxy = await nursery.start(run_proxy, ProxyConfig(
            port=0, tokenizer_path=qwen3_path, sglang_router_url=router, sglang_worker_urls=(engine.url,),
            tool_call_parse_backend="local", reasoning_parse_backend="local"))
        async with openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0) as client:
            await client.chat.completions.create(
                model="m", messages=USER, tools=CALCULATOR_TOOLS, tool_choice="required", extra_headers=headers("t"))
            answer = await client.chat.completions.create(
                model="m", messages=USER, response_format={"type": "json_schema", "json_schema": {
                    "name": "city", "schema": CITY}}, extra_headers=headers("j"))
        jsonschema.validate(json.loads(answer.choices[0].message.content), CITY)
        records = {record.routing_key: record for record in engine.engine.request_log}
        assert constraint_of(records["t"]) == {}
        assert constraint_of(records["j"]) == {"json_schema": json.dumps(CITY)}
