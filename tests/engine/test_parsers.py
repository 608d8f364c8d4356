"""``/parse_function_call`` and ``/separate_reasoning`` (sglang-protocol.md §5.1, §5.2, §5.4), as SGLang 0.5.23
answers them. Each behaviour below was read in 0.5.23's source and is also checked case by case against its own
parser classes by ``test_parser_fixtures.py``."""

from __future__ import annotations

import json

import httpx
import pytest

from engine.parsers import ParserCrash, parse_function_call, separate_reasoning

from .chat import WEATHER_TOOL

QWEN25_TEXT = (
    'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>\n'
    '<tool_call>\n{"name": "unknown_tool", "arguments": {}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lima"}}\n</tool_call>'
)
CODER_TEXT = (
    "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>"
)
CALC = {"type": "function", "function": {"name": "calc", "parameters": {"type": "object", "properties": {
    "x": {"type": "number"}, "exact": {"type": "boolean"}, "opts": {"type": "object"}}}}}


def coder_call(name: str, **parameters: str) -> str:
    body = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in parameters.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def calls(text: str, parser: str, tools: list) -> tuple[str, list[tuple[int, str, object]]]:
    normal_text, items = parse_function_call(text, parser, tools)
    return normal_text, [(c.tool_index, c.name, json.loads(c.parameters)) for c in items]


async def parse(client: httpx.AsyncClient, text: str, parser: str, tools: list) -> httpx.Response:
    return await client.post("/parse_function_call", json={"text": text, "tool_call_parser": parser, "tools": tools})


async def test_parse_qwen25(client: httpx.AsyncClient) -> None:
    """§5.1: response ``{"normal_text", "calls": [{"tool_index", "name", "parameters"}]}`` with parameters a JSON
    string; qwen25 (``qwen25_detector.py``): normal text is the text before the first ``<tool_call>\\n``, stripped;
    calls to tools that were not offered are dropped (``base_format_detector.py::parse_base_json``)."""
    body = (await parse(client, QWEN25_TEXT, "qwen25", [WEATHER_TOOL])).json()
    assert body["normal_text"] == "Let me check."
    assert [(c["tool_index"], c["name"]) for c in body["calls"]] == [(0, "get_weather"), (0, "get_weather")]
    assert json.loads(body["calls"][0]["parameters"]) == {"city": "Paris", "days": 2}
    assert isinstance(body["calls"][0]["parameters"], str)


async def test_parse_qwen3_coder(client: httpx.AsyncClient) -> None:
    """qwen3_coder (``qwen3_coder_detector.py::detect_and_parse``): normal text is the text before ``<tool_call>``,
    not stripped; one leading and one trailing newline of a value are removed; values are converted by the schema
    type; an unclosed ``<parameter=`` or ``<function=`` is tolerated."""
    body = (await parse(client, CODER_TEXT, "qwen3_coder", [WEATHER_TOOL])).json()
    assert body["normal_text"] == "Let me check.\n\n"
    assert json.loads(body["calls"][0]["parameters"]) == {"city": "Paris", "days": 3, "unit": "celsius"}
    unclosed = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n"
    body = (await parse(client, unclosed, "qwen3_coder", [WEATHER_TOOL])).json()
    assert json.loads(body["calls"][0]["parameters"]) == {"city": "Oslo"}
    typed_tool = {"type": "function", "function": {"name": "t", "parameters": {"type": "object", "properties": {
        "n": {"type": "number"}, "b": {"type": "boolean"}, "o": {"type": "object"}, "z": {"type": "string"}}}}}
    text = ("<tool_call>\n<function=t>\n<parameter=n>\n1.5\n</parameter>\n<parameter=b>\ntrue\n</parameter>\n"
            "<parameter=o>\n{\"k\": [1]}\n</parameter>\n<parameter=z>\nnull\n</parameter>\n</function>\n</tool_call>")
    body = (await parse(client, text, "qwen3_coder", [typed_tool])).json()
    assert json.loads(body["calls"][0]["parameters"]) == {"n": 1.5, "b": True, "o": {"k": [1]}, "z": None}


def test_qwen3_coder_numbers_calls_by_their_position_in_the_output() -> None:
    """``detect_and_parse`` counts ``tool_idx`` over the calls it finds; the position in ``tools`` is not used."""
    text = coder_call("calc", x="1") + "\n" + coder_call("get_weather", city="Rome") + "\n" + coder_call("calc")
    assert [(i, name) for i, name, _ in calls(text, "qwen3_coder", [WEATHER_TOOL, CALC])[1]] == [
        (0, "calc"), (1, "get_weather"), (2, "calc")]
    # qwen25 keeps the position in tools (``_get_tool_indices``).
    json_text = '<tool_call>\n{"name": "calc", "arguments": {}}\n</tool_call>'
    assert calls(json_text, "qwen25", [WEATHER_TOOL, CALC])[1] == [(1, "calc", {})]


def test_qwen3_coder_keeps_spaced_names_and_returns_calls_to_tools_not_offered() -> None:
    """The name is ``func_body[:index(">")]``, unstripped; there is no check against ``tools`` (an unknown tool's
    parameters stay strings: ``_get_arguments_config`` gives ``{}``)."""
    text = "<tool_call>\n<function= calc >\n<parameter= x >\n2\n</parameter>\n</function>\n</tool_call>"
    assert calls(text, "qwen3_coder", [CALC]) == ("", [(0, " calc ", {" x ": "2"})])
    assert calls(coder_call("rm_rf", path="/"), "qwen3_coder", [CALC]) == ("", [(0, "rm_rf", {"path": "/"})])
    assert calls('<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>', "qwen25", [CALC]) == ("", [])


@pytest.mark.parametrize(("value", "converted"), [
    ("true", True), ("TRUE", True), ("false", False), ("yes", False), ("1", False), ("", False), ("null", None)])
def test_a_boolean_that_is_not_true_or_false_is_false(value: str, converted: object) -> None:
    """``_convert_param_value``: ``param_value.lower() == "true"`` for boolean types (it only warns otherwise)."""
    assert calls(coder_call("calc", exact=value), "qwen3_coder", [CALC])[1] == [(0, "calc", {"exact": converted})]


@pytest.mark.parametrize("literal", ["{1, 2}", "b'x'", "1j", "...", "{'a': {1}}"])
def test_a_python_literal_json_cannot_write_returns_the_text_without_calls(literal: str) -> None:
    """``ast.literal_eval`` gives a set / bytes / complex / Ellipsis, ``json.dumps`` raises TypeError inside
    ``detect_and_parse``'s ``try``, which returns ``normal_text=text`` and no calls."""
    text = "Sure.\n" + coder_call("calc", opts=literal)
    assert parse_function_call(text, "qwen3_coder", [CALC]) == (text, [])


def test_schema_types_are_inferred_as_0_5_23_does() -> None:
    """``utils.infer_type_from_json_schema``: anyOf/oneOf, enum values, allOf, properties, items; ``double`` is no
    float type (it falls through to a Python literal); only object/array types try ``json.loads`` first."""
    tool = {"type": "function", "function": {"name": "t", "parameters": {"type": "object", "properties": {
        "any": {"anyOf": [{"type": "integer"}, {"type": "null"}]}, "en": {"enum": [1, 2]},
        "mix": {"enum": [1, "a"]}, "all": {"allOf": [{"type": "string"}, {"type": "number"}]},
        "obj": {"properties": {}}, "arr": {"items": {}}, "dbl": {"type": "double"}, "nul": {"type": "null"}}}}}
    text = coder_call("t", any="7", en="2", mix="2", all="1.5", obj='{"a": 1}', arr="[1]", dbl="1.0", nul="true")
    assert calls(text, "qwen3_coder", [tool])[1] == [(0, "t", {
        "any": 7, "en": 2, "mix": "2", "all": 1.5, "obj": {"a": 1}, "arr": [1], "dbl": 1.0, "nul": "true"})]


def test_qwen25_list_items_that_are_not_objects_crash_sglang() -> None:
    """``parse_base_json`` calls ``act.get`` on every item, and ``name in tool_indices`` on a list name: SGLang's
    handler does not catch the exception, the server answers 500."""
    for body in ("[1]", '"calc"', '{"name": ["calc"], "arguments": {}}'):
        with pytest.raises(ParserCrash):
            parse_function_call(f"<tool_call>\n{body}\n</tool_call>", "qwen25", [CALC])


async def test_parse_without_tools_and_unknown_parser(client: httpx.AsyncClient) -> None:
    """§5.1: "If tools is empty, the text is returned untouched with calls: []"; an unknown parser name raises
    ValueError in ``FunctionCallParser.__init__``, outside any ``try``: a 500. A bad request body is a 400."""
    body = (await parse(client, QWEN25_TEXT, "qwen25", [])).json()
    assert body == {"normal_text": QWEN25_TEXT, "calls": []}
    r = await parse(client, QWEN25_TEXT, "qwen3", [WEATHER_TOOL])
    assert r.status_code == 500 and r.text == "Internal Server Error"
    r = await client.post("/parse_function_call", json={"text": 5, "tool_call_parser": "qwen25"})
    assert r.status_code == 400


def split(text: str, parser: str) -> tuple[str, str]:
    result = separate_reasoning(text, parser)
    return result.reasoning_text, result.text


def test_reasoning_is_not_stripped() -> None:
    """``BaseReasoningFormatDetector._detect_and_parse_impl`` returns the pieces around the markers as they are."""
    assert split("<think>\nhmm\n</think>\n\nHello", "qwen3") == ("\nhmm\n", "\n\nHello")
    assert split("\nhmm \n", "qwen3-thinking") == ("\nhmm \n", "")


def test_only_leading_think_markers_are_removed() -> None:
    """``while processed_text.startswith(think_start_text)``: leading ones only, as many as there are; a
    ``<think>`` anywhere still opens reasoning for ``qwen3`` (``think_start_token in text``)."""
    assert split("<think><think>a<think>b</think>c", "qwen3") == ("a<think>b", "c")
    assert split("  <think>a</think>c", "qwen3") == ("  <think>a", "c")
    assert split("Hi <think>a</think>c", "qwen3") == ("Hi <think>a", "c")
    assert split("no markers </think> here", "qwen3") == ("", "no markers </think> here")


def test_tool_call_ends_reasoning_only_when_no_think_end_follows() -> None:
    """``tool_start_token`` is looked for only when ``think_end_token not in processed_text``; DeepSeek-R1 has
    no tool start token."""
    assert split("<think>plan<tool_call>x</tool_call>", "qwen3") == ("plan", "<tool_call>x</tool_call>")
    assert split("<think>plan<tool_call>x</tool_call>\n</think>A", "qwen3") == (
        "plan<tool_call>x</tool_call>\n", "A")
    assert split("plan<tool_call>x", "deepseek-r1") == ("plan<tool_call>x", "")


async def test_separate_reasoning(client: httpx.AsyncClient) -> None:
    """§5.2: ``{"reasoning_text", "text"}``; ``return_blocks`` adds ``reasoning_blocks``, ``text_blocks``,
    ``blocks`` (``parse_non_stream_blocks``: a text block always); "text before a missing <think> counts as normal
    text unless qwen3-thinking is used"; names are looked up lower-cased; an unknown one is a 500."""

    async def sep(text: str, parser: str = "qwen3", **extra: object) -> dict:
        r = await client.post("/separate_reasoning", json={"text": text, "reasoning_parser": parser, **extra})
        assert r.status_code == 200
        return r.json()

    assert await sep("<think>\nhmm\n</think>\n\nHello") == {"reasoning_text": "\nhmm\n", "text": "\n\nHello"}
    assert await sep("hmm\n</think>\n\nHello") == {"reasoning_text": "", "text": "hmm\n</think>\n\nHello"}
    assert await sep("hmm\n</think>\n\nHello", "Qwen3-Thinking") == {"reasoning_text": "hmm\n", "text": "\n\nHello"}
    assert await sep("<think>\nplan <tool_call>\nx\n</tool_call>") == {
        "reasoning_text": "\nplan ", "text": "<tool_call>\nx\n</tool_call>"}
    blocks = await sep("<think>a</think>b", return_blocks=True)
    assert blocks["blocks"] == [{"type": "reasoning", "text": "a"}, {"type": "text", "text": "b"}]
    assert blocks["reasoning_blocks"] == ["a"] and blocks["text_blocks"] == ["b"]
    blocks = await sep("<think>a", return_blocks=True)
    assert blocks["blocks"] == [{"type": "reasoning", "text": "a"}, {"type": "text", "text": ""}]
    assert blocks["text_blocks"] == [""]
    r = await client.post("/separate_reasoning", json={"text": "x", "reasoning_parser": "nope"})
    assert r.status_code == 500
    r = await client.post("/separate_reasoning", json={"text": 1, "reasoning_parser": "qwen3"})
    assert r.status_code == 400
