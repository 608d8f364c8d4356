"""The default policy: plausible Qwen-format replies read from the rendered chat prompt (spec §12)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from .chat import WEATHER_TOOL, render
from .conftest import StartEngine, client_for

ASK = [{"role": "user", "content": "What's the weather in Paris for 3 days?"}]
AFTER_TOOL = ASK + [
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
        "name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "celsius"}}}]},
    {"role": "tool", "content": "sunny, 21 C"},
]
SLIME = {"skip_special_tokens": False, "no_stop_trim": True, "max_new_tokens": 2000}


async def _generate(client: httpx.AsyncClient, prompt: str) -> dict:
    r = await client.post("/generate", json={"text": prompt, "sampling_params": SLIME})
    assert r.status_code == 200
    return r.json()


async def test_qwen3_tool_call_in_json_format(start_engine: StartEngine, qwen3_path: Path) -> None:
    """Qwen3 with tools offered and a user turn last: reasoning, then one ``<tool_call>`` in the qwen25 JSON wire
    format (§5.4) for an offered tool with schema-valid arguments, then ``<|im_end|>``; it parses with
    ``/parse_function_call`` (``qwen25``)."""
    handle = await start_engine(tokenizer_path=qwen3_path)
    async with client_for(handle) as client:
        text = (await _generate(client, render(qwen3_path, ASK, [WEATHER_TOOL])))["text"]
        assert text.startswith("<think>\n") and text.endswith("</tool_call><|im_end|>")
        call = json.loads(text.split("<tool_call>\n")[1].split("\n</tool_call>")[0])
        assert call["name"] == "get_weather"
        assert isinstance(call["arguments"]["city"], str) and isinstance(call["arguments"]["days"], int)
        assert call["arguments"]["unit"] in ("celsius", "fahrenheit")
        parsed = (await client.post("/parse_function_call", json={
            "text": text.split("</think>")[1].removesuffix("<|im_end|>"), "tool_call_parser": "qwen25",
            "tools": [WEATHER_TOOL]})).json()
        assert [c["name"] for c in parsed["calls"]] == ["get_weather"]
        assert json.loads(parsed["calls"][0]["parameters"]) == call["arguments"]
        answer = (await _generate(client, render(qwen3_path, AFTER_TOOL, [WEATHER_TOOL])))["text"]
        assert "<tool_call>" not in answer and "</think>\n\n" in answer and answer.endswith("<|im_end|>")


async def test_qwen3_5_tool_call_in_xml_format(start_engine: StartEngine, qwen3_5_path: Path) -> None:
    """Qwen3.5: the prompt already ends with ``<think>\\n`` (§5.4 "Qwen3.5 chat templates put <think>\\n into the
    prompt, so the model output starts inside the reasoning and only </think> appears in the output"); the call
    is in the ``qwen3_coder`` XML format and parses with it."""
    handle = await start_engine(tokenizer_path=qwen3_5_path)
    async with client_for(handle) as client:
        prompt = render(qwen3_5_path, ASK, [WEATHER_TOOL])
        assert prompt.endswith("<think>\n")
        body = await _generate(client, prompt)
        text = body["text"]
        assert "<think>" not in text and text.count("</think>") == 1
        assert "<function=get_weather>" in text and text.endswith("</tool_call><|im_end|>")
        assert body["output_ids"][-1] == 248046
        parsed = (await client.post("/parse_function_call", json={
            "text": text.split("</think>")[1].removesuffix("<|im_end|>"), "tool_call_parser": "qwen3_coder",
            "tools": [WEATHER_TOOL]})).json()
        arguments = json.loads(parsed["calls"][0]["parameters"])
        assert set(arguments) == {"city", "days", "unit"} and isinstance(arguments["days"], int)
        no_think = await _generate(client, render(qwen3_5_path, ASK, None, enable_thinking=False))
        assert "think>" not in no_think["text"] and no_think["text"].startswith("Here is a short answer")


async def test_default_policy_continues_a_partial_reply(start_engine: StartEngine, qwen3_path: Path) -> None:
    """A continuation request (prompt + partial output as input_ids, §8 recipe) continues the same reply token
    for token, so an aborted-and-resubmitted generation is seamless."""
    handle = await start_engine(tokenizer_path=qwen3_path)
    tk = handle.engine.tokenizer
    prompt = tk.encode(render(qwen3_path, ASK, [WEATHER_TOOL]))
    async with client_for(handle) as client:
        full = (await client.post("/generate", json={"input_ids": prompt, "sampling_params": SLIME})).json()
        for cut in (1, 7, len(full["output_ids"]) // 2):
            rest = (await client.post("/generate", json={
                "input_ids": prompt + full["output_ids"][:cut], "sampling_params": SLIME})).json()
            assert full["output_ids"][:cut] + rest["output_ids"] == full["output_ids"]


async def test_raw_prompt_gets_plain_text(client: httpx.AsyncClient) -> None:
    """A prompt without chat markup gets plain sentences and the end-of-turn token."""
    body = (await client.post("/generate", json={"text": "Once upon a time"})).json()
    assert body["output_ids"][-1] == 151645 and "<" not in body["text"]
