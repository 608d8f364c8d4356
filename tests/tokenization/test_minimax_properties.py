"""The TITO property battery for MiniMax-M2 and MiniMax-M3 against their official templates (transformers).

Each template runs MINIMAX_EPISODES (2,000 by default) seeded episodes from ``random_scripts`` plus the hypothesis
property over ``strategies.scripts``, driven by ``simulation.simulate`` as the Qwen and GLM batteries are. M3's
episodes draw ``thinking_mode`` (enabled / disabled / adaptive / unset) from the script's thinking flag; M2's
template has no switch. One property per episode checks every guarantee:

(a) the context of step k+1 is step k's checkpoint (ending with ``[e~[``) plus only the fragment, which starts at
    the junction and ends with the generation prompt;
(b) wherever the independent model (``predict_text_stable``) says the template reproduces the history, the TITO
    text equals the official render, and the ids equal its ids except where the drift audit reports a
    ``bpe_resplit`` at an M2 reasoning that starts with whitespace (it merges with the prompt's newline);
(c) everywhere else the drift audit reports ``reasoning_stripped`` at the first differing token;
(d) the final checkpoint decodes to the conversation's text under the tokenizer's NFC normalizer;
(e) the last-step sample masks one run per assistant turn, each ending with ``[e~[``.
"""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.families import load_tito_tokenizer
from proxy.tokenization import DriftKind, TitoTokenizer
from serving.tokenizer_files import model_tokenizer_path

from .battery import (
    BATTERY_SETTINGS,
    ExtraScript,
    check_against_official,
    check_fragments,
    check_last_step_runs,
    last_step_or_refusal,
    run_seeded,
)
from .random_scripts import random_script
from .simulation import simulate
from .strategies import Script, scripts

MINIMAX_EPISODES = int(os.environ.get("DRESSAGE_MINIMAX_EPISODES", "2000"))
FOLDERS = {"minimax_m2": "minimax", "minimax_m3": "minimax-m3"}
#: a script with M3's ``thinking_mode`` (``extra``)
MiniMaxScript = ExtraScript


def _extra(family: str, thinking: bool | None, rng: random.Random) -> dict[str, Any]:
    if family != "minimax_m3":
        return {}
    if thinking is None:
        return rng.choice([{}, {"thinking_mode": "adaptive"}])
    return {"thinking_mode": "enabled" if thinking else "disabled"}


def _with_extra(script: Script, rng: random.Random) -> MiniMaxScript:
    return MiniMaxScript.of(script, _extra(script.family, script.thinking, rng))


def predict_text_stable(family: str, kwargs: dict[str, Any], messages: list[dict[str, Any]]) -> bool:
    """Written from reading the templates. M2 renders ``<think>`` only for truthy reasoning after the last user
    message (the model generated one for every turn). M3 renders every turn's reasoning; with ``enabled`` the prompt
    opened ``<mm:think>`` which a turn without reasoning re-renders as a bare ``</mm:think>``."""
    assistants = [(i, m) for i, m in enumerate(messages) if m["role"] == "assistant"]
    if family == "minimax_m2":
        last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        return all(i > last_user and bool(m.get("reasoning_content")) for i, m in assistants)
    if kwargs.get("thinking_mode") == "enabled":
        return all(bool(m.get("reasoning_content")) for _, m in assistants)
    return True


def _starts_with_space(text: str) -> bool:
    return bool(text) and text[0].isspace()


@pytest.fixture(scope="module", params=sorted(FOLDERS))
def minimax(request, tokenizer_root) -> TitoTokenizer:
    return load_tito_tokenizer(request.param, model_tokenizer_path(FOLDERS[request.param], tokenizer_root))


def check_episode(tito: TitoTokenizer, script: MiniMaxScript) -> None:
    kwargs = script.kwargs
    sim = simulate(tito, script)
    # (a) checkpoint + fragment
    check_fragments(tito, sim, tito.generation_prompt_ids(kwargs))
    for previous, step in zip(sim.steps, sim.steps[1:]):
        assert previous.checkpoint[-1] == tito.end_of_turn_id
        assert step.fragment.text.startswith("\n]~b]")

    # (b) + (c) against the official template rendered by transformers; an M2 reasoning starting with whitespace may
    # merge with the prompt's newline in a whole-text encode (bpe_resplit, on stable steps too)
    def drift(messages: list[dict[str, Any]]) -> set[DriftKind]:
        resplit = tito.family == "minimax_m2" and any(
            _starts_with_space(m.get("reasoning_content") or "") for m in messages if m["role"] == "assistant")
        return {DriftKind.BPE_RESPLIT} if resplit else set()

    check_against_official(tito, sim, script, lambda messages: predict_text_stable(tito.family, kwargs, messages),
                           drift)
    # (d) decoding the concatenation
    last = sim.steps[-1]
    # the tokenizer's own NFC (Rust's Unicode tables; Python 3.11's unicodedata is Unicode 14 and orders some newer
    # combining marks differently, e.g. U+0899 next to U+030E)
    assert tito.decode(last.checkpoint) == tito._tokenizer.normalizer.normalize_str(last.context_text + last.completion)
    # (e) last-step: one masked run per assistant turn, ending with [e~[
    sample = last_step_or_refusal(tito, script, sim, ("]~b]", "[e~["))
    if sample is None:
        return
    check_last_step_runs(sample, sim)
    for begin, end in sample.assistant_spans:
        assert sample.ids[end - 1] == tito.end_of_turn_id
        # what the prompt holds of the turn: the thinking prefix, plus whitespace when a token straddles the start
        before = tito.decode(sample.ids[:begin]).rsplit("]~b]ai\n", 1)[1]
        assert before in ("", tito.thinking_prefix(kwargs)) or before.removeprefix(tito.thinking_prefix(kwargs)).isspace()


@BATTERY_SETTINGS
@given(data=st.data())
def test_minimax_tito_battery(minimax: TitoTokenizer, data):
    script = data.draw(scripts(minimax.family, max_steps=12))
    check_episode(minimax, _with_extra(script, random.Random(data.draw(st.integers(0, 2**32)))))


def test_minimax_tito_battery_seeded(minimax: TitoTokenizer):
    """MINIMAX_EPISODES seeded episodes; a failure names its seed."""
    def make_script(rng: random.Random) -> MiniMaxScript:
        return _with_extra(random_script(minimax.family, rng, max_steps=8), rng)

    run_seeded(minimax.family, range(MINIMAX_EPISODES), make_script, lambda script: check_episode(minimax, script))
