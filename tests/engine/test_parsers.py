"""``/parse_function_call`` and ``/separate_reasoning`` (sglang-protocol.md §5.1, §5.2, §5.4)."""

from __future__ import annotations

import json

import httpx

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


async def parse(client: httpx.AsyncClient, text: str, parser: str, tools: list) -> httpx.Response:
    return await client.post("/parse_function_call", json={"text": text, "tool_call_parser": parser, "tools": tools})


async def test_parse_qwen25(client: httpx.AsyncClient) -> None:
    """§5.1: response ``{"normal_text", "calls": [{"tool_index", "name", "parameters"}]}`` with parameters a JSON
    string; §5.4 qwen25: "Normal text is everything before the first <tool_call>\\n, stripped"; unknown tools are
    dropped."""
    body = (await parse(client, QWEN25_TEXT, "qwen25", [WEATHER_TOOL])).json()
    assert body["normal_text"] == "Let me check."
    assert [(c["tool_index"], c["name"]) for c in body["calls"]] == [(0, "get_weather"), (0, "get_weather")]
    assert json.loads(body["calls"][0]["parameters"]) == {"city": "Paris", "days": 2}
    assert isinstance(body["calls"][0]["parameters"], str)


async def test_parse_qwen3_coder(client: httpx.AsyncClient) -> None:
    """§5.4 qwen3_coder: "One leading and one trailing \\n inside a parameter value are stripped"; "Values are
    converted using the tool's JSON-schema type"; "An unclosed <parameter= or <function= is tolerated"."""
    body = (await parse(client, CODER_TEXT, "qwen3_coder", [WEATHER_TOOL])).json()
    assert body["normal_text"] == "Let me check."
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


async def test_parse_without_tools_and_unknown_parser(client: httpx.AsyncClient) -> None:
    """§5.1: "If tools is empty, the text is returned untouched with calls: []"; "An unknown parser name raises
    ValueError" (a 400 here); "There is no parser named qwen3"."""
    body = (await parse(client, QWEN25_TEXT, "qwen25", [])).json()
    assert body == {"normal_text": QWEN25_TEXT, "calls": []}
    r = await parse(client, QWEN25_TEXT, "qwen3", [WEATHER_TOOL])
    assert r.status_code == 400 and "qwen3" in r.json()["error"]["message"]
    r = await client.post("/parse_function_call", json={"text": 5, "tool_call_parser": "qwen25"})
    assert r.status_code == 400


async def test_separate_reasoning(client: httpx.AsyncClient) -> None:
    """§5.2: ``{"reasoning_text", "text"}``; ``return_blocks`` adds ``reasoning_blocks``, ``text_blocks``,
    ``blocks``; "text before a missing <think> counts as normal text unless qwen3-thinking is used";
    "<tool_call> appearing before </think> implicitly closes the reasoning"."""

    async def sep(text: str, parser: str = "qwen3", **extra: object) -> dict:
        r = await client.post("/separate_reasoning", json={"text": text, "reasoning_parser": parser, **extra})
        assert r.status_code == 200
        return r.json()

    assert await sep("<think>\nhmm\n</think>\n\nHello") == {"reasoning_text": "hmm\n", "text": "Hello"}
    assert await sep("hmm\n</think>\n\nHello") == {"reasoning_text": "", "text": "hmm\n</think>\n\nHello"}
    assert await sep("hmm\n</think>\n\nHello", "qwen3-thinking") == {"reasoning_text": "hmm\n", "text": "Hello"}
    assert await sep("<think>\nplan <tool_call>\nx\n</tool_call>") == {
        "reasoning_text": "plan", "text": "<tool_call>\nx\n</tool_call>"}
    blocks = await sep("<think>a</think>b", return_blocks=True)
    assert blocks["blocks"] == [{"type": "reasoning", "text": "a"}, {"type": "text", "text": "b"}]
    assert blocks["reasoning_blocks"] == ["a"] and blocks["text_blocks"] == ["b"]
    r = await client.post("/separate_reasoning", json={"text": "x", "reasoning_parser": "nope"})
    assert r.status_code == 400
