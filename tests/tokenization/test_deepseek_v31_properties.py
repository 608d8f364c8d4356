"""The TITO property battery for DeepSeek-V3.1 against its official template rendered by transformers.

DEEPSEEK_EPISODES (2,000 by default) seeded episodes plus the hypothesis property over ``strategies.scripts`` (tool
loops with parallel tool results, reasoning, user interjections, unicode; ``thinking`` unset / true / false, with
``enable_thinking`` set alongside, which the template ignores); the properties are in ``deepseek_checks``.

The independent model of the template (written from reading it): reasoning is never rendered, and an assistant turn
after a user turn re-renders as ``<｜Assistant｜></think>...``. With thinking off the model was prompted with exactly
that, so every history is reproduced; with thinking on the prompt was ``<｜Assistant｜><think>`` and the model wrote
``reasoning</think>...``, so any such turn in the history drifts. Turns after tool results get no prompt and are
reproduced either way.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.families import load_tito_tokenizer
from proxy.tokenization import TitoTokenizer
from serving.tokenizer_files import model_tokenizer_path

from .deepseek_checks import EOS, run_drawn, run_seeded
from .strategies import Script
from .test_glm_properties import GLM_SETTINGS


def predict_stable(kwargs: dict[str, Any], messages: list[dict[str, Any]]) -> bool:
    if not kwargs.get("thinking"):
        return True
    return all(
        messages[i - 1]["role"] == "tool" for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0
    )


def endings(kwargs: dict[str, Any]) -> tuple[str, ...]:
    return ("<｜Assistant｜>" + ("<think>" if kwargs.get("thinking") else "</think>"), "<｜tool▁output▁end｜>")


def extra(script: Script, rng: random.Random) -> dict[str, Any]:
    return {} if script.thinking is None else {"thinking": script.thinking}


@pytest.fixture(scope="module")
def v31(tokenizer_root) -> TitoTokenizer:
    return load_tito_tokenizer("deepseek_v3_1", model_tokenizer_path("deepseek-v3.1", tokenizer_root))


@GLM_SETTINGS
@given(data=st.data())
def test_deepseek_v31_tito_battery(v31: TitoTokenizer, data):
    run_drawn(v31, data, extra, predict_stable, endings)


def test_deepseek_v31_tito_battery_seeded(v31: TitoTokenizer):
    run_seeded(v31, extra, predict_stable, endings)


def test_the_reference_is_transformers_apply_chat_template(v31: TitoTokenizer, tokenizer_root):
    """Our render is the one transformers' AutoTokenizer gives for the official template (arguments as JSON text)."""
    transformers = pytest.importorskip("transformers")
    folder = model_tokenizer_path("deepseek-v3.1", tokenizer_root)
    hf = transformers.AutoTokenizer.from_pretrained(str(folder))
    call = {"id": "c", "type": "function", "function": {"name": "search", "arguments": '{"q": "ü 中文"}'}}
    messages = [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "hi 👍🏽"},
        {"role": "assistant", "content": "", "tool_calls": [call, call]},
        {"role": "tool", "tool_call_id": "c", "content": "r1"}, {"role": "tool", "tool_call_id": "c", "content": "r2"},
        {"role": "assistant", "content": "done"}, {"role": "user", "content": "again"},
    ]
    for kwargs in ({}, {"thinking": True}, {"thinking": False}):
        want = hf.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False, **kwargs)
        assert v31.encode_full(messages, None, kwargs) == list(want)
    assert EOS in v31.render_full(messages)
