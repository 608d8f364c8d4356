"""Properties of TITO over generated conversations, with the real Qwen3 and Qwen3.5 tokenizers.

The model is simulated: at every step it emits the template's own rendering of the assistant message followed by
``<|im_end|>`` (``render_assistant``), tokenized on its own, as a model's output is. Each property runs once per
family (the ``tito`` fixture) with thinking unset, on or off drawn by the strategy.
"""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from proxy.tokenization import DriftKind, TitoTokenizer, TurnGeneration, audit_drift, build_last_step

from .simulation import nfc, predict_bpe_resplit, predict_final_turn_aligned, predict_text_stable, simulate
from .strategies import TITO_SETTINGS, scripts


def first_difference(a, b) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@TITO_SETTINGS
@given(data=st.data())
def test_context_of_next_step_extends_checkpoint_exactly(tito: TitoTokenizer, data):
    """(a) The context of step k+1 is step k's context, then its generated ids, then only the new fragment: the
    fragment starts with the junction newline and <|im_start|> and ends with the generation prompt."""
    sim = simulate(tito, data.draw(scripts(tito.family)))
    prompt_ids = tito.generation_prompt_ids(sim.script.kwargs)
    for previous, step in zip(sim.steps, sim.steps[1:]):
        assert step.context[: len(previous.checkpoint)] == previous.checkpoint
        assert step.context[len(previous.checkpoint) :] == step.fragment.ids
        assert step.fragment.ids[:2] == (tito.newline_id, tito.turn_start_id)
        assert step.fragment.ids[-len(prompt_ids) :] == prompt_ids
        assert previous.checkpoint[-1] == tito.end_of_turn_id


@TITO_SETTINGS
@given(data=st.data())
def test_tito_equals_full_render_where_template_is_prefix_stable(tito: TitoTokenizer, data):
    """(b) Wherever the full render reproduces the history as generated (predicted by an independent model of the
    templates), the TITO ids equal the full render's ids -- except the one predicted BPE junction (Qwen3.5,
    thinking on, empty reasoning), which the drift audit reports as ``bpe_resplit`` at a generation boundary."""
    script = data.draw(scripts(tito.family))
    sim = simulate(tito, script)
    starts = sim.generated_starts
    for step in sim.steps:
        messages = list(step.messages)
        full_text = tito.render_full(messages, script.tools, script.kwargs)
        stable = predict_text_stable(tito.family, script.thinking, messages)
        assert (step.context_text == full_text) == stable
        if not stable:
            continue
        full_ids = tito.encode_text(full_text)
        report = audit_drift(step.context, full_ids, tito)
        if predict_bpe_resplit(tito.family, script.thinking, messages):
            assert report.kind is DriftKind.BPE_RESPLIT
            assert any(start - 1 <= report.first_divergence <= start for start in starts)
        else:
            assert list(step.context) == full_ids
            assert report.kind is DriftKind.NONE


@TITO_SETTINGS
@given(data=st.data())
def test_drift_audit_reports_exactly_where_template_strips_reasoning(tito: TitoTokenizer, data):
    """(c) Where the template rewrites the history (earlier reasoning or empty think blocks dropped), the drift
    audit reports the first differing token and the kind ``reasoning_stripped``; the TITO context keeps every
    generated token."""
    script = data.draw(scripts(tito.family))
    sim = simulate(tito, script)
    for step in sim.steps:
        messages = list(step.messages)
        if predict_text_stable(tito.family, script.thinking, messages):
            continue
        full_ids = tito.encode_full(messages, script.tools, script.kwargs)
        report = audit_drift(step.context, full_ids, tito)
        assert report.first_divergence == first_difference(step.context, full_ids)
        assert report.kind is DriftKind.REASONING_STRIPPED, report


@TITO_SETTINGS
@given(data=st.data())
def test_decoding_the_concatenation_gives_the_conversation_text(tito: TitoTokenizer, data):
    """(d) The final checkpoint (all contexts and generations concatenated) decodes to the conversation's text:
    the first render, each completion and each fragment, joined (NFC, as the tokenizer normalizes)."""
    sim = simulate(tito, data.draw(scripts(tito.family)))
    last = sim.steps[-1]
    assert tito.decode(last.checkpoint) == nfc(last.context_text + last.completion)
    for step in sim.steps:
        assert tito.decode(step.generated) == nfc(step.completion)
        if step.fragment is not None:
            assert tito.decode(step.fragment.ids) == nfc(step.fragment.text)


@TITO_SETTINGS
@given(data=st.data())
def test_last_step_mask_covers_exactly_the_assistant_turns(tito: TitoTokenizer, data):
    """(e) The last-step sample masks one run per assistant message, each ending with the end-of-turn token and
    preceded by the assistant header (and the thinking prefix); everything else is 0. The final turn aligns with
    the generated ids unless the predicted BPE junction splits it; logprobs are attached all-or-none."""
    script = data.draw(scripts(tito.family))
    sim = simulate(tito, script)
    final = script.final_messages
    generations = [TurnGeneration(s.generated, [-0.5] * len(s.generated)) for s in sim.steps]
    sample = build_last_step(tito, final, script.tools, script.kwargs, turn_generations=generations)

    rendered = tito.render_full(final, script.tools, script.kwargs, add_generation_prompt=False)
    assert tito.decode(sample.ids) == nfc(rendered[:-1])
    assert len(sample.loss_mask) == len(sample.ids)
    runs, start = [], None
    for i, bit in enumerate(sample.loss_mask + (0,)):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            runs.append((start, i))
            start = None
    assert tuple(runs) == sample.assistant_spans
    assert len(runs) == len(sim.steps)
    # before a run: the header, maybe the thinking prefix, maybe whitespace of a token straddling the boundary
    header = re.compile(r"<\|im_start\|>assistant\n(" + re.escape(tito.thinking_prefix(script.kwargs)) + r")?\s*$")
    for begin, end in runs:
        run = sample.ids[begin:end]
        assert run[-1] == tito.end_of_turn_id and run.count(tito.end_of_turn_id) == 1
        assert tito.turn_start_id not in run
        assert header.search(tito.decode(sample.ids[:begin]))
    masked_eot = sum(1 for t, m in zip(sample.ids, sample.loss_mask) if m and t == tito.end_of_turn_id)
    assert masked_eot == len(sim.steps)

    last_run = sample.ids[runs[-1][0] : runs[-1][1]]
    aligned = predict_final_turn_aligned(tito.family, script.thinking, final[-1], sim.steps[-1].completion)
    if aligned is not None:
        assert (last_run == sim.steps[-1].generated) == aligned
    all_aligned = all(sample.ids[b:e] == s.generated for (b, e), s in zip(runs, sim.steps))
    assert (sample.logprobs is not None) == all_aligned
    if sample.logprobs is not None:
        assert all(lp == (-0.5 if m else 0.0) for lp, m in zip(sample.logprobs, sample.loss_mask))
