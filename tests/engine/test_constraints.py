"""Constrained decoding in the engine: ``json_schema`` / ``regex`` / ``ebnf`` / ``structural_tag`` are validated as
SGLang 0.5.23 validates them, and the default policy writes output that satisfies them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from engine import EngineHandle

from .chat import WEATHER_TOOL, render
from .conftest import CHAT_PROMPT, StartEngine, client_for, read_sse

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 2},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 3},
        "when": {"type": "string", "format": "date"},
        "where": {"$ref": "#/$defs/place"},
    },
    "required": ["city", "days", "unit", "tags", "when", "where"],
    "additionalProperties": False,
    "$defs": {"place": {"type": "object", "properties": {"lat": {"type": "number", "exclusiveMinimum": 0}},
                        "required": ["lat"]}},
}
ADD_TOOL = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}


async def generate(client: httpx.AsyncClient, prompt: str, **sampling: Any) -> httpx.Response:
    return await client.post("/generate", json={"text": prompt, "sampling_params": {"max_new_tokens": 400, **sampling},
                                                "skip_special_tokens": False})


def answer(text: str) -> str:
    """The part of an output after the reasoning (the grammar starts right after ``</think>``)."""
    return text.split("</think>", 1)[1] if "</think>" in text else text


# -- validation ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_more_than_one_constraint_is_a_400(client: httpx.AsyncClient, stream: bool) -> None:
    """sampling_params.py L318-329: a ValueError of request validation (streaming: one error event, §1.6)."""
    body = {"text": "Hi", "stream": stream, "sampling_params": {"json_schema": '{"type": "object"}', "regex": "a+"}}
    message = "Only one of json_schema, regex, ebnf, or structural_tag can be set."
    if not stream:
        response = await client.post("/generate", json=body)
        assert (response.status_code, response.json()["error"]["message"]) == (400, message)
        return
    async with client.stream("POST", "/generate", json=body) as response:
        events = await read_sse(response)
    assert events[0]["error"]["message"] == message and events[-1] == "[DONE]"


async def test_a_non_string_constraint_is_a_400_and_an_empty_one_is_unset(client: httpx.AsyncClient) -> None:
    body = {"text": "Hi", "sampling_params": {"json_schema": {"type": "object"}}}
    response = await client.post("/generate", json=body)
    assert response.status_code == 400 and "json_schema must be a string" in response.json()["error"]["message"]
    # sampling_params.py L239-242: "" is unset, so it does not count against another constraint.
    response = await client.post("/generate", json={"text": "Hi", "sampling_params": {
        "json_schema": "", "regex": "a+", "max_new_tokens": 3}})
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("json_schema", "{not json", "Failed to compile json grammar: Expecting property name"),
        ("json_schema", "[1]", "Failed to compile json grammar: JSON Schema at # must be an object or a boolean"),
        ("json_schema", '{"type": "object", "properties": {"a": {"not": {}}}}',
         "Failed to compile json grammar: JSON Schema at #/properties/a is not supported by xgrammar: keyword(s) "
         "not would be ignored"),
        ("json_schema", '{"type": "string", "format": "phone"}',
         "Failed to compile json grammar: JSON Schema at # is not supported by xgrammar: string format 'phone'"),
        ("structural_tag", '{"type": "structural_tag"}', "Failed to compile structural_tag grammar: "),
        ("structural_tag", '{"type": "structural_tag", "format": {"type": "nope"}}',
         "Failed to compile structural_tag grammar: format: unknown format type 'nope'"),
        ("structural_tag", json.dumps({"structures": [{"begin": "<a>", "schema": {}, "end": "</a>"}],
                                       "triggers": ["<b>"]}),
         "Failed to compile structural_tag grammar: format.tags[0].begin must start with exactly one trigger"),
        ("regex", "(unclosed", "Failed to compile regex grammar: invalid regex"),
        ("ebnf", 'start ::= "a"', "Failed to compile ebnf grammar: the EBNF grammar has no 'root' rule"),
    ],
)
async def test_a_constraint_that_does_not_compile_finishes_with_a_400_abort(
    start_engine: StartEngine, key: str, value: str, message: str
) -> None:
    """grammar_manager.py L186-196 / L311-317: ``set_finish_with_abort`` (status 400); non-streaming: HTTP 400. A
    script entry is not used up by the refused request."""
    handle = await start_engine(script_lines=({"session": "*", "output": "Scripted."},))
    async with client_for(handle) as client:
        response = await generate(client, "Hi", **{key: value})
        assert response.status_code == 400
        assert response.json()["error"]["message"].startswith(message)
        record = handle.engine.request_log[-1]
        assert record.finish_reason["type"] == "abort" and record.finish_reason["status_code"] == 400
        assert record.output_ids == () and record.sampling_params[key] == value
        assert (await generate(client, "Hi")).json()["text"] == "Scripted."


async def test_a_streaming_request_with_a_bad_grammar_ends_with_the_abort(client: httpx.AsyncClient) -> None:
    body = {"text": "Hi", "stream": True, "sampling_params": {"json_schema": "{"}}
    async with client.stream("POST", "/generate", json=body) as response:
        events = await read_sse(response)
    final = [event for event in events if isinstance(event, dict)][-1]
    reason = final["meta_info"]["finish_reason"]
    assert reason["type"] == "abort" and reason["status_code"] == 400
    assert reason["message"].startswith("Failed to compile json grammar")


# -- the default policy under a constraint ----------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["qwen3", "qwen3_5"])
@pytest.mark.parametrize("thinking", [True, False])
async def test_default_policy_output_satisfies_a_json_schema(
    start_engine: StartEngine, qwen3_path: Path, qwen3_5_path: Path, model: str, thinking: bool
) -> None:
    path = qwen3_path if model == "qwen3" else qwen3_5_path
    handle = await start_engine(tokenizer_path=path)
    prompt = render(path, [{"role": "user", "content": "Weather in Oslo for three days?"}],
                    **({} if thinking else {"enable_thinking": False}))
    async with client_for(handle) as client:
        body = (await generate(client, prompt, json_schema=json.dumps(SCHEMA))).json()
        assert body["meta_info"]["finish_reason"]["type"] == "stop"
        text = body["text"]
        if thinking:
            assert "</think>" in text
        value = json.loads(answer(text))
        jsonschema.validate(value, SCHEMA)
        any_object = (await generate(client, prompt, json_schema='{"type": "object"}')).json()["text"]
        any_object = json.loads(answer(any_object))
        assert isinstance(any_object, dict) and any_object
        assert isinstance(json.loads(answer((await generate(client, prompt, json_schema="$$ANY$$")).json()["text"])),
                          dict)


async def test_default_policy_writes_the_legacy_tag_of_a_required_call(
    start_engine: StartEngine, qwen3_path: Path
) -> None:
    """The qwen25 tag SGLang sends for ``tool_choice: "required"``: begin + JSON arguments + end, and the arguments
    fit the offered tool's schema (the tag's own schema is ``{}``)."""
    handle = await start_engine()
    prompt = render(qwen3_path, [{"role": "user", "content": "Weather in Oslo?"}], [WEATHER_TOOL, ADD_TOOL])
    tag = {"type": "structural_tag", "triggers": ["<tool_call>"], "at_least_one": True, "structures": [
        {"begin": '<tool_call>\n{"name":"' + name + '", "arguments":', "schema": {}, "end": "}\n</tool_call>"}
        for name in ("get_weather", "add")]}
    async with client_for(handle) as client:
        text = answer((await generate(client, prompt, structural_tag=json.dumps(tag))).json()["text"])
    calls = re.findall(r'<tool_call>\n\{"name":"(\w+)", "arguments":(.*?)\}\n</tool_call>', text)
    assert calls and re.sub(r'<tool_call>\n.*?\n</tool_call>', "", text, flags=re.S).strip() == ""
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in (WEATHER_TOOL, ADD_TOOL)}
    for name, arguments in calls:
        jsonschema.validate(json.loads(arguments), schemas[name])


@pytest.mark.parametrize("stop_after_first", [False, True])
async def test_default_policy_honours_stop_after_first(
    start_engine: StartEngine, qwen3_5_path: Path, stop_after_first: bool
) -> None:
    """The qwen_3_coder tag of a required call: two parallel calls when allowed, exactly one under
    ``stop_after_first`` (``parallel_tool_calls: false``)."""
    handle = await start_engine(tokenizer_path=qwen3_5_path)
    tools = [WEATHER_TOOL, ADD_TOOL]
    prompt = render(qwen3_5_path, [{"role": "user", "content": "Weather in Oslo?"}], tools)
    tags = [{"type": "tag", "begin": f"<tool_call>\n<function={tool['function']['name']}>\n",
             "content": {"type": "json_schema", "json_schema": tool["function"]["parameters"], "style": "qwen_xml"},
             "end": "\n</function>\n</tool_call>"} for tool in tools]
    tag = {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<tool_call>\n<function="],
                                                "tags": tags, "at_least_one": True,
                                                "stop_after_first": stop_after_first, "excludes": []}}
    async with client_for(handle) as client:
        text = answer((await generate(client, prompt, structural_tag=json.dumps(tag))).json()["text"])
    blocks = re.findall(r"<tool_call>\n<function=(\w+)>\n(.*?)\n</function>\n</tool_call>", text, flags=re.S)
    assert len(blocks) == (1 if stop_after_first else 2)
    for _, body in blocks:
        assert re.fullmatch(r"(<parameter=\w+>\n.*?\n</parameter>\n?)+", body, flags=re.S)


async def test_default_policy_writes_the_forced_tag_after_the_reasoning(
    start_engine: StartEngine, qwen3_5_path: Path
) -> None:
    handle = await start_engine(tokenizer_path=qwen3_5_path)
    prompt = render(qwen3_5_path, [{"role": "user", "content": "Add 2 and 3"}], [ADD_TOOL])
    tag = {"type": "structural_tag", "format": {"type": "tag", "begin": "<tool_call>\n<function=add>\n", "content": {
        "type": "json_schema", "json_schema": ADD_TOOL["function"]["parameters"], "style": "qwen_xml"},
        "end": "\n</function>\n</tool_call>"}}
    async with client_for(handle) as client:
        text = (await generate(client, prompt, structural_tag=json.dumps(tag))).json()["text"]
    assert re.fullmatch(r".*</think><tool_call>\n<function=add>\n<parameter=a>\n\d+\n</parameter>\n"
                        r"<parameter=b>\n\d+\n</parameter>\n</function>\n</tool_call>", text, flags=re.S), text


async def test_a_script_entry_is_emitted_as_written_under_a_constraint(start_engine: StartEngine) -> None:
    """A script entry is what the model emits: a way to play an upstream that lost the constraint."""
    handle = await start_engine(script_lines=({"session": "*", "output": "not json"},))
    async with client_for(handle) as client:
        body = (await generate(client, CHAT_PROMPT, json_schema='{"type": "object"}')).json()
    assert body["text"] == "not json"
    assert handle.engine.request_log[-1].sampling_params == {"max_new_tokens": 400, "json_schema": '{"type": "object"}'}


async def test_regex_and_ebnf_are_validated_and_leave_the_reply_alone(engine: EngineHandle) -> None:
    async with client_for(engine) as client:
        plain = (await generate(client, CHAT_PROMPT)).json()["text"]
        assert (await generate(client, CHAT_PROMPT, regex="[a-z]+")).json()["text"] == plain
        assert (await generate(client, CHAT_PROMPT, ebnf='root ::= "a"')).json()["text"] == plain
