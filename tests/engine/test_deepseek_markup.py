"""The embedded engine speaks DeepSeek (V3.1, V3.2, V4): it tells the format from the tokenizer folder, its default
policy writes that format's markup after the prompt's thinking marker and ends on ``<｜end▁of▁sentence｜>``, and what it
writes parses back, through the proxy's own parsers and through its SGLang stand-ins, to exactly the planned call.

The prompts are the official renderings: V3.1's chat template (transformers), V4's official encoder
(``encoding_dsv4.py``); V3.2 ships neither, so its prompt is written by hand in V4's layout.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from engine.parsers import parse_function_call
from engine.tokenizer import EngineTokenizer
from proxy.parsing import MessageFormat, ToolSpecs, parse_local

from .conftest import StartEngine, client_for

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city", "days"]}}}]
SYSTEM_TOOLS = "You can call tools.\n" + "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in TOOLS)
#: folder -> (engine variant, SGLang tool-call parser, SGLang reasoning parser)
FORMATS = {"deepseek-v3.1": ("v3_1", "deepseekv31", "deepseek-v3"), "deepseek-v3.2": ("v3_2", "deepseekv32", "deepseek-v3"),
           "deepseek-v4": ("v4", "deepseekv4", "deepseek-v4")}


def folder(tokenizer_root: Path, name: str) -> Path:
    path = tokenizer_root / name
    if not (path / "tokenizer.json").is_file():
        pytest.skip(f"the {name} tokenizer is not in the tokenizer cache ({path}): run ./dev setup")
    return path


def _encoder(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("encoding_dsv4", path / "encoding_dsv4.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _hf_tokenizer(path: Path) -> Any:
    """transformers' tokenizer over the folder's files, with its official chat template (built from the already
    loaded ``tokenizers`` object: ``AutoTokenizer`` takes seconds longer on this 8 MB vocabulary)."""
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415 - slow import, one test module

    config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    return PreTrainedTokenizerFast(tokenizer_object=_tokenizer(path), chat_template=config["chat_template"],
                                   bos_token=config["bos_token"]["content"], eos_token=config["eos_token"]["content"])


@functools.cache
def _tokenizer(path: Path) -> Tokenizer:
    return Tokenizer.from_file(str(path / "tokenizer.json"))


def prompt(name: str, path: Path, messages: list[dict[str, Any]], *, thinking: bool) -> str:
    """The official generation prompt for ``messages`` (V3.2: V4's layout by hand)."""
    if name == "deepseek-v3.1":
        return _hf_tokenizer(path).apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, thinking=thinking)
    if name == "deepseek-v4":
        return _encoder(path).encode_messages(messages, thinking_mode="thinking" if thinking else "chat")
    system = "".join(m["content"] for m in messages if m["role"] == "system")
    users = "".join(f"<｜User｜>{m['content']}" for m in messages if m["role"] == "user")
    return f"<｜begin▁of▁sentence｜>{system}{users}<｜Assistant｜>{'<think>' if thinking else '</think>'}"


async def generate(start_engine: StartEngine, path: Path, *texts: str) -> list[str]:
    """The engine's output for each of ``texts`` (one engine), decoded with the special tokens kept, as the proxy
    reads ids."""
    handle = await start_engine(tokenizer_path=path)
    outputs = []
    async with client_for(handle) as client:
        for text in texts:
            ids = _tokenizer(path).encode(text, add_special_tokens=False).ids
            reply = (await client.post("/generate", json={"input_ids": ids})).json()
            outputs.append(_tokenizer(path).decode(reply["output_ids"], skip_special_tokens=False))
    return outputs


@pytest.mark.parametrize("name", list(FORMATS))
def test_the_engine_tells_the_deepseek_format_from_the_folder(tokenizer_root: Path, name: str) -> None:
    tk = EngineTokenizer.from_path(folder(tokenizer_root, name))
    assert tk.deepseek == FORMATS[name][0]
    assert tk.assistant_header == "<｜Assistant｜>" and not tk.is_glm and not tk.is_minimax
    assert tk.token_text(tk.end_of_turn_id("x")) == "<｜end▁of▁sentence｜>"


@pytest.mark.parametrize("name", list(FORMATS))
async def test_a_tool_call_turn_parses_back_to_the_planned_call(start_engine: StartEngine, tokenizer_root: Path,
                                                                name: str) -> None:
    """Thinking on and off: the reply parses (proxy parsers and the engine's SGLang stand-in) to the planned call."""
    path = folder(tokenizer_root, name)
    _, tool_parser, reasoning_parser = FORMATS[name]
    messages = [{"role": "system", "content": SYSTEM_TOOLS}, {"role": "user", "content": "Weather in Paris?"}]
    if name == "deepseek-v4":  # the encoder renders the tools itself, from the system message's "tools"
        messages[0] = {"role": "system", "content": "You can call tools.", "tools": TOOLS}
    texts = [prompt(name, path, messages, thinking=thinking) for thinking in (True, False)]
    assert texts[0].endswith("<｜Assistant｜><think>") and texts[1].endswith("<｜Assistant｜></think>")
    for thinking, output in zip((True, False), await generate(start_engine, path, *texts), strict=True):
        assert output.endswith("<｜end▁of▁sentence｜>")
        body = output.removesuffix("<｜end▁of▁sentence｜>")
        # the reply starts after the prompt's marker: thinking closes the reasoning with </think>, chat has no marker
        assert ("</think>" in body) == thinking and "<think>" not in body
        fmt = MessageFormat.from_types(tool_parser, reasoning_parser)
        message = parse_local(body, fmt, ToolSpecs.from_openai(TOOLS), session_id="s", step_index=0,
                              reasoning_open_at_start=thinking)
        assert not message.flags, body
        assert bool(message.reasoning_content) == thinking
        assert [c.name for c in message.tool_calls] == ["get_weather"], body
        arguments = json.loads(message.tool_calls[0].arguments_json)
        assert set(arguments) == {"city", "days"} and isinstance(arguments["days"], int)
        # the engine's SGLang stand-in reads the same call from the answer
        answer = body.split("</think>", 1)[1] if thinking else body
        normal, calls = parse_function_call(answer, tool_parser, TOOLS)
        assert [(c.name, json.loads(c.parameters)) for c in calls] == [("get_weather", arguments)]
        assert normal.strip() == message.content


async def test_v3_1_answers_straight_after_a_tool_output(start_engine: StartEngine, tokenizer_root: Path) -> None:
    """V3.1's template adds no ``<｜Assistant｜>`` after tool outputs: the engine answers right after the last
    ``<｜tool▁output▁end｜>``, with text and no thinking marker (as the template renders such a turn)."""
    path = folder(tokenizer_root, "deepseek-v3.1")
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                         "arguments": '{"city": "Paris", "days": 1}'}}
    messages = [{"role": "system", "content": SYSTEM_TOOLS}, {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    text = prompt("deepseek-v3.1", path, messages, thinking=True)
    assert text.endswith("<｜tool▁output▁end｜>")
    [output] = await generate(start_engine, path, text)
    body = output.removesuffix("<｜end▁of▁sentence｜>")
    assert output.endswith("<｜end▁of▁sentence｜>") and "think>" not in body and "<｜tool" not in body
    assert body.startswith("Based on the tool results")


async def test_v4_answers_after_tool_results_in_a_user_turn(start_engine: StartEngine, tokenizer_root: Path) -> None:
    path = folder(tokenizer_root, "deepseek-v4")
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                         "arguments": '{"city": "Paris", "days": 1}'}}
    messages = [{"role": "system", "content": "You can call tools.", "tools": TOOLS},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "reasoning_content": "call it", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    [output] = await generate(start_engine, path, prompt("deepseek-v4", path, messages, thinking=True))
    message = parse_local(output.removesuffix("<｜end▁of▁sentence｜>"),
                          MessageFormat.from_types("deepseekv4", "deepseek-v4"), ToolSpecs.from_openai(TOOLS),
                          session_id="s", step_index=1, reasoning_open_at_start=True)
    assert message.reasoning_content and not message.tool_calls and not message.flags
    assert message.content.startswith("Based on the tool results")

