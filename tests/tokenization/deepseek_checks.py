"""The DeepSeek TITO battery's one property per episode, shared by V3.1 (official Jinja template), V3.2 and V4
(official Python encoders). The episode shapes, the driver and the GLM battery's script type are reused
(``random_scripts``, ``simulation.simulate``, ``battery.ExtraScript``); only what differs per family is
passed in: the independent model of which histories re-render as generated (``predict_stable``) and the texts a
fragment may end with (the prompts the family gives the model).

(a) the context of step k+1 is step k's checkpoint (ending with ``<｜end▁of▁sentence｜>``) plus only the fragment,
    which ends with one of the family's prompts;
(b) wherever ``predict_stable`` says the reference reproduces the history, the TITO ids equal the reference's ids
    (the official template rendered by transformers, or the official encoder, tokenized by tokenizer.json); the
    prediction agrees with the real render everywhere;
(c) everywhere else the drift audit reports ``reasoning_stripped`` at the first differing token;
(d) the final checkpoint decodes to the conversation's text byte for byte (DeepSeek's tokenizers normalize nothing);
(e) the last-step sample masks one run per assistant turn, each ending with ``<｜end▁of▁sentence｜>``, and carries
    logprobs exactly when every run equals what the model generated, which it does wherever the final list
    re-renders as generated; refused (``LastStepError``) when a message holds the family's turn markup.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from proxy.tokenization import TitoTokenizer

from .random_scripts import random_script
from .simulation import simulate
from .strategies import Script, scripts
from .battery import ExtraScript, check_against_official, check_last_step_runs, last_step_or_refusal

#: seeded episodes per family; DRESSAGE_DEEPSEEK_EPISODES changes it for a quicker or deeper run
DEEPSEEK_EPISODES = int(os.environ.get("DRESSAGE_DEEPSEEK_EPISODES", "2000"))
EOS = "<｜end▁of▁sentence｜>"

Predict = Callable[[dict[str, Any], list[dict[str, Any]]], bool]


def with_extra(script: Script, extra: dict[str, Any]) -> ExtraScript:
    return ExtraScript.of(script, extra)


def check_episode(tito: TitoTokenizer, script: ExtraScript, predict_stable: Predict, endings: tuple[str, ...]) -> None:
    kwargs = script.kwargs
    sim = simulate(tito, script)
    eos = tito.end_of_turn_id
    # (a) checkpoint + fragment
    for previous, step in zip(sim.steps, sim.steps[1:]):
        assert previous.checkpoint[-1] == eos
        assert step.context[: len(previous.checkpoint)] == previous.checkpoint
        assert step.context[len(previous.checkpoint) :] == step.fragment.ids
        assert step.fragment.text.endswith(endings), step.fragment.text[-40:]
    # (b) + (c) against the reference render
    check_against_official(tito, sim, script, lambda messages: predict_stable(kwargs, messages), lambda messages: ())
    # (d) decoding the concatenation, byte for byte
    last = sim.steps[-1]
    assert tito.decode(last.checkpoint) == last.context_text + last.completion
    # (e) last-step
    sample = last_step_or_refusal(tito, script, sim, tito.TURN_MARKERS)
    if sample is None:
        return
    aligned = check_last_step_runs(sample, sim)
    assert all(sample.ids[end - 1] == eos for _, end in sample.assistant_spans)
    if predict_stable(kwargs, [dict(m) for m in script.final_messages]):
        assert aligned


def run_seeded(
    tito: TitoTokenizer,
    extra: Callable[[Script, random.Random], dict[str, Any]],
    predict_stable: Predict,
    endings: Callable[[dict[str, Any]], tuple[str, ...]],
    shape: Callable[[Script], Script] = lambda script: script,
) -> None:
    """DEEPSEEK_EPISODES seeded episodes (``random_script``, reshaped by ``shape`` where the reference refuses a
    shape the generator draws); a failure names its seed."""
    for seed in range(DEEPSEEK_EPISODES):
        rng = random.Random(seed)
        script = shape(random_script(tito.family, rng, max_steps=8))
        script = with_extra(script, extra(script, rng))
        try:
            check_episode(tito, script, predict_stable, endings(script.kwargs))
        except AssertionError as exc:
            raise AssertionError(f"{tito.family} episode seed {seed}: {script}") from exc


def run_drawn(
    tito: TitoTokenizer,
    data: st.DataObject,
    extra: Callable[[Script, random.Random], dict[str, Any]],
    predict_stable: Predict,
    endings: Callable[[dict[str, Any]], tuple[str, ...]],
    shape: Callable[[Script], Script] = lambda script: script,
) -> None:
    """One hypothesis-drawn episode (``strategies.scripts``, up to 12 steps) through :func:`check_episode`."""
    script = shape(data.draw(scripts(tito.family, max_steps=12)))
    script = with_extra(script, extra(script, random.Random(data.draw(st.integers(0, 2**32)))))
    check_episode(tito, script, predict_stable, endings(script.kwargs))
