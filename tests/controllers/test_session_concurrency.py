"""Concurrent generations of one session on the real trio registry, under hypothesis-chosen interleavings.

Each example runs one trio loop (pytest-trio; hypothesis-trio is unusable, stack-notes 8): several generations of
one session, each prepared on a request drawn from a small conversation tree, "generating" for a drawn number of
scheduler checkpoints, then committing, failing, or being cancelled (client gone); a finalize lands at a drawn
moment. ``st.random_module()`` varies trio's scheduling order (stack-notes 9). Checked afterwards:

- no commit succeeded after finalize started (once one was refused, none was accepted), none was refused before;
- a failed or cancelled generation committed nothing, and no generation was left in flight;
- failed generations left no residue: when finalize is called the trie holds one attach node per generation in
  flight, and none at all (no pending node) when nothing is in flight;
- every successful commit is a trained span of exactly one exported segment, but an idempotent retry (the same
  answer over the same checkpoint position: it replaced the step it refreshed, or was shadowed by it) and the step it
  refreshed share one position, of which the export trains exactly one step; which retry refreshed which step is
  worked out here from the commits, not taken from the registry; every segment's ids are the TITO concatenation
  along its path (what its last step sent upstream plus what it generated);
- the registry never raised anything but the documented errors.
"""

from __future__ import annotations

import attrs
import trio
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from proxy.controllers.session_registry import SessionRegistry
from proxy.trajectory.session_config import SessionConfig
from proxy.trajectory.session_errors import SessionFinalizedError

from .driving import trained_spans
from .fakes import FakeTokenizer, model_output

SYS = {"role": "system", "content": "main"}
SUB = {"role": "system", "content": "sub-agent"}
U = {"role": "user", "content": "go"}
A1 = {"role": "assistant", "content": "step one"}
T1 = {"role": "tool", "tool_call_id": "c1", "content": "r1"}
A2 = {"role": "assistant", "content": "step two"}
T2 = {"role": "tool", "tool_call_id": "c2", "content": "r2"}
# Requests from a small conversation tree, and the answer the model gives to each (or a distinct sample).
REQUESTS = [
    ([SYS, U], A1),
    ([SYS, U, A1, T1], A2),
    ([SYS, U, A1, T1, A2, T2], None),
    ([SUB, U], None),
    ([SYS, U, A1, {"role": "user", "content": "TITO-FAIL"}], None),
]


@attrs.frozen
class Plan:
    """One generation: which request, how long it generates, how it ends."""

    request: int
    # Scheduler checkpoints before the request arrives, and while generating.
    delay: int
    checkpoints: int
    ending: str  # commit (the tree's answer when there is one), sample (a distinct answer), length, fail, cancel


plans = st.builds(
    Plan,
    request=st.sampled_from([0, 0, 1, 1, 1, 2, 3, 4]),
    delay=st.integers(0, 20),
    checkpoints=st.integers(0, 6),
    ending=st.sampled_from(["commit", "commit", "commit", "sample", "length", "fail", "cancel"]),
)


@settings(max_examples=150, deadline=None)
# A retry of the first turn shadowed (step 3), then a retry of the second built on it replaced c1's tip (step 4):
# c1's segment runs through steps 3 and 4, and steps 1 and 2 are in none, each answer trained once. The oracle once
# missed that step 3 shares step 1's position (a shadowed result does not name the step it refreshed).
@example(
    generations=[Plan(request=0, delay=0, checkpoints=0, ending="commit"),
                 Plan(request=0, delay=17, checkpoints=0, ending="commit"),
                 Plan(request=1, delay=0, checkpoints=0, ending="commit"),
                 Plan(request=1, delay=3, checkpoints=0, ending="commit")],
    finalize_after=38, seed=None,
)
@given(generations=st.lists(plans, min_size=2, max_size=8), finalize_after=st.integers(0, 160), seed=st.random_module())
async def test_concurrent_generations_of_one_session_under_random_interleavings(generations, finalize_after, seed):
    reg = SessionRegistry(FakeTokenizer(), config=SessionConfig(max_steps_per_session=None))
    log: list[tuple] = []
    committed: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    # step id -> the trie node it answered (request, answer: the same request answered the same is the same node),
    # and the commits that took an earlier step's position (an idempotent retry: replaced or shadowed).
    answered: dict[int, tuple[int, str]] = {}
    retries: dict[int, int | None] = {}

    async def generation(index: int, plan: Plan) -> None:
        messages, tree_answer = REQUESTS[plan.request]
        # Continuations tend to arrive after the turn they continue.
        for _ in range(plan.delay + 8 * len(messages)):
            await trio.lowlevel.checkpoint()
        try:
            prepared = await reg.prepare("s", messages)
        except SessionFinalizedError:
            log.append(("prepare refused", index))
            return
        context = tuple(prepared.input_ids())
        with trio.CancelScope() as scope:
            try:
                for _ in range(plan.checkpoints):
                    await trio.lowlevel.checkpoint()
                if plan.ending == "cancel":
                    scope.cancel()
                    await trio.lowlevel.checkpoint()
                if plan.ending == "fail":
                    raise ConnectionError("upstream stream cut")
                answer = tree_answer if plan.ending == "commit" and tree_answer else {
                    "role": "assistant", "content": f"sample {index}"}
                ids = model_output(answer)
                finish = "stop"
                if plan.ending == "length":
                    ids, finish = ids[:3], "length"
                try:
                    result = await reg.commit(prepared.handle, ids, [-1.0] * len(ids), None, None, finish, answer)
                except SessionFinalizedError:
                    log.append(("commit rejected", index))
                    return
                log.append(("commit", index, result.step_id))
                committed[result.step_id] = (context, tuple(ids))
                answered[result.step_id] = (plan.request, answer["content"])
                if result.replaced_step is not None or result.shadowed:
                    retries[result.step_id] = result.replaced_step
            except ConnectionError:
                log.append(("failed", index))
            finally:
                # What the generation controller does on any exit: a no-op after a commit.
                await reg.drop(prepared.handle)
        if scope.cancelled_caught:
            log.append(("cancelled", index))

    async def finalizer() -> None:
        for _ in range(finalize_after):
            await trio.lowlevel.checkpoint()
        log.append(("finalize called",))
        view = reg.debug_view("s")
        if view is not None and view.trie is not None:
            assert reg._sessions["s"].session.trie.holds == view.in_flight
            if not view.in_flight:
                assert view.trie.pending == 0
        await reg.finalize("s", {"score": 1})
        log.append(("finalized",))

    async with trio.open_nursery() as nursery:
        for index, plan in enumerate(generations):
            nursery.start_soon(generation, index, plan)
        nursery.start_soon(finalizer)

    # Invariant 5: once a commit or prepare was refused (the session left ACTIVE), nothing is accepted any more;
    # nothing is refused before finalize was called, nothing accepted after it returned.
    kinds = [entry[0] for entry in log]
    called, returned = kinds.index("finalize called"), kinds.index("finalized")
    refused = [i for i, kind in enumerate(kinds) if kind in ("commit rejected", "prepare refused")]
    accepted = [i for i, kind in enumerate(kinds) if kind == "commit"]
    assert all(i > called for i in refused) and all(i < returned for i in accepted)
    assert not refused or not accepted or max(accepted) < min(refused)
    # Invariant 4: failed and cancelled generations committed nothing; each generation committed at most once.
    ended = {entry[1]: entry[0] for entry in log if len(entry) > 1}
    ended_without_commit = [i for i, how in ended.items() if how in ("failed", "cancelled")]
    assert all(generations[i].ending in ("fail", "cancel") for i in ended_without_commit)
    assert len([e for e in log if e[0] == "commit"]) == len(committed)
    view = reg.debug_view("s")
    assert (view.state, view.in_flight, view.steps) == ("FINALIZED", 0, len(committed))
    # Invariant 6 and the TITO path: every committed step is trained in exactly one segment.
    segments = await reg.read(session_id="s")
    trained: dict[int, int] = {}
    for segment in segments:
        context, generated = committed[segment["tip_step"]]
        assert segment["token_ids"] == list(context + generated)
        for step_id, span in trained_spans(segment).items():
            assert span == list(committed[step_id][1])
            trained[step_id] = trained.get(step_id, 0) + 1
    # A retry refreshed the node's newest checkpoint: the last earlier step that answered the same node. It takes
    # that step's position, and the export trains exactly one step of each position: the retry or the step it
    # refreshed, whichever the chain's path holds (architecture invariant 6).
    position: dict[int, int] = {}
    for step_id in sorted(committed):
        position[step_id] = step_id
        if step_id in retries:
            refreshed = max(k for k in position if k < step_id and answered[k] == answered[step_id])
            assert retries[step_id] in (None, refreshed)
            position[step_id] = position[refreshed]
    assert set(trained.values()) <= {1}
    trained_at: dict[int, int] = {}
    for step_id in trained:
        trained_at[position[step_id]] = trained_at.get(position[step_id], 0) + 1
    assert trained_at == dict.fromkeys(set(position.values()), 1)
    assert [s["tip_step"] for s in segments] == sorted(s["tip_step"] for s in segments)
    event(f"{len(committed)} committed, {len(refused)} refused, {kinds.count('cancelled')} cancelled")
    event(f"{len(segments)} segment(s), {sum(1 for s in segments if s['forked_from_step'])} forked")
