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

import attrs
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from proxy.families import load_tito_tokenizer
from proxy.tokenization import DriftKind, TitoTokenizer, TurnGeneration, audit_drift, build_last_step
from proxy.tokenization.glm import ASSISTANT, stop_token_for

from .glm_files import GLM_FAMILIES, glm_path
from .glm_model import predict_text_stable
from .random_scripts import random_script
from .simulation import simulate
from .strategies import Script, scripts

#: seeded episodes per template (random_scripts); DRESSAGE_GLM_EPISODES changes it for a quicker or deeper run
GLM_EPISODES = int(os.environ.get("DRESSAGE_GLM_EPISODES", "2000"))
GLM_SETTINGS = settings(
    max_examples=int(os.environ.get("DRESSAGE_TITO_EXAMPLES", "40")),
    deadline=None,
    database=None,
    # no shrinking: an episode is up to 12 steps of real renders, and shrinking one takes minutes
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


@attrs.frozen
class GlmScript(Script):
    """A script with GLM's other template switches."""

    extra: dict[str, Any] = attrs.field(factory=dict)

    @property
    def kwargs(self) -> dict[str, Any]:
        return {**({} if self.thinking is None else {"enable_thinking": self.thinking}), **self.extra}


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
    extra = _glm_extra(family, random.Random(draw(st.integers(0, 2**32))))
    return GlmScript(**attrs.asdict(script, recurse=False), extra=extra)


@pytest.fixture(scope="module", params=GLM_FAMILIES)
def glm(request) -> TitoTokenizer:
    return load_tito_tokenizer(request.param, glm_path(request.param))


def first_difference(a, b) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def check_reference(tito: TitoTokenizer, sim: Any, tools: Any, kwargs: dict[str, Any], stable_for: Any) -> None:
    """(b) + (c) for every step of a simulation: where ``stable_for(messages)`` predicts the reference reproduces the
    history, the TITO ids are its ids; elsewhere the drift audit reports ``reasoning_stripped`` at the first
    differing token; the prediction agrees with the real render everywhere (the DeepSeek batteries reuse it)."""
    for step in sim.steps:
        messages = [dict(m) for m in step.messages]
        full_text = tito.render_full(messages, tools, kwargs)
        stable = stable_for(messages)
        assert (step.context_text == full_text) == stable
        full_ids = tito.encode_text(full_text)
        report = audit_drift(step.context, full_ids, tito)
        if stable:
            assert list(step.context) == full_ids
            assert report.kind is DriftKind.NONE
        else:
            assert report.first_divergence == first_difference(step.context, full_ids)
            assert report.kind is DriftKind.REASONING_STRIPPED, report


def check_episode(glm: TitoTokenizer, script: GlmScript) -> None:
    kwargs, tools = script.kwargs, script.tools
    sim = simulate(glm, script)
    prompt_ids = glm.generation_prompt_ids(kwargs)
    # (a) checkpoint + fragment, the checkpoint ending with the role token the model stopped on
    for previous, step in zip(sim.steps, sim.steps[1:]):
        assert step.context[: len(previous.checkpoint)] == previous.checkpoint
        assert step.context[len(previous.checkpoint) :] == step.fragment.ids
        assert step.fragment.ids[-len(prompt_ids) :] == prompt_ids
        assistant = step.messages[len(previous.messages)]
        assert glm.decode(previous.checkpoint[-1:]) == stop_token_for(assistant)
    # (b) + (c) against the official template rendered by transformers
    check_reference(glm, sim, tools, kwargs, lambda messages: predict_text_stable(glm.family, kwargs, messages))
    # (d) decoding the concatenation
    last = sim.steps[-1]
    # GLM's tokenizer has no normalizer (Qwen's normalizes to NFC): the text comes back byte for byte
    assert glm.decode(last.checkpoint) == last.context_text + last.completion
    # (e) last-step: one masked run per assistant turn, ending with its stop token; all-or-none logprobs
    final = script.final_messages
    generations = [TurnGeneration(s.generated, [-0.5] * len(s.generated)) for s in sim.steps]
    sample = build_last_step(glm, final, tools, kwargs, turn_generations=generations)
    assert len(sample.assistant_spans) == len(sim.steps)
    assert sum(sample.loss_mask) == sum(end - begin for begin, end in sample.assistant_spans)
    assistants = [m for m in final if m["role"] == "assistant"]
    for (begin, end), message in zip(sample.assistant_spans, assistants):
        assert glm.decode(sample.ids[end - 1 : end]) == stop_token_for(message)
        assert glm.decode(sample.ids[:begin]).rsplit(ASSISTANT, 1)[1] in ("", glm.thinking_prefix(kwargs))
    assert sample.ids[sample.assistant_spans[-1][0] :] == sim.steps[-1].generated
    aligned = all(sample.ids[b:e] == s.generated for (b, e), s in zip(sample.assistant_spans, sim.steps))
    assert (sample.logprobs is not None) == aligned


@GLM_SETTINGS
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
    for seed in battery_seeds(glm.family):
        rng = random.Random(seed)
        script = random_script(glm.family, rng, max_steps=8)
        script = GlmScript(**attrs.asdict(script, recurse=False), extra=_glm_extra(glm.family, rng))
        try:
            check_episode(glm, script)
        except AssertionError as exc:
            raise AssertionError(f"{glm.family} episode seed {seed}: {script}") from exc
