"""A full encode stored as a PrefixedContext: the ids read back are exactly the ids given (issue 21 item 5)."""

from __future__ import annotations

from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.trajectory.prefix_share import (
    MAX_CHAIN,
    MIN_SHARED_IDS,
    chain_length,
    shared_length,
    stored_context,
)
from proxy.trajectory.tokens import (
    PrefixedContext,
    Step,
    WorkingTokens,
    committed_span,
    context_span,
    pack_ids,
    path_ids,
)

ids_lists = st.lists(st.integers(min_value=0, max_value=200_000), max_size=40)


def step(step_id, base, context, generated):
    """A committed step over ``context`` (ids, or a PrefixedContext) and ``generated`` ids."""
    span = committed_span(context_span(context), generated, [-0.5] * len(generated), [None] * len(generated))
    return Step.of(span, step_id=step_id, base=base, chain_id=1, position=1, node=None, session_id="s",
                   generation=step_id, finish_reason="length", extendable=False)


def naive(steps_by_id, step_id, expected_contexts):
    """The ids of a step's path, from the ids each step was given (not from what it stores)."""
    out = []
    current = steps_by_id[step_id]
    chain = []
    while current is not None:
        chain.append(current)
        current = current.base
    for each in reversed(chain):
        out += expected_contexts[each.step_id] + each.generated_ids.tolist()
    return out


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_prefixed_contexts_read_back_the_ids_they_were_given(data):
    # Segments: each starts with a full encode whose ids begin with a prefix of an earlier step's path (so its root
    # may name a step whose own root names another: the chain a session of cut answers builds), then TITO steps.
    steps_by_id: dict[int, Step] = {}
    given_ids: dict[int, list[int]] = {}
    for step_id in range(1, data.draw(st.integers(1, 12)) + 1):
        earlier = list(steps_by_id.values())
        extend = earlier and data.draw(st.booleans(), label="extends a step (TITO)")
        generated = data.draw(ids_lists, label="generated")
        if extend:
            base = data.draw(st.sampled_from(earlier), label="base")
            context = data.draw(ids_lists, label="fragment")
            made = step(step_id, base, context, generated)
        else:
            named = data.draw(st.sampled_from(earlier), label="named") if earlier else None
            prior = path_ids(named).tolist() if named is not None else []
            length = data.draw(st.integers(0, len(prior)), label="shared")
            context = prior[:length] + data.draw(ids_lists, label="rest")
            stored = (PrefixedContext(named, length, pack_ids(context[length:])) if named is not None
                      else pack_ids(context))
            made = step(step_id, None, stored, generated)
        steps_by_id[step_id], given_ids[step_id] = made, list(context)
    for step_id, made in steps_by_id.items():
        assert made.context_ids.tolist() == given_ids[step_id]
        assert made.context == pack_ids(given_ids[step_id])
        assert made.context_count == len(given_ids[step_id])
        expected = naive(steps_by_id, step_id, given_ids)
        assert path_ids(made).tolist() == expected and made.length == len(expected)
        fragment = [7, 8, 9]
        assert WorkingTokens(made, context_span(fragment)).input_ids() == expected + fragment


def test_a_prefixed_context_counts_only_its_tail_as_stored():
    root = step(1, None, list(range(100)), [500, 501])
    prefixed = PrefixedContext(root, 101, pack_ids([600, 601]))
    made = step(2, None, prefixed, [700])
    assert made.context_ids.tolist() == list(range(100)) + [500, 600, 601]
    assert made.nbytes() == 2 * 4 + 1 * 4 + 1 * 4  # the tail's ids, then the generated id and its logprob
    # Equal exactly when they name the same step and hold the same ids: the test siblings' encodings share on.
    assert prefixed == PrefixedContext(root, 101, pack_ids([600, 601]))
    assert prefixed != PrefixedContext(step(1, None, list(range(100)), [500, 501]), 101, pack_ids([600, 601]))
    assert prefixed != PrefixedContext(root, 100, pack_ids([501, 600, 601]))
    assert prefixed != made.context


@settings(max_examples=300, deadline=None)
@given(ids_lists, ids_lists, ids_lists)
def test_shared_length_is_where_the_ids_first_differ(common, left, right):
    a, b = common + left, common + right
    expected = 0
    while expected < min(len(a), len(b)) and a[expected] == b[expected]:
        expected += 1
    assert shared_length(pack_ids(a), array("i", b)) == expected


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 3 * MIN_SHARED_IDS), ids_lists)
def test_stored_context_names_the_path_only_when_enough_of_it_is_shared(shared, rest):
    held = step(1, None, list(range(1_000, 1_000 + 2 * MIN_SHARED_IDS)), list(range(5, 5 + MIN_SHARED_IDS)))
    prior = path_ids(held).tolist()
    shared = min(shared, len(prior))
    ids = prior[:shared] + [9_999_999] + rest  # 9,999,999 is not in the path: the shared run ends there
    stored = stored_context(pack_ids(ids), held)
    if shared >= MIN_SHARED_IDS:
        assert type(stored) is PrefixedContext and stored.step is held and stored.length == shared
        assert stored.ids().tolist() == ids
    else:
        assert stored == pack_ids(ids)
    assert stored_context(pack_ids(ids), None) == pack_ids(ids)


def test_a_chain_of_names_is_cut_at_max_chain_by_storing_the_encode_whole():
    # A session whose every answer is cut: each full encode names the path before it, up to MAX_CHAIN links.
    prior = step(1, None, list(range(MIN_SHARED_IDS)), [1])
    made = [prior]
    for step_id in range(2, 2 * MAX_CHAIN + 3):
        ids = path_ids(made[-1]).tolist() + [step_id]
        stored = stored_context(pack_ids(ids), made[-1])
        made.append(step(step_id, None, stored, [step_id]))
        assert made[-1].context_ids.tolist() == ids
    links = [chain_length(each) for each in made]
    assert max(links) == MAX_CHAIN and links[MAX_CHAIN + 1] == 0  # stored whole, and the chain starts again
    assert links[:MAX_CHAIN + 2] == list(range(MAX_CHAIN + 1)) + [0]
