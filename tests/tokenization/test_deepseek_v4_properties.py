"""The TITO property battery for DeepSeek-V4 against its official Python encoder (``encoding_dsv4.py`` from the
model's folder, SHA-256 pinned, loaded by path) tokenized by the model's ``tokenizer.json``.

DEEPSEEK_EPISODES (2,000 by default) seeded episodes plus the hypothesis property (``deepseek_checks``); switches:
``thinking`` unset / true / false, ``drop_thinking=False`` (a quarter), ``reasoning_effort`` ``max`` / ``high`` (a third
of the thinking episodes).

The independent model of the encoder (written from reading it): in chat mode, or with tools (any message carrying
tools turns ``drop_thinking`` off), or with ``drop_thinking=False``, every turn re-renders as generated. In thinking
mode otherwise, an assistant turn before the last user message -- tool results are merged into user messages, so
before the last tool result too -- loses its reasoning and gets ``</think>`` instead of the prompt's ``<think>``.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.families import load_tito_tokenizer
from proxy.families.detection import detect_family
from proxy.tokenization import TemplateMismatchError, TitoTokenizer
from proxy.tokenization.deepseek_encoder import DeepSeekV4TitoTokenizer
from serving.tokenizer_files import model_tokenizer_path

from .deepseek_checks import run_drawn, run_seeded
from .strategies import TOOLS, Script
from .test_glm_properties import GLM_SETTINGS


def predict_stable(kwargs: dict[str, Any], messages: list[dict[str, Any]]) -> bool:
    if not kwargs.get("thinking") or kwargs.get("drop_thinking") is False or kwargs.get("has_tools"):
        return True
    last_user = max((i for i, m in enumerate(messages) if m["role"] in ("user", "tool")), default=-1)
    return all(i > last_user for i, m in enumerate(messages) if m["role"] == "assistant")


def extra(script: Script, rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {} if script.thinking is None else {"thinking": script.thinking}
    if rng.randint(0, 3) == 0:
        out["drop_thinking"] = False
    if script.thinking and rng.randint(0, 2) == 0:
        out["reasoning_effort"] = rng.choice(["max", "high"])
    if script.tools:
        out["has_tools"] = True  # not an encoder switch: tells the model above that tools ride on the system message
    return out


def endings(kwargs: dict[str, Any]) -> tuple[str, ...]:
    return ("<｜Assistant｜>" + ("<think>" if kwargs.get("thinking") else "</think>"),)


@pytest.fixture(scope="module")
def v4_folder(tokenizer_root):
    return model_tokenizer_path("deepseek-v4", tokenizer_root)


@pytest.fixture(scope="module")
def v4(v4_folder) -> TitoTokenizer:
    return load_tito_tokenizer("deepseek_v4", v4_folder)


@GLM_SETTINGS
@given(data=st.data())
def test_deepseek_v4_tito_battery(v4: TitoTokenizer, data):
    run_drawn(v4, data, extra, predict_stable, endings)


def test_deepseek_v4_tito_battery_seeded(v4: TitoTokenizer):
    run_seeded(v4, extra, predict_stable, endings)


def test_the_reference_is_the_official_encoder(v4: TitoTokenizer, v4_folder):
    """encode_full is the official encoder's text (its own module, imported here by path) tokenized by
    tokenizer.json, with the request mapped as SGLang maps it: tools on a first system message."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("official_dsv4", v4_folder / "encoding_dsv4.py")
    official = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(official)
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer.from_file(str(v4_folder / "tokenizer.json"))
    call = {"id": "c", "type": "function", "function": {"name": "search", "arguments": '{"q": "ü 中文", "n": [1]}'}}
    messages = [
        {"role": "user", "content": "hi 👍🏽"}, {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "r1"}, {"role": "user", "content": "again"},
    ]
    official_messages = [{"role": "system", "content": "", "tools": list(TOOLS)}, *messages]
    for mode, kwargs in (("chat", {}), ("thinking", {"thinking": True}), ("thinking", {"enable_thinking": True})):
        text = official.encode_messages(official_messages, thinking_mode=mode)
        assert v4.encode_full(messages, TOOLS, kwargs) == tokenizer.encode(text, add_special_tokens=False).ids


def test_a_changed_encoder_is_never_executed(v4_folder, tmp_path):
    """Detection and loading hash the encoder first: a folder with another encoding_dsv4.py is refused, unexecuted."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((v4_folder / name).read_bytes())
    marker = tmp_path / "executed"
    (tmp_path / "encoding_dsv4.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    with pytest.raises(TemplateMismatchError):
        DeepSeekV4TitoTokenizer.from_path(tmp_path)
    with pytest.raises(FileNotFoundError):  # no template, no official encoder: nothing to render with
        detect_family(tmp_path)
    assert not marker.exists()
    assert hashlib.sha256((v4_folder / "encoding_dsv4.py").read_bytes()).hexdigest() == (
        DeepSeekV4TitoTokenizer.ENCODER_SHA256
    )
    assert detect_family(v4_folder).family.name == "deepseek_v4"
