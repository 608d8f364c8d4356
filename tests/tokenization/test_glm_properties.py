"""The TITO property battery for GLM-4.7, GLM-5, GLM-5.1 and GLM-5.2 against their official templates.

GLM-4.7 runs GLM_EPISODES (2,000 by default) seeded episodes from ``random_scripts``; GLM-5.x (one family, three
template versions) runs GLM_EPISODES in all, its versions taking every third seed each (the suite's time stays under
its bound; ``DRESSAGE_GLM_EPISODES`` raises it) (the Qwen generators'
shapes and alphabet without hypothesis's draw cost), plus the hypothesis property over ``strategies.scripts`` (tool loops with parallel tool results,
reasoning, user interjections, unicode; thinking unset/on/off, ``clear_thinking``, GLM-5.2's ``reasoning_effort``),
reusing the Qwen battery's generators (``strategies.scripts``) and driver (``simulation.simulate``). The simulated
model emits the template's own rendering of each assistant turn then the role token it stops on
(``render_assistant``). One property per episode checks every guarantee, so each episode is simulated once:

(a) the context of step k+1 is step k's checkpoint (ending with the stop token) plus only the fragment, which ends
    with the generation prompt;
(b) wherever the independent model (``glm_model``) predicts the template reproduces the history, the TITO ids equal
    the official template's ids rendered by transformers; the prediction agrees with the real render everywhere;
(c) everywhere else the drift audit reports ``reasoning_stripped`` at the first differing token;
(d) the final checkpoint decodes to the conversation's text, byte for byte (no normalizer in GLM's tokenizer);
(e) the last-step sample masks one run per assistant turn, each ending with the role token the model stopped on.
"""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.families import load_tito_tokenizer
from proxy.tokenization import TitoTokenizer, TurnGeneration, build_last_step
from proxy.tokenization.glm import ASSISTANT, stop_token_for

from .battery import (
    BATTERY_SETTINGS,
    ExtraScript,
    check_against_official,
    check_fragments,
    check_last_step_runs,
    run_seeded,
)
from .glm_files import GLM_FAMILIES, glm_path
from .glm_model import predict_text_stable
from .random_scripts import random_script
from .simulation import simulate
from .strategies import scripts

#: seeded episodes per template (random_scripts); DRESSAGE_GLM_EPISODES changes it for a quicker or deeper run
GLM_EPISODES = int(os.environ.get("DRESSAGE_GLM_EPISODES", "2000"))
#: a script with GLM's other template switches (``clear_thinking``, GLM-5.2's ``reasoning_effort``)
GlmScript = ExtraScript


def _glm_extra(family: str, rng: random.Random) -> dict[str, Any]:
    """GLM's other switches: ``clear_thinking=False`` keeps history reasoning; GLM-5.2's ``reasoning_effort``."""
    extra: dict[str, Any] = {}
    if rng.randint(0, 3) == 0:
        extra["clear_thinking"] = False
    if family == "glm5_2" and rng.random() < 0.5:
        extra["reasoning_effort"] = rng.choice(["high", "max"])
    return extra


@st.composite
def glm_scripts(draw: st.DrawFn, family: str) -> GlmScript:
    script = draw(scripts(family, max_steps=12))
    return GlmScript.of(script, _glm_extra(family, random.Random(draw(st.integers(0, 2**32)))))


@pytest.fixture(scope="module", params=GLM_FAMILIES)
def glm(request) -> TitoTokenizer:
    return load_tito_tokenizer(request.param, glm_path(request.param))


def check_episode(glm: TitoTokenizer, script: GlmScript) -> None:
    kwargs, tools = script.kwargs, script.tools
    sim = simulate(glm, script)
    # (a) checkpoint + fragment, the checkpoint ending with the role token the model stopped on
    check_fragments(glm, sim, glm.generation_prompt_ids(kwargs))
    for previous, step in zip(sim.steps, sim.steps[1:]):
        assistant = step.messages[len(previous.messages)]
        assert glm.decode(previous.checkpoint[-1:]) == stop_token_for(assistant)
    # (b) + (c) against the official template rendered by transformers: where predicted stable, the very ids
    check_against_official(glm, sim, script, lambda messages: predict_text_stable(glm.family, kwargs, messages),
                           lambda messages: ())
    # (d) decoding the concatenation
    last = sim.steps[-1]
    # GLM's tokenizer has no normalizer (Qwen's normalizes to NFC): the text comes back byte for byte
    assert glm.decode(last.checkpoint) == last.context_text + last.completion
    # (e) last-step: one masked run per assistant turn, ending with its stop token; all-or-none logprobs
    final = script.final_messages
    generations = [TurnGeneration(s.generated, [-0.5] * len(s.generated)) for s in sim.steps]
    sample = build_last_step(glm, final, tools, kwargs, turn_generations=generations)
    check_last_step_runs(sample, sim)
    assistants = [m for m in final if m["role"] == "assistant"]
    for (begin, end), message in zip(sample.assistant_spans, assistants):
        assert glm.decode(sample.ids[end - 1 : end]) == stop_token_for(message)
        assert glm.decode(sample.ids[:begin]).rsplit(ASSISTANT, 1)[1] in ("", glm.thinking_prefix(kwargs))
    assert sample.ids[sample.assistant_spans[-1][0] :] == sim.steps[-1].generated


@BATTERY_SETTINGS
@given(data=st.data())
def test_glm_tito_battery(glm: TitoTokenizer, data):
    check_episode(glm, data.draw(glm_scripts(glm.family)))


#: the GLM-5.x template versions: one family, whose GLM_EPISODES seeds they share (every third seed each)
GLM5_VERSIONS = ("glm5", "glm5_1", "glm5_2")


def battery_seeds(family: str) -> range:
    """The seeds one template runs: all GLM_EPISODES for GLM-4.7, its third of them for a GLM-5.x version."""
    if family in GLM5_VERSIONS:
        return range(GLM5_VERSIONS.index(family), GLM_EPISODES, len(GLM5_VERSIONS))
    return range(GLM_EPISODES)


def test_glm_tito_battery_seeded(glm: TitoTokenizer):
    """The template's seeded episodes (``battery_seeds``); a failure names its seed
    (``random_script(family, random.Random(seed))``)."""
    def make_script(rng: random.Random) -> GlmScript:
        return GlmScript.of(random_script(glm.family, rng, max_steps=8), _glm_extra(glm.family, rng))

    run_seeded(glm.family, battery_seeds(glm.family), make_script, lambda script: check_episode(glm, script))
