"""A forced tool call on a family whose SGLang grammar the proxy does not build (GLM, DeepSeek, MiniMax) is a clear
400 over HTTP, and ``auto`` with a strict tool is served: both answered 500 before (docs/api.md, "Tool choice").

Each family's proxy runs on its embedded engine on ``127.0.0.1:0`` with its real tokenizer files; the official openai
SDK is the client."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
import trio

from engine import EngineConfig
from proxy.cli import run_proxy
from proxy.config import ProxyConfig

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]


@pytest.mark.parametrize(("family", "folder"), [("glm4_7", "glm-4.7-flash"), ("deepseek_v3_1", "deepseek-v3.1"),
                                                 ("minimax_m2", "minimax")])
async def test_a_forced_call_is_a_clear_400_and_a_strict_tool_is_served(family: str, folder: str,
                                                                         tokenizer_root: Path):
    path = tokenizer_root / folder
    async with trio.open_nursery() as nursery:
        config = ProxyConfig(port=0, tokenizer_path=path, trajectory_build_model=family)
        handle = await nursery.start(run_proxy, config, EngineConfig(tokenizer_path=path))
        client = openai.AsyncOpenAI(base_url=handle.url + "/v1", api_key="none", max_retries=0)
        messages = [{"role": "user", "content": "Add 2 and 3."}]
        for choice in ("required", {"type": "function", "function": {"name": "add"}}):
            with pytest.raises(openai.BadRequestError) as info:
                await client.chat.completions.create(model="m", messages=messages, tools=TOOLS, tool_choice=choice,
                                                     max_tokens=32, extra_headers={"X-Session-Id": f"{family}-f"})
            error = info.value.body
            assert info.value.status_code == 400 and error["code"] == "unsupported_parameter", error
            assert error["param"] == "tool_choice" and "'auto'" in error["message"], error
            assert "Traceback" not in error["message"] and "127.0.0.1" not in error["message"]
        strict = [{"type": "function", "function": {**TOOLS[0]["function"], "strict": True}}]
        answer = await client.chat.completions.create(model="m", messages=messages, tools=strict, max_tokens=64,
                                                      extra_headers={"X-Session-Id": f"{family}-s"})
        assert answer.choices[0].finish_reason in ("stop", "tool_calls", "length")
        await client.close()
        nursery.cancel_scope.cancel()
