"""Token storage with structural sharing: spans hold only what a step adds; paths are rebuilt by walking."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.trajectory.tokens import (
    RoutedChunk,
    Step,
    WorkingTokens,
    committed_span,
    context_span,
    expand_runs,
    path,
    path_ids,
    run_length,
)
from proxy.trajectory.tokens import _ONE_RUNS


def step(step_id, base, context_ids, generated, *, logprobs=None, versions=None, chain=1, position=1):
    span = committed_span(context_span(context_ids), generated, logprobs, versions or [None] * len(generated))
    return Step.of(span, step_id=step_id, base=base, chain_id=chain, position=position, node=None, session_id="s",
                   generation=step_id, finish_reason="stop", extendable=True)


def test_span_stores_context_then_generated_with_compact_arrays():
    span = committed_span(context_span([1, 2, 3], [0, 1, 0]), [7, 8], [-0.5, -0.25], ["v1", "v1"])
    assert span.ids() == [1, 2, 3, 7, 8] and span.context_ids.itemsize == span.generated_ids.itemsize == 4
    assert (span.context_count, span.generated_count, span.span_length) == (3, 2, 5)
    assert span.context_mask == b"\x00\x01\x00" and span.context_mask_values() == [0, 1, 0]
    assert span.logprobs == array("d", [-0.5, -0.25])
    assert span.generated_ids.tolist() == [7, 8] and span.versions() == ["v1", "v1"]
    assert span.last_ids().tolist() == [7, 8]
    # -0.5 and -0.25 are float32 values, so they are stored in 4 bytes each (exact_logprobs).
    assert span.nbytes() == 5 * 4 + 3 + 2 * 4 and span.nbytes(shared_context=True) == 2 * 4 + 3 + 2 * 4


def test_span_context_array_is_shared_not_copied_by_a_commit():
    prompt = context_span(array("i", range(100)))
    first = committed_span(prompt, [1], None, [None])
    second = committed_span(prompt, [2], None, [None])
    assert first.context is second.context is prompt.context
    assert first.context_ids == array("i", range(100)) and first.context_ids is not first.context_ids  # copies
    assert context_span([5]).last_ids().tolist() == [5]


def test_span_all_zero_context_mask_is_not_stored():
    assert context_span([1, 2], [0, 0]).context_mask is None
    assert context_span([1, 2]).context_mask_values() == [0, 0]


def test_versions_are_run_length_encoded():
    assert run_length(["a", "a", None, "b", "b", "b"]) == (("a", 2), (None, 1), ("b", 3))
    assert expand_runs(run_length(["a", "a", None, "b"])) == ["a", "a", None, "b"]
    assert run_length([]) == ()


@given(st.lists(st.sampled_from(["v1", "v2", None]), max_size=40))
def test_run_length_is_the_runs_of_any_versions_and_expands_back(versions):
    # One version throughout takes a shared (interned) run, any other list is grouped: both the plain runs.
    runs: list[tuple] = []
    for version in versions:
        if runs and runs[-1][0] == version:
            runs[-1] = (version, runs[-1][1] + 1)
        else:
            runs.append((version, 1))
    assert run_length(versions) == tuple(runs)
    assert expand_runs(run_length(versions)) == versions
    if len(runs) == 1 and runs[0] in _ONE_RUNS:  # a one-run shape in the (bounded) table is shared, not rebuilt
        assert run_length(list(versions)) is run_length(versions)


def test_step_length_depth_and_path_walk_to_the_root():
    root = step(1, None, [1, 2, 3], [4, 5])
    child = step(2, root, [6], [7, 8, 9], position=2)
    grandchild = step(3, child, [10], [11], position=3)
    assert (root.length, child.length, grandchild.length) == (5, 9, 11)
    assert (root.depth, child.depth, grandchild.depth) == (1, 2, 3)
    assert path(grandchild) == [root, child, grandchild]
    assert path_ids(grandchild).tolist() == list(range(1, 12))
    assert path(None) == [] and path_ids(None).tolist() == []


def test_siblings_share_their_base_without_copying_it():
    root = step(1, None, list(range(1000)), [1])
    a = step(2, root, [5], [6], chain=1, position=2)
    b = step(3, root, [5], [7], chain=2)
    assert a.base is b.base is root
    assert a.span_length == b.span_length == 2


def test_working_tokens_clone_is_a_pointer_and_input_ids_rebuild_the_prompt():
    root = step(1, None, [1, 2], [3])
    working = WorkingTokens(root, context_span([4, 5]))
    assert working.base is root
    assert working.prompt_length == 5
    assert working.input_ids() == [1, 2, 3, 4, 5]
    assert WorkingTokens(None, context_span([9])).input_ids() == [9]


def test_routed_chunk_copies_any_object_with_the_three_attributes():
    class Upstream:
        data, num_rows, start_len = bytearray(b"\x01\x00\x00\x00"), 1, 7

    chunk = RoutedChunk.of(Upstream())
    assert chunk == RoutedChunk(b"\x01\x00\x00\x00", 1, 7)
    assert RoutedChunk.of(chunk) is chunk


@given(
    context=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=8),
    generated=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=8),
    kind=st.sampled_from(["none", "float32", "float64"]),
    data=st.data(),
)
def test_a_span_gives_back_exactly_the_ids_and_logprobs_it_was_given(context, generated, kind, data):
    # A span keeps them packed in two bytes objects (tokens.py module docstring); every reader gets them back as
    # they came, the logprobs' width and an empty list (not None) included.
    if kind == "none":
        logprobs = None
    else:
        values = st.floats(allow_nan=False, width=32 if kind == "float32" else 64)
        logprobs = data.draw(st.lists(values, min_size=len(generated), max_size=len(generated)))
    span = committed_span(context_span(context), generated, logprobs, [None] * len(generated))
    assert (span.context_ids.tolist(), span.generated_ids.tolist()) == (context, generated)
    assert (span.context_count, span.generated_count, span.span_length) == (
        len(context), len(generated), len(context) + len(generated))
    assert span.last_generated_id() == (generated[-1] if generated else None)
    assert bytes(span.generated_bytes()) == array("i", generated).tobytes()
    if logprobs is None:
        assert span.logprobs is None
    else:
        assert span.logprobs.tolist() == logprobs
        assert span.logprobs.typecode == ("f" if array("f", logprobs).tolist() == logprobs else "d")
    base = step(1, None, [5], [6])
    assert path_ids(step(2, base, context, generated)).tolist() == [5, 6, *context, *generated]


def test_committed_span_rejects_nothing_but_keeps_logprobs_optional():
    span = committed_span(context_span([1]), [2, 3], None, [None, None])
    assert span.logprobs is None and span.versions() == [None, None]
    with pytest.raises(TypeError):
        committed_span(context_span([1]), ["x"], None, [None])


def test_exact_logprobs_uses_float32_only_when_every_value_round_trips() -> None:
    from array import array as _array

    from proxy.trajectory.tokens import exact_logprobs

    sglang_like = _array("f", [-0.1, -2.5, -13.37, float("-inf")]).tolist()  # float32 values, as SGLang sends
    stored = exact_logprobs(sglang_like)
    assert stored.typecode == "f" and stored.tolist() == sglang_like
    float64_only = [-0.1, -2.5]  # -0.1 is not a float32 value
    stored = exact_logprobs(float64_only)
    assert stored.typecode == "d" and stored.tolist() == float64_only


@pytest.mark.parametrize("notes", [
    {}, {"turn_id": "t1"}, {"boundary_reason": "new_session", "boundary_detail": "why"}, {"tito_failed": True},
    {"logprobs_invalid": True},
])
def test_a_step_is_its_own_span_and_keeps_its_rare_fields_only_when_set(notes):
    span = committed_span(context_span([1, 2], [0, 1]), [3], [-0.5], ["v"])
    made = Step.of(span, step_id=4, base=None, chain_id=2, position=1, node=None, session_id="sess", generation=7,
                   finish_reason="stop", extendable=True, **notes)
    assert made.span is made and made.context is span.context and made.generated is span.generated
    assert (made.context_mask, made.version_runs, made.routed_experts) == (b"\x00\x01", span.version_runs, ())
    assert (made.span_length, made.length, made.depth, made.generation_id) == (3, 3, 1, "sess#g7")
    expected = {"turn_id": None, "boundary_reason": None, "boundary_detail": None, "tito_failed": False,
                "logprobs_invalid": False, **notes}
    assert {name: getattr(made, name) for name in expected} == expected
    assert (made.extras is span.extras) == (not notes)  # the span's own extras (its mask), unless notes add to them


def test_a_step_holds_extras_only_when_something_rare_is_set_and_shares_reason_only_ones():
    span = committed_span(context_span([1, 2]), [3], [-0.5], ["v"])
    fields = dict(base=None, chain_id=1, position=1, node=None, session_id="s", generation=1, finish_reason="stop",
                  extendable=True)
    assert span.extras is None and Step.of(span, step_id=1, **fields).extras is None
    first = Step.of(span, step_id=1, boundary_reason="new_session", **fields)
    second = Step.of(span, step_id=2, boundary_reason="new_session", **fields)
    assert first.extras is second.extras and second.boundary_reason == "new_session"
    routed = committed_span(context_span([1, 2], [1, 0]), [3], None, ["v"], [RoutedChunk(b"\0" * 8, 2)])
    step = Step.of(routed, step_id=3, turn_id="t", tito_failed=True, **fields)
    assert (step.context_mask, step.routed_experts, step.turn_id, step.tito_failed) == (
        b"\x01\x00", (RoutedChunk(b"\0" * 8, 2),), "t", True)
    assert (step.boundary_reason, step.logprobs_invalid) == (None, False)
