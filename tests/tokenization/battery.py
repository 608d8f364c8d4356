"""What the per-family TITO batteries (GLM, MiniMax, DeepSeek) share: the hypothesis settings, a script with the family's other
template switches, the seeded-episode loop, and the checks every family makes the same way (checkpoint + fragment;
the official render or the drift audit at every step; the last-step mask's runs). Each battery keeps only what is
its family's own: its switches, its ``predict_text_stable`` model, its stop tokens, its allowed drift kinds."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, Phase, settings

from proxy.tokenization import DriftKind, LastStepError, TitoTokenizer, TurnGeneration, audit_drift, build_last_step

from .strategies import Script

BATTERY_SETTINGS = settings(
    max_examples=int(os.environ.get("DRESSAGE_TITO_EXAMPLES", "40")),
    deadline=None,
    database=None,
    # no shrinking: an episode is up to 12 steps of real renders, and shrinking one takes minutes
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


@attrs.frozen
class ExtraScript(Script):
    """A script with the family's other template switches (``extra``: GLM's ``clear_thinking``, M3's
    ``thinking_mode``...) on top of ``enable_thinking``."""

    extra: dict[str, Any] = attrs.field(factory=dict)

    @property
    def kwargs(self) -> dict[str, Any]:
        return {**({} if self.thinking is None else {"enable_thinking": self.thinking}), **self.extra}

    @classmethod
    def of(cls, script: Script, extra: dict[str, Any]) -> ExtraScript:
        return cls(**attrs.asdict(script, recurse=False), extra=extra)


def first_difference(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run_seeded(family: str, seeds: Iterable[int], make_script: Callable[[random.Random], Script],
               check: Callable[[Script], None]) -> None:
    """``check`` every seeded episode; a failure names its seed and script."""
    for seed in seeds:
        script = make_script(random.Random(seed))
        try:
            check(script)
        except AssertionError as exc:
            raise AssertionError(f"{family} episode seed {seed}: {script}") from exc


def check_fragments(tito: TitoTokenizer, sim: Any, prompt_ids: Sequence[int]) -> None:
    """(a): the context of step k+1 is step k's checkpoint plus only the fragment, which ends with the prompt."""
    for previous, step in zip(sim.steps, sim.steps[1:]):
        assert step.context[: len(previous.checkpoint)] == previous.checkpoint
        assert step.context[len(previous.checkpoint) :] == step.fragment.ids
        assert step.fragment.ids[-len(prompt_ids) :] == prompt_ids


def check_against_official(
    tito: TitoTokenizer, sim: Any, script: Script, stable: Callable[[list[dict[str, Any]]], bool],
    drift: Callable[[list[dict[str, Any]]], Collection[DriftKind]],
) -> None:
    """(b) + (c): where ``stable`` (the family's independent model) says the template reproduces the history, the
    context text is the official render (transformers) and its ids are the render's ids, or the drift audit names a
    kind ``drift`` allows for a stable step; everywhere else the audit reports one of ``drift`` at the first
    differing token. ``drift(messages)``: the kinds allowed for a step (``REASONING_STRIPPED`` is always allowed
    where the text differs)."""
    for step in sim.steps:
        messages = [dict(m) for m in step.messages]
        full_text = tito.render_full(messages, script.tools, script.kwargs)
        predicted = stable(messages)
        assert (step.context_text == full_text) == predicted
        full_ids = tito.encode_text(full_text)
        report = audit_drift(step.context, full_ids, tito)
        allowed = set(drift(messages))
        if predicted and list(step.context) != full_ids:
            assert report.kind in allowed, report
        elif predicted:
            assert report.kind is DriftKind.NONE
        else:
            assert report.first_divergence == first_difference(step.context, full_ids)
            assert report.kind in allowed | {DriftKind.REASONING_STRIPPED}, report


def check_last_step_runs(sample: Any, sim: Any) -> bool:
    """(e), the family-neutral part: one masked run per generated turn, the mask covering exactly those runs, and
    logprobs kept exactly when every run is the turn's generated ids. Returns whether every run is."""
    assert len(sample.assistant_spans) == len(sim.steps)
    assert sum(sample.loss_mask) == sum(end - begin for begin, end in sample.assistant_spans)
    aligned = all(sample.ids[b:e] == s.generated for (b, e), s in zip(sample.assistant_spans, sim.steps))
    assert (sample.logprobs is not None) == aligned
    return aligned


def last_step_or_refusal(tito: TitoTokenizer, script: Script, sim: Any, markers: tuple[str, ...]) -> Any:
    """The last-step sample of the script's final messages, every turn's generation attached; None after checking
    that it is refused (``LastStepError``) when a message holds one of the family's turn ``markers`` (strategies'
    texts, and hypothesis's draws of the modules' string constants, can hold them: the mask cannot be placed)."""
    final = script.final_messages
    generations = [TurnGeneration(s.generated, [-0.5] * len(s.generated)) for s in sim.steps]
    if any(marker in json.dumps(final, ensure_ascii=False) for marker in markers):
        with pytest.raises(LastStepError):
            build_last_step(tito, final, script.tools, script.kwargs, turn_generations=generations)
        return None
    return build_last_step(tito, final, script.tools, script.kwargs, turn_generations=generations)
