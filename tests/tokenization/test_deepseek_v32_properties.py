"""The TITO property battery for DeepSeek-V3.2 against its official Python encoder (``encoding_dsv32.py`` from
SGLang 0.5.23's wheel, SHA-256 pinned, fetched by ``dressage-tokenizers``) tokenized by the model's tokenizer.json.

DEEPSEEK_EPISODES (2,000 by default) seeded episodes plus the hypothesis property (``deepseek_checks``). The
encoder refuses two shapes the generators draw, which a V3.2 model never produces, so episodes are reshaped
(``shape``): every tool call gets exactly one result, in call order (more results than calls is the encoder's
``No tool calls but found tool output``; fewer leaves the model no prompt), and in thinking mode a turn without tool
calls carries reasoning (the encoder refuses a thinking turn with neither).

The independent model of the encoder (written from reading it): reasoning is rendered only for assistant turns after
the last user message (tool results do not count as user messages here), and a user message before the last gets
``</think>`` instead of ``<think>``. So in chat mode every history re-renders as generated, and in thinking mode
exactly those whose assistant turns all follow the last user message (one user query and its tool loop).
"""

from __future__ import annotations

import random
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.families import load_tito_tokenizer
from proxy.families.detection import detect_family
from proxy.tokenization import TitoTokenizer
from serving.tokenizer_files import ENCODER_FILES, TokenizerFilesError, ensure_encoders, model_tokenizer_path

from .deepseek_checks import run_drawn, run_seeded
from .strategies import TOOLS, Script
from .test_glm_properties import GLM_SETTINGS


def predict_stable(kwargs: dict[str, Any], messages: list[dict[str, Any]]) -> bool:
    if not kwargs.get("thinking"):
        return True
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    return all(i > last_user for i, m in enumerate(messages) if m["role"] == "assistant")


def shape(script: Script) -> Script:
    steps = []
    for assistant, follow_up in script.steps:
        assistant = dict(assistant)
        calls = assistant.get("tool_calls") or []
        if script.thinking and not calls and not assistant.get("reasoning_content"):
            assistant["reasoning_content"] = "ok"
        results = [m for m in follow_up if m["role"] == "tool"]
        if results:
            results = [{**results[i % len(results)], "tool_call_id": call["id"]} for i, call in enumerate(calls)]
        steps.append((assistant, (*results, *(m for m in follow_up if m["role"] != "tool"))))
    return attrs.evolve(script, steps=tuple(steps))


def extra(script: Script, rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {} if script.thinking is None else {"thinking": script.thinking}
    if rng.randint(0, 3) == 0:
        out["drop_thinking"] = False
    return out


def endings(kwargs: dict[str, Any]) -> tuple[str, ...]:
    prefix = "<think>" if kwargs.get("thinking") else "</think>"
    return ("<｜Assistant｜>" + prefix, "</function_results>\n\n" + prefix)


@pytest.fixture(scope="module")
def v32_folder(tokenizer_root):
    folder = model_tokenizer_path("deepseek-v3.2", tokenizer_root)
    try:
        ensure_encoders(tokenizer_root)
    except TokenizerFilesError as exc:
        pytest.skip(f"DeepSeek-V3.2's official encoder (sglang==0.5.23's wheel) could not be fetched: {exc}")
    return folder


@pytest.fixture(scope="module")
def v32(v32_folder) -> TitoTokenizer:
    return load_tito_tokenizer("deepseek_v3_2", v32_folder)


@GLM_SETTINGS
@given(data=st.data())
def test_deepseek_v32_tito_battery(v32: TitoTokenizer, data):
    run_drawn(v32, data, extra, predict_stable, endings, shape)


def test_deepseek_v32_tito_battery_seeded(v32: TitoTokenizer):
    run_seeded(v32, extra, predict_stable, endings, shape)


def test_the_reference_is_sglangs_encoding_path(v32: TitoTokenizer, v32_folder):
    """encode_full is what SGLang 0.5.23's dsv32 path sends: an empty system message first carrying the tools, the
    official encoder's text, tokenized by tokenizer.json (its own module, imported here by path)."""
    import importlib.util

    import tokenizers

    spec = importlib.util.spec_from_file_location("official_dsv32", v32_folder / "encoding_dsv32.py")
    official = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(official)
    tokenizer = tokenizers.Tokenizer.from_file(str(v32_folder / "tokenizer.json"))
    call = {"id": "c", "type": "function", "function": {"name": "search", "arguments": '{"q": "ü 中文", "n": [1]}'}}
    messages = [
        {"role": "user", "content": "hi 👍🏽"}, {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "r1"},
    ]
    official_messages = [{"role": "system", "content": "", "tools": list(TOOLS)}, *messages]
    for mode, kwargs in (("chat", {}), ("thinking", {"thinking": True})):
        text = official.encode_messages(official_messages, thinking_mode=mode)
        assert v32.encode_full(messages, TOOLS, kwargs) == tokenizer.encode(text, add_special_tokens=False).ids
    assert detect_family(v32_folder).family.name == "deepseek_v3_2"
    assert "deepseek-v3.2/encoding_dsv32.py" in ENCODER_FILES
