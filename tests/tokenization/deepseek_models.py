"""Independent models of how DeepSeek's official renders rewrite history (written from reading the V3.1 template and
the V3.2 / V4 encoders), and what the batteries draw for each family: ``test_deepseek_properties.py`` compares them
with what the real references do.

**V3.1** (template): reasoning is never rendered; an assistant turn after a user turn re-renders as
``<｜Assistant｜></think>...``. Thinking off, the model was prompted with exactly that: every history is reproduced.
Thinking on, the prompt was ``<｜Assistant｜><think>`` and the model wrote ``reasoning</think>...``: any such turn in the
history drifts. Turns after tool results get no prompt and are reproduced either way. The template reads ``thinking``
(``enable_thinking``, set alongside by the scripts, is ignored).

**V3.2** (encoder): reasoning is rendered only for assistant turns after the last user message (tool results do not
count as user messages), and a user message before the last gets ``</think>`` instead of ``<think>``: chat mode
reproduces everything, thinking mode exactly the histories whose assistant turns all follow the last user message.
The encoder refuses two shapes the generators draw, which a V3.2 model never produces, so episodes are reshaped
(:func:`v32_shape`): every tool call gets exactly one result, in call order, and in thinking mode a turn without tool
calls carries reasoning.

**V4** (encoder): in chat mode, or with tools (any message carrying tools turns ``drop_thinking`` off), or with
``drop_thinking=False``, every turn re-renders as generated. In thinking mode otherwise, an assistant turn before the
last user message -- tool results are merged into user messages, so before the last tool result too -- loses its
reasoning and gets ``</think>`` instead of the prompt's ``<think>``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from serving.tokenizer_files import TokenizerFilesError, ensure_encoders, model_tokenizer_path

from .strategies import Script


def _thinking(script: Script) -> dict[str, Any]:
    return {} if script.thinking is None else {"thinking": script.thinking}


def _prompts(kwargs: dict[str, Any], *before: str) -> tuple[str, ...]:
    prefix = "<think>" if kwargs.get("thinking") else "</think>"
    return tuple(text + prefix for text in ("<｜Assistant｜>", *before))


def _after(messages: list[dict[str, Any]], roles: tuple[str, ...]) -> bool:
    """Every assistant turn comes after the last message with one of ``roles``."""
    last = max((i for i, m in enumerate(messages) if m["role"] in roles), default=-1)
    return all(i > last for i, m in enumerate(messages) if m["role"] == "assistant")


def v31_predict(kwargs: dict[str, Any], messages: list[dict[str, Any]]) -> bool:
    if not kwargs.get("thinking"):
        return True
    return all(messages[i - 1]["role"] == "tool" for i, m in enumerate(messages) if m["role"] == "assistant" and i)


def v32_predict(kwargs: dict[str, Any], messages: list[dict[str, Any]]) -> bool:
    return not kwargs.get("thinking") or _after(messages, ("user",))


def v4_predict(kwargs: dict[str, Any], messages: list[dict[str, Any]]) -> bool:
    if not kwargs.get("thinking") or kwargs.get("drop_thinking") is False or kwargs.get("has_tools"):
        return True
    return _after(messages, ("user", "tool"))


def v32_shape(script: Script) -> Script:
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


def v32_extra(script: Script, rng: random.Random) -> dict[str, Any]:
    return {**_thinking(script), **({"drop_thinking": False} if rng.randint(0, 3) == 0 else {})}


def v4_extra(script: Script, rng: random.Random) -> dict[str, Any]:
    out = v32_extra(script, rng)
    if script.thinking and rng.randint(0, 2) == 0:
        out["reasoning_effort"] = rng.choice(["max", "high"])
    if script.tools:
        out["has_tools"] = True  # not an encoder switch: tells v4_predict the tools ride on the system message
    return out


@attrs.frozen
class Model:
    """One family's battery inputs: its folder, the model above, the switches drawn, the prompts a fragment may end
    with, and the reshaping of generated episodes."""

    folder: str
    predict: Callable[[dict[str, Any], list[dict[str, Any]]], bool]
    extra: Callable[[Script, random.Random], dict[str, Any]]
    endings: Callable[[dict[str, Any]], tuple[str, ...]]
    shape: Callable[[Script], Script] = lambda script: script


MODELS = {
    "deepseek_v3_1": Model("deepseek-v3.1", v31_predict, lambda script, rng: _thinking(script),
                           lambda kwargs: (*_prompts(kwargs), "<｜tool▁output▁end｜>")),
    "deepseek_v3_2": Model("deepseek-v3.2", v32_predict, v32_extra,
                           lambda kwargs: _prompts(kwargs, "</function_results>\n\n"), v32_shape),
    "deepseek_v4": Model("deepseek-v4", v4_predict, v4_extra, _prompts),
}


def deepseek_folder(family: str, tokenizer_root: Path) -> Path:
    """The family's fetched folder; V3.2's official encoder comes from SGLang's wheel (skipped LOUDLY if it cannot be
    fetched)."""
    folder = model_tokenizer_path(MODELS[family].folder, tokenizer_root)
    if family == "deepseek_v3_2":
        try:
            ensure_encoders(tokenizer_root)
        except TokenizerFilesError as exc:
            pytest.skip(f"DeepSeek-V3.2's official encoder (sglang==0.5.23's wheel) could not be fetched: {exc}")
    return folder
