"""The session registry on trio with the fake tokenizer: the step lifecycle, boundaries, finalize, the store.

Every test names the behaviour it pins down; the real-tokenizer fork types are in ``test_fork_types.py``.
"""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

from proxy.controllers.session_registry import MAX_REPORTED_EXPORT_FAILURES, SessionRegistry
from proxy.tokenization import TitoError
from proxy.trajectory.export import ExportOptions
from proxy.trajectory.session_config import MAX_STEPS_ENV, SessionConfig, max_steps_from_env
from proxy.trajectory.session_errors import (
    ExportFailedError,
    GenerationFinishedError,
    InvalidMessagesError,
    MaxStepsExceededError,
    ResponseMaskMismatchError,
    SessionAbortedError,
    SessionFinalizedError,
)
from proxy.trajectory.memory_store import InMemoryTrajectoryStore

from .driving import answer_ids, segment_by_tip, trained_spans, turn
from .fakes import FakeTokenizer, model_output

SYS = {"role": "system", "content": "You are terse."}
U1 = {"role": "user", "content": "add 5 and 3"}
A1 = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": '{"a": 5, "b": 3}'}}]}
T1 = {"role": "tool", "tool_call_id": "call_0", "content": "8"}
A2 = {"role": "assistant", "content": "It is 8."}
U2 = {"role": "user", "content": "thanks"}
A3 = {"role": "assistant", "content": "You are welcome."}


def registry(**config) -> SessionRegistry:
    config.setdefault("max_steps_per_session", None)
    return SessionRegistry(FakeTokenizer(), config=SessionConfig(**config))


async def test_registry_sequential_steps_extend_one_chain_by_tito():
    reg = registry()
    t1 = await turn(reg, "s", [SYS, U1], A1)
    t2 = await turn(reg, "s", [SYS, U1, A1, T1], A2)
    t3 = await turn(reg, "s", [SYS, U1, A1, T1, A2, U2], A3)
    assert t1.prepared.encode.value == "full" and t1.prepared.boundary_reason == "session_start"
    assert t2.prepared.encode.value == "incremental" and t2.prepared.boundary_reason is None
    # The context of step k+1 starts with exactly step k's context and generated ids.
    assert t2.context[: len(t1.checkpoint)] == t1.checkpoint and t3.context[: len(t2.checkpoint)] == t2.checkpoint
    # The fake template is prefix-stable without reasoning: TITO equals a full encode.
    assert list(t3.context) == reg.tokenizer.encode_full([SYS, U1, A1, T1, A2, U2])
    assert [t.result.chain_id for t in (t1, t2, t3)] == [1, 1, 1]
    await reg.finalize("s", {"score": 1.0}, "inst")
    (segment,) = await reg.read(session_id="s")
    assert segment["token_ids"] == list(t3.checkpoint)
    assert trained_spans(segment) == {1: list(t1.generated), 2: list(t2.generated), 3: list(t3.generated)}
    assert segment["instance_id"] == "inst" and segment["reward_info"] == {"score": 1.0}
    assert segment["num_turns"] == 3 and segment["boundary_reason"] == "session_start"


async def test_registry_prepare_attaches_pending_nodes_that_are_never_exported():
    reg = registry()
    await turn(reg, "s", [SYS, U1], A1)
    before = reg.debug_view("s").trie
    prepared = await reg.prepare("s", [SYS, U1, A1, T1])
    view = reg.debug_view("s")
    assert view.trie.pending == 1 and view.trie.nodes == before.nodes + 1 and view.in_flight == 1
    await reg.drop(prepared.handle)
    view = reg.debug_view("s")
    # The failed generation took its pending node with it.
    assert view.trie == before and view.in_flight == 0
    await reg.finalize("s")
    (segment,) = await reg.read(session_id="s")
    assert segment["messages"] == [SYS, U1, A1]


async def test_registry_failed_generation_commits_nothing_and_releases_its_chain():
    reg = registry()
    prepared = await reg.prepare("s", [SYS, U1])
    await reg.drop(prepared.handle)
    await reg.drop(prepared.handle)  # idempotent
    view = reg.debug_view("s")
    assert (view.steps, view.in_flight, view.branches) == (0, 0, 0)
    with pytest.raises(GenerationFinishedError):
        await reg.commit(prepared.handle, [1], None, None, None, "stop", A1)
    assert (await reg.finalize("s")).segments == 0


async def test_registry_a_handle_commits_at_most_once():
    reg = registry()
    prepared = await reg.prepare("s", [SYS, U1])
    ids = model_output(A1)
    await reg.commit(prepared.handle, ids, None, None, None, "stop", A1)
    with pytest.raises(GenerationFinishedError):
        await reg.commit(prepared.handle, ids, None, None, None, "stop", A1)
    await reg.drop(prepared.handle)  # a drop after the commit changes nothing
    assert reg.debug_view("s").steps == 1


async def test_registry_malformed_commit_arguments_change_nothing_and_the_handle_stays_live():
    reg = registry()
    prepared = await reg.prepare("s", [SYS, U1])
    with pytest.raises(ValueError, match="weight versions"):
        await reg.commit(prepared.handle, [1, 2], None, ["v"], None, "stop", A1)
    with pytest.raises(ValueError, match="assistant_message"):
        await reg.commit(prepared.handle, [1, 2], None, None, None, "stop", "not a message")
    assert reg.debug_view("s").in_flight == 1
    await reg.commit(prepared.handle, model_output(A1), None, None, None, "stop", A1)


async def test_registry_logprobs_are_all_or_none_per_step():
    reg = registry()
    prepared = await reg.prepare("s", [SYS, U1])
    ids = model_output(A1)
    await reg.commit(prepared.handle, ids, [-0.5] * (len(ids) - 1) + [None], None, None, "stop", A1)
    await reg.finalize("s")
    (segment,) = await reg.read(session_id="s")
    assert segment["logprobs"] is None and segment["steps"][0]["concat_logprobs_invalid"] is True


async def test_registry_commit_after_finalize_is_rejected_and_changes_nothing_stored():
    reg = registry()
    await turn(reg, "s", [SYS, U1], A1)
    late = await reg.prepare("s", [SYS, U1, A1, T1])
    first = await reg.finalize("s", {"r": 1})
    stored = await reg.read(session_id="s")
    with pytest.raises(SessionFinalizedError, match="commit rejected"):
        await reg.commit(late.handle, model_output(A2), None, None, None, "stop", A2)
    assert await reg.read(session_id="s") == stored
    assert await reg.finalize("s", {"r": 2}) == first  # idempotent: the first result stands
    view = reg.debug_view("s")
    assert (view.state, view.rejected_commits, view.in_flight) == ("FINALIZED", 1, 0)


async def test_registry_finalized_session_is_never_resurrected_by_a_late_request():
    reg = registry()
    await reg.finalize("never-seen")
    with pytest.raises(SessionFinalizedError):
        await reg.prepare("never-seen", [SYS, U1])
    assert await reg.read(session_id="never-seen") == []
    assert reg.statistics().states == {"FINALIZED": 1}


async def test_registry_idempotency_records_live_as_long_as_the_sessions_data():
    reg = registry()
    await turn(reg, "s", [SYS, U1], A1)
    keys = reg.idempotency_keys("s")
    assert keys is not None and reg.idempotency_keys("s") is keys
    await reg.finalize("s")
    # Freed with the trie (the tombstone keeps only the machine), and never created again.
    assert reg.idempotency_keys("s") is None and reg._sessions["s"].idempotency is None
    await turn(reg, "a", [SYS, U1], A1)
    assert reg.idempotency_keys("a") is not None
    assert await reg.abort("a")
    assert reg._sessions["a"].idempotency is None


async def test_registry_max_steps_is_enforced_before_generation_counting_reservations():
    reg = registry(max_steps_per_session=2)
    await turn(reg, "s", [SYS, U1], A1)
    reserved = await reg.prepare("s", [SYS, U1, A1, T1])
    with pytest.raises(MaxStepsExceededError) as info:
        await reg.prepare("s", [SYS, U2])
    error = info.value
    assert (error.limit, error.steps, error.in_flight, error.code) == (2, 1, 1, "max_steps_exceeded")
    await reg.drop(reserved.handle)
    await turn(reg, "s", [SYS, U1, A1, T1], A2)
    with pytest.raises(MaxStepsExceededError):
        await reg.prepare("s", [SYS, U1, A1, T1, A2, U2])
    # The session is not finalized by the limit.
    assert reg.debug_view("s").state == "ACTIVE"
    assert (await reg.finalize("s")).steps == 2


def test_registry_max_steps_default_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(MAX_STEPS_ENV, "7")
    assert SessionConfig().max_steps_per_session == 7
    assert SessionConfig(max_steps_per_session=3).max_steps_per_session == 3
    monkeypatch.setenv(MAX_STEPS_ENV, "0")
    assert SessionConfig().max_steps_per_session is None
    monkeypatch.delenv(MAX_STEPS_ENV)
    assert SessionConfig().max_steps_per_session is None
    with pytest.raises(ValueError, match="not an integer"):
        max_steps_from_env({MAX_STEPS_ENV: "many"})


async def test_registry_response_mask_applies_to_the_step_context_and_must_match_its_length():
    reg = registry()
    t1 = await turn(reg, "s", [SYS, U1], A1)
    fragment = reg.tokenizer.encode_incremental(t1.checkpoint, [T1]).ids
    with pytest.raises(ResponseMaskMismatchError) as info:
        await reg.prepare("s", [SYS, U1, A1, T1], response_mask=[0])
    assert (info.value.expected, info.value.got, info.value.http_status) == (len(fragment), 1, 422)
    assert reg.debug_view("s").in_flight == 0
    mask = [0] * (len(fragment) - 1) + [1]
    t2 = await turn(reg, "s", [SYS, U1, A1, T1], A2, response_mask=mask)
    await reg.finalize("s")
    (segment,) = await reg.read(session_id="s")
    start = len(t1.checkpoint)
    assert segment["loss_mask"][start : start + len(fragment)] == mask
    assert t2.prepared.context_token_count == len(fragment)


async def test_registry_tito_failure_starts_a_new_segment_with_a_full_encode():
    reg = registry()
    t1 = await turn(reg, "s", [SYS, U1], A1)
    bad = {"role": "tool", "tool_call_id": "call_0", "content": "TITO-FAIL"}
    t2 = await turn(reg, "s", [SYS, U1, A1, bad], A2)
    assert t2.prepared.encode.value == "full" and t2.prepared.tito_failed
    assert t2.prepared.boundary_reason == "tito_failed" and "template_error" in t2.prepared.boundary_detail
    assert list(t2.context) == reg.tokenizer.encode_full([SYS, U1, A1, bad])
    # The base chain is not closed: another continuation of step 1 extends it by TITO.
    t3 = await turn(reg, "s", [SYS, U1, A1, T1], A3)
    assert t3.prepared.encode.value == "incremental" and t3.result.chain_id == t1.result.chain_id
    await reg.finalize("s")
    segments = await reg.read(session_id="s")
    failed = segment_by_tip(segments, t2.result.step_id)
    assert failed["boundary_reason"] == "tito_failed" and failed["steps"][0]["concat_incremental_tokenization_failed"]
    assert failed["token_ids"] == list(t2.checkpoint) and failed["forked_from_step"] is None


async def test_registry_full_encode_failure_raises_and_records_nothing():
    reg = registry()
    with pytest.raises(TitoError):
        await reg.prepare("s", [SYS, {"role": "user", "content": "FULL-FAIL"}])
    view = reg.debug_view("s")
    assert (view.in_flight, view.branches, view.steps) == (0, 0, 0)


async def test_registry_length_exhausted_chain_is_continued_by_a_new_segment():
    reg = registry()
    prepared = await reg.prepare("s", [SYS, U1])
    ids = model_output(A2)[:3]
    cut = {"role": "assistant", "content": "It "}  # what the client received, and echoes
    result = await reg.commit(prepared.handle, ids, None, None, None, "length", cut)
    assert not result.extendable
    t2 = await turn(reg, "s", [SYS, U1, cut, U2], A3)
    assert t2.prepared.encode.value == "full" and t2.prepared.boundary_reason == "length_exhausted"
    assert list(t2.context) == reg.tokenizer.encode_full([SYS, U1, cut, U2])
    await reg.finalize("s")
    segments = await reg.read(session_id="s")
    assert [s["boundary_reason"] for s in segments] == ["session_start", "length_exhausted"]
    assert segments[0]["finish_reason"] == "length"
    assert segments[0]["token_ids"] == list(prepared.input_ids()) + ids


async def test_registry_stop_without_end_of_turn_closes_the_chain():
    reg = registry()
    prepared = await reg.prepare("s", [SYS, U1])
    ids = model_output(A2)[:-1]  # a stop string: no end-of-turn token
    result = await reg.commit(prepared.handle, ids, None, None, None, "stop", A2)
    assert not result.extendable
    t2 = await turn(reg, "s", [SYS, U1, A2, U2], A3)
    assert t2.prepared.boundary_reason == "no_end_of_turn"


@pytest.mark.parametrize(
    "second, reason",
    [
        ([{"role": "system", "content": "sub-agent"}, U1], "new_conversation"),
        ([SYS, U1], "resample"),
        ([SYS, {"role": "user", "content": "recap: 5+3=8"}], "history_rewritten"),
        ([SYS, U1, {"role": "assistant", "content": "edited"}, U2], "history_rewritten"),
    ],
    ids=["new_conversation", "resample", "recap", "edited_answer"],
)
async def test_registry_boundary_reason_without_a_checkpoint_on_the_path(second, reason):
    reg = registry()
    await turn(reg, "s", [SYS, U1], A1)
    prepared = await reg.prepare("s", second)
    assert prepared.encode.value == "full" and prepared.boundary_reason == reason


async def test_registry_tool_schema_or_template_kwargs_change_starts_a_new_subtree():
    reg = registry()
    tools = [{"type": "function", "function": {"name": "add"}}]
    await turn(reg, "s", [SYS, U1], A1, tools=tools)
    changed = await reg.prepare("s", [SYS, U1, A1, T1], tools=tools + [{"type": "function", "function": {"name": "x"}}])
    assert changed.encode.value == "full" and changed.boundary_reason == "context_changed"
    kwargs = await reg.prepare("s", [SYS, U1, A1, T1], tools=tools, chat_template_kwargs={"enable_thinking": False})
    assert kwargs.boundary_reason == "context_changed"
    same = await reg.prepare("s", [SYS, U1, A1, T1], tools=tools)
    assert same.encode.value == "incremental"
    assert reg.debug_view("s").trie.contexts == 3


async def test_registry_concurrent_siblings_of_one_parent_never_overwrite_each_other():
    reg = registry()
    t1 = await turn(reg, "s", [SYS, U1], A1)
    answers = [{"role": "assistant", "content": f"sample {i}"} for i in range(3)]
    prepared = [await reg.prepare("s", [SYS, U1, A1, T1]) for _ in answers]
    results = []
    for p, answer in reversed(list(zip(prepared, answers))):
        results.append(await reg.commit(p.handle, model_output(answer), None, None, None, "stop", answer))
    # The first to commit extends the chain; the others fork from step 1.
    assert [r.forked for r in results] == [False, True, True]
    assert len({r.chain_id for r in results}) == 3
    await reg.finalize("s")
    segments = await reg.read(session_id="s")
    assert len(segments) == 3
    owners = [s for s in segments if 1 in trained_spans(s)]
    assert len(owners) == 1 and owners[0]["forked_from_step"] is None
    for segment, answer in zip(segments, reversed(answers)):
        assert segment["token_ids"][-len(model_output(answer)):] == model_output(answer)
        assert segment["token_ids"][: len(t1.checkpoint)] == list(t1.checkpoint)


async def test_registry_same_answer_replaces_the_tip_and_the_export_holds_it_once():
    reg = registry()
    t1 = await turn(reg, "s", [SYS, U1], A1)
    retry = await turn(reg, "s", [SYS, U1], A1, salt=5)
    assert retry.result.refreshed and retry.prepared.boundary_reason == "resample"
    assert retry.result.replaced_step == 1 and not retry.result.shadowed and not retry.result.forked
    assert retry.result.chain_id == t1.result.chain_id
    assert reg.debug_view("s").trie.checkpoints == 1 and reg.debug_view("s").branches == 1
    # A continuation follows the newest checkpoint of the node: the retry's step, in the same chain.
    t3 = await turn(reg, "s", [SYS, U1, A1, T1], A2)
    assert t3.result.chain_id == t1.result.chain_id and t3.prepared.encode.value == "incremental"
    await reg.finalize("s")
    (segment,) = await reg.read(session_id="s")
    assert segment["step_ids"] == [2, 3] and segment["tip_step"] == 3
    # The segment still begins for the first attempt's reason; the retry's logprobs are the ones kept.
    assert segment["boundary_reason"] == "session_start"
    assert segment["token_ids"] == list(t3.checkpoint)
    assert trained_spans(segment) == {2: list(retry.generated), 3: list(t3.generated)}
    context = len(retry.context)
    assert segment["logprobs"][context:len(retry.checkpoint)] == pytest.approx([-6 - i / 1000
                                                                                for i in range(len(retry.generated))])


async def test_registry_retry_of_a_later_turn_replaces_that_turn_in_its_chain():
    reg = registry()
    t1 = await turn(reg, "s", [SYS, U1], A1)
    t2 = await turn(reg, "s", [SYS, U1, A1, T1], A2)
    retry = await turn(reg, "s", [SYS, U1, A1, T1], A2, salt=3)
    assert retry.result.replaced_step == t2.result.step_id and retry.result.chain_id == t1.result.chain_id
    assert retry.context == t2.context
    await reg.finalize("s")
    (segment,) = await reg.read(session_id="s")
    assert segment["step_ids"] == [1, 3] and segment["token_ids"] == list(retry.checkpoint)


async def test_registry_concurrent_identical_answers_are_one_segment():
    reg = registry()
    t1 = await turn(reg, "s", [SYS, U1], A1)
    first = await reg.prepare("s", [SYS, U1, A1, T1])
    second = await reg.prepare("s", [SYS, U1, A1, T1])
    ids = model_output(A2)
    one = await reg.commit(first.handle, ids, None, None, None, "stop", A2)
    two = await reg.commit(second.handle, ids, None, None, None, "stop", A2)
    assert not one.refreshed and one.chain_id == t1.result.chain_id
    assert two.refreshed and two.replaced_step == one.step_id and not two.forked
    view = reg.debug_view("s")
    assert view.branches == 1 and view.in_flight == 0
    await reg.finalize("s")
    (segment,) = await reg.read(session_id="s")
    assert segment["step_ids"] == [1, 3]


async def test_registry_retry_of_a_continued_checkpoint_is_shadowed_and_exported_nowhere():
    reg = registry()
    t1 = await turn(reg, "s", [SYS, U1], A1)
    t2 = await turn(reg, "s", [SYS, U1, A1, T1], A2)
    # The agent re-sends the first request after it had continued: the same answer, an intermediate checkpoint.
    again = await turn(reg, "s", [SYS, U1], A1, salt=4)
    assert again.result.refreshed and again.result.shadowed and again.result.replaced_step is None
    await reg.finalize("s")
    (segment,) = await reg.read(session_id="s")
    # The continued branch keeps the tokens it was built on: step 1, then step 2.
    assert segment["step_ids"] == [1, 2] and segment["token_ids"] == list(t2.checkpoint)
    assert trained_spans(segment) == {1: list(t1.generated), 2: list(t2.generated)}


async def test_registry_a_continuation_of_a_shadowed_checkpoint_forks_from_it():
    reg = registry()
    await turn(reg, "s", [SYS, U1], A1)
    await turn(reg, "s", [SYS, U1, A1, T1], A2)
    again = await turn(reg, "s", [SYS, U1], A1, salt=4)
    other = await turn(reg, "s", [SYS, U1, A1, {"role": "tool", "tool_call_id": "call_0", "content": "9"}], A3)
    assert other.result.forked and other.prepared.tokens.base.step_id == again.result.step_id
    await reg.finalize("s")
    segments = await reg.read(session_id="s")
    assert [s["step_ids"] for s in segments] == [[1, 2], [3, 4]]
    # The shadowed step is context in the fork (it is trained nowhere: the same answer is trained in step 1).
    assert trained_spans(segment_by_tip(segments, 4)) == {4: list(other.generated)}


async def test_registry_a_replayed_conversation_exports_each_answer_once_through_the_replay():
    # tests/controllers/test_session_concurrency.py's hypothesis example, in order: the agent re-sends its first
    # request (shadowed: the chain had continued), then its second, built on that retry, with the same answer.
    reg = registry()
    t1 = await turn(reg, "s", [SYS, U1], A1)
    t2 = await turn(reg, "s", [SYS, U1, A1, T1], A2)
    again = await turn(reg, "s", [SYS, U1], A1, salt=3)
    assert again.result.shadowed and again.prepared.boundary_reason == "resample"
    replay = await turn(reg, "s", [SYS, U1, A1, T1], A2, salt=4)
    assert replay.prepared.tokens.base.step_id == again.result.step_id
    # The replay answers what step 2 answered over the same position (step 3 holds step 1's): it replaces c1's tip.
    assert replay.result.replaced_step == t2.result.step_id and replay.result.chain_id == t1.result.chain_id
    await reg.finalize("s")
    (segment,) = await reg.read(session_id="s")
    # The chain's path now runs through the retry it was built on: steps 1 and 2 are in no segment, but each
    # answer is trained once, by the step at its position (architecture invariant 6).
    assert segment["step_ids"] == [3, 4] and segment["token_ids"] == list(replay.checkpoint)
    assert trained_spans(segment) == {3: list(again.generated), 4: list(replay.generated)}
    # The retry took step 1's position, so the segment still begins as the session did, not as a resample.
    assert segment["boundary_reason"] == "session_start"


async def test_registry_a_generation_extending_a_replaced_tip_still_extends_its_position():
    reg = registry()
    t1 = await turn(reg, "s", [SYS, U1], A1)
    extending = await reg.prepare("s", [SYS, U1, A1, T1])
    retry = await turn(reg, "s", [SYS, U1], A1, salt=2)
    assert retry.result.replaced_step == t1.result.step_id
    ids = model_output(A2)
    late = await reg.commit(extending.handle, ids, None, None, None, "stop", A2)
    assert late.chain_id == t1.result.chain_id and not late.forked
    await reg.finalize("s")
    (segment,) = await reg.read(session_id="s")
    # Its tokens continue step 1, so its segment holds step 1; the retry (the same answer) is exported nowhere.
    assert segment["step_ids"] == [1, 3]
    assert segment["token_ids"] == list(extending.input_ids()) + ids


async def test_registry_same_message_ending_differently_is_not_a_refresh_of_the_export():
    reg = registry()
    await turn(reg, "s", [SYS, U1], A2)
    cut = await turn(reg, "s", [SYS, U1], A2, truncate=2)
    # The node is refreshed (its checkpoint is the newest step) but the tokens end at the length limit where the
    # first ended its turn: a sample of its own.
    assert cut.result.refreshed and cut.result.replaced_step is None and not cut.result.shadowed
    assert cut.result.chain_id != 1 and not cut.result.extendable
    await reg.finalize("s")
    segments = await reg.read(session_id="s")
    assert [s["step_ids"] for s in segments] == [[1], [2]]


async def test_registry_finalize_during_export_waits_and_gets_the_same_result():
    gate = trio.Event()

    class SlowStore(InMemoryTrajectoryStore):
        async def write(self, session_id, segments, *, result=None):
            await gate.wait()
            await super().write(session_id, segments, result=result)

    reg = SessionRegistry(FakeTokenizer(), SlowStore(), SessionConfig(max_steps_per_session=None))
    await turn(reg, "s", [SYS, U1], A1)
    results = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_finalize_into, reg, results)
        await trio.testing.wait_all_tasks_blocked()
        assert reg.debug_view("s").state == "FINALIZING"
        nursery.start_soon(_finalize_into, reg, results)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(SessionFinalizedError):
            await reg.prepare("s", [SYS, U2])
        gate.set()
    assert len(results) == 2 and results[0] == results[1] and results[0].segments == 1


async def _finalize_into(reg, results):
    results.append(await reg.finalize("s"))


async def test_registry_finalize_survives_its_caller_being_cancelled():
    gate = trio.Event()

    class SlowStore(InMemoryTrajectoryStore):
        async def write(self, session_id, segments, *, result=None):
            await gate.wait()
            await super().write(session_id, segments, result=result)

    reg = SessionRegistry(FakeTokenizer(), SlowStore(), SessionConfig(max_steps_per_session=None))
    await turn(reg, "s", [SYS, U1], A1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reg.finalize, "s")
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
        gate.set()
    # The shielded export completed although its caller was cancelled: the session is not stuck FINALIZING.
    assert reg.debug_view("s").state == "FINALIZED"
    assert len(await reg.read(session_id="s")) == 1


class FlakyStore(InMemoryTrajectoryStore):
    """A store whose first ``failures`` writes fail as a full disk would (nothing stored), then work."""

    def __init__(self, failures: int, gate: trio.Event | None = None) -> None:
        super().__init__()
        self.failures, self.gate, self.attempts = failures, gate, 0

    async def write(self, session_id, segments, *, result=None):
        self.attempts += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.attempts <= self.failures:
            raise OSError(28, "No space left on device")
        await super().write(session_id, segments, result=result)


async def test_registry_export_failure_keeps_the_steps_and_the_next_finalize_retries_it(caplog):
    control = registry()
    await turn(control, "s", [SYS, U1], A1)
    await turn(control, "s", [SYS, U1, A1, T1], A2)
    await control.finalize("s", {"reward": 1.0}, "inst")
    expected = await control.read(session_id="s")

    store = FlakyStore(failures=2)
    reg = SessionRegistry(FakeTokenizer(), store, SessionConfig(max_steps_per_session=None))
    await turn(reg, "s", [SYS, U1], A1)
    await turn(reg, "s", [SYS, U1, A1, T1], A2)
    for attempt in (1, 2):
        with pytest.raises(ExportFailedError, match=r"2 committed step\(s\) are kept") as caught:
            await reg.finalize("s", {"reward": 1.0}, "inst")
        assert (caught.value.code, caught.value.http_status) == ("export_failed", 500)
        # The exception's text and class name are for the log only.
        assert "No space left" not in str(caught.value) and "OSError" not in str(caught.value)
        assert caught.value.failure.endswith("OSError")
        view = reg.debug_view("s")
        assert (view.state, view.steps) == ("EXPORT_FAILED", 2)
        stats = await reg.store_statistics()
        assert (stats.export_failures, stats.export_failed_sessions, stats.sessions) == (attempt, ("s",), 0)
    # Logged as a bug, with the session id and the traceback.
    failures = [r for r in caplog.records if r.name == "dressage_proxy.sessions" and r.levelname == "ERROR"]
    assert len(failures) == 2 and "'s'" in failures[0].getMessage() and failures[0].exc_info is not None
    # Nothing can be added meanwhile, and the steps cannot be thrown away by an abort.
    with pytest.raises(SessionFinalizedError):
        await reg.prepare("s", [SYS, U2])
    with pytest.raises(SessionFinalizedError):
        await reg.abort("s")
    assert not reg.forget("s")
    # The retry stores exactly what a session whose store never failed stores (the first call's reward_info).
    result = await reg.finalize("s", {"reward": -5.0})
    assert (result.segments, result.steps) == (1, 2) and store.attempts == 3
    assert await reg.read(session_id="s") == expected
    stats = await reg.store_statistics()
    assert (stats.export_failures, stats.export_failed_sessions) == (2, ())
    assert await reg.finalize("s") == result


async def test_registry_finalize_waiting_for_a_failing_export_gets_its_error_and_a_retry_gets_a_fresh_wait():
    gate = trio.Event()
    store = FlakyStore(failures=1, gate=gate)
    reg = SessionRegistry(FakeTokenizer(), store, SessionConfig(max_steps_per_session=None))
    await turn(reg, "s", [SYS, U1], A1)
    outcomes = []

    async def finalize():
        try:
            outcomes.append(await reg.finalize("s"))
        except ExportFailedError as exc:
            outcomes.append(exc.code)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(finalize)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(finalize)
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert outcomes == ["export_failed", "export_failed"]
    # The retry and a finalize joining it both get the stored result (the failed attempt's event is not reused).
    async with trio.open_nursery() as nursery:
        nursery.start_soon(finalize)
        nursery.start_soon(finalize)
    assert outcomes[2] == outcomes[3] and outcomes[2].segments == 1


async def test_registry_lists_at_most_the_reported_number_of_failed_sessions():
    reg = SessionRegistry(FakeTokenizer(), FlakyStore(failures=10**6), SessionConfig(max_steps_per_session=None))
    for i in range(MAX_REPORTED_EXPORT_FAILURES + 3):
        await turn(reg, f"s{i}", [SYS, U1], A1)
        with pytest.raises(ExportFailedError):
            await reg.finalize(f"s{i}")
    stats = await reg.store_statistics()
    assert stats.export_failures == MAX_REPORTED_EXPORT_FAILURES + 3
    assert stats.export_failed_sessions == tuple(f"s{i}" for i in range(3, MAX_REPORTED_EXPORT_FAILURES + 3))


async def test_registry_prepare_cancelled_during_a_threaded_encode_releases_its_reservation():
    started, release = threading.Event(), threading.Event()

    class BlockingTokenizer(FakeTokenizer):
        def encode_full(self, *args, **kwargs):
            started.set()
            release.wait(5)
            return super().encode_full(*args, **kwargs)

    reg = SessionRegistry(BlockingTokenizer(), config=SessionConfig(max_steps_per_session=1, thread_encode_chars=0))
    with trio.move_on_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reg.prepare, "s", [SYS, U1])
            await trio.to_thread.run_sync(started.wait)
            nursery.cancel_scope.cancel()
            release.set()
    view = reg.debug_view("s")
    assert (view.in_flight, view.branches) == (0, 0)
    # The single allowed step is free again.
    await turn(reg, "s", [SYS, U1], A1)


async def test_registry_drain_moves_the_session_to_drained_and_reads_by_trajectory_id():
    reg = registry()
    await turn(reg, "s", [SYS, U1], A1)
    await turn(reg, "s", [{"role": "system", "content": "other"}, U1], A2)
    result = await reg.finalize("s")
    assert result.trajectory_ids == ("s:0", "s:1")
    first = await reg.read(trajectory_id="s:1", drain=True)
    (one,) = first
    assert one["trajectory_id"] == "s:1" and first.lease_id is not None
    assert (await reg.acknowledge(first.lease_id)).segments == 1 and reg.debug_view("s").state == "FINALIZED"
    rest = await reg.read(session_id="s", drain=True)
    # Two-phase: the lease deletes nothing, the session stays FINALIZED until the acknowledgement.
    assert rest.trajectory_ids == ["s:0"] and reg.debug_view("s").state == "FINALIZED"
    assert (await reg.acknowledge(rest.lease_id)).emptied_sessions == ("s",)
    assert reg.debug_view("s").state == "DRAINED"
    assert (await reg.acknowledge(rest.lease_id)).segments == 0  # idempotent
    stats = await reg.store_statistics()
    assert (stats.sessions, stats.segments, stats.drained_segments) == (0, 0, 2)


async def test_registry_abort_discards_an_active_session_without_export():
    reg = registry()
    t = await reg.prepare("s", [SYS, U1])
    assert await reg.abort("s") is True
    with pytest.raises(SessionFinalizedError):
        await reg.commit(t.handle, model_output(A1), None, None, None, "stop", A1)
    with pytest.raises(SessionAbortedError):
        await reg.finalize("s")
    assert await reg.abort("s") is False and await reg.abort("unknown") is False
    assert reg.forget("s") and reg.debug_view("s") is None


async def test_registry_debug_view_shows_head_branches_in_flight_and_trie_size():
    reg = registry()
    await turn(reg, "s", [SYS, U1], A1, instance_id="inst-1")
    t2 = await turn(reg, "s", [SYS, U1, A1, T1], A2)
    pending = await reg.prepare("s", [SYS, U1, A1, T1, A2, U2])
    view = reg.debug_view("s")
    assert (view.state, view.instance_id, view.steps, view.in_flight) == ("ACTIVE", "inst-1", 2, 1)
    assert view.head.step_id == 2 and view.head.messages == 5 and view.head.tokens == len(t2.checkpoint)
    assert (view.branches, view.open_branches) == (1, 1)
    assert (view.trie.contexts, view.trie.checkpoints, view.trie.pending) == (1, 2, 1)
    assert reg.debug_view("nope") is None
    await reg.drop(pending.handle)


async def test_registry_invalid_messages_are_refused_before_admission():
    reg = registry(max_steps_per_session=1)
    for bad in ([], [{"content": "no role"}], ["text"], "text", None):
        with pytest.raises(InvalidMessagesError):
            await reg.prepare("s", bad)
    # A malformed request does not even create the session.
    assert reg.debug_view("s") is None
    await turn(reg, "s", [SYS, U1], A1)


async def test_registry_reasoning_dropped_by_the_echo_still_continues_the_chain():
    reg = registry()
    thought = {"role": "assistant", "content": "8", "reasoning_content": "5+3"}
    t1 = await turn(reg, "s", [SYS, U1], thought)
    echoed = {"role": "assistant", "content": "8"}
    t2 = await turn(reg, "s", [SYS, U1, echoed, U2], A3)
    assert t2.prepared.encode.value == "incremental" and t2.result.chain_id == t1.result.chain_id
    assert t2.context[: len(t1.checkpoint)] == t1.checkpoint
    assert answer_ids(reg.tokenizer, thought) == list(t1.generated)


async def test_registry_export_options_are_applied():
    reg = registry(export=ExportOptions(record_token_versions=True, export_all_checkpoints=True))
    await turn(reg, "s", [SYS, U1], A1, version="v1")
    await turn(reg, "s", [SYS, U1, A1, T1], A2, version="v2")
    await reg.finalize("s")
    segments = await reg.read(session_id="s")
    assert [s["tip_step"] for s in segments] == [1, 2]
    assert set(segments[1]["weight_versions"]) == {None, "v1", "v2"}


async def test_registry_best_of_n_over_one_prompt_stores_the_prompt_ids_once():
    reg = registry()
    long_prompt = [SYS, {"role": "user", "content": "x" * 500}]
    prepared = [await reg.prepare("s", long_prompt) for _ in range(4)]
    arrays = {id(p.tokens.context.context_ids) for p in prepared}
    assert len(arrays) == 1 and prepared[0].context_token_count > 500
    for i, p in enumerate(prepared):
        answer = {"role": "assistant", "content": f"sample {i}"}
        await reg.commit(p.handle, model_output(answer), None, None, None, "stop", answer)
    await reg.finalize("s")
    segments = await reg.read(session_id="s")
    assert len(segments) == 4 and len({tuple(s["token_ids"][:500]) for s in segments}) == 1


async def test_registry_routed_experts_are_kept_per_step_without_copying_rows():
    class Upstream:
        def __init__(self, data, rows, start):
            self.data, self.num_rows, self.start_len = data, rows, start

    reg = registry()
    prepared = await reg.prepare("s", [SYS, U1])
    ids = model_output(A1)
    chunks = [Upstream(b"\x01\x00\x00\x00" * 2, 2, 0), Upstream(b"\x02\x00\x00\x00", 1, 2)]
    await reg.commit(prepared.handle, ids, None, None, chunks, "stop", A1)
    await reg.finalize("s")
    (segment,) = await reg.read(session_id="s")
    # One step generated by two requests: the chunks shape (spec 9), rows kept as they came.
    chunks_json = segment["routed_experts_chunks"]
    assert [(c["num_rows"], c["start_len"]) for c in chunks_json] == [(2, 0), (1, 2)]
    assert "routed_experts_parts" not in segment and "routed_experts" not in segment
