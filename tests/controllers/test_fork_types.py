"""Every fork type of spec 5.3, and the boundaries of 5.4, with the real Qwen3 and Qwen3.5 tokenizers.

Each scenario drives the registry like an agent would (the model emits the template's own rendering of each answer)
and checks the export against what was sent upstream: every segment's ids are exactly the TITO concatenation along
its path (the last step's context plus its generated ids), every committed step is a trained span of exactly one
segment, and the detokenized segment is the conversation's text.
"""

from __future__ import annotations

import json

import pytest
import trio

from proxy.trajectory.session_config import SessionConfig
from proxy.controllers.session_registry import SessionRegistry
from proxy.tokenization import build_last_step
from proxy.trajectory.export import BuildMode, ExportOptions

from .driving import Turn, answer_ids, logprobs_for, segment_by_tip, trained_spans, turn

PARAMETERS = {"type": "object", "properties": {"expr": {"type": "string"}}}
TOOLS = [{"type": "function",
          "function": {"name": "calc", "description": "Evaluate arithmetic", "parameters": PARAMETERS}}]
SYS = {"role": "system", "content": "You are a careful calculator agent."}
USER = {"role": "user", "content": "Compute (5 + 3) * 2, using the tool."}


def call(call_id: str, expr: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "calc", "arguments": json.dumps({"expr": expr})}}]}


def result(call_id: str, value: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": value}


def say(text: str) -> dict:
    return {"role": "assistant", "content": text}


def user(text: str) -> dict:
    return {"role": "user", "content": text}


A1, T1 = call("call_1", "5 + 3"), result("call_1", "8")
A2, T2 = call("call_2", "8 * 2"), result("call_2", "16")
A3 = say("The answer is 16.")


def new_registry(tokenizer, **config) -> SessionRegistry:
    config.setdefault("max_steps_per_session", None)
    return SessionRegistry(tokenizer, config=SessionConfig(**config))


async def export(reg: SessionRegistry, session_id: str = "s") -> list[dict]:
    await reg.finalize(session_id, {"score": 1.0}, "inst")
    return await reg.read(session_id=session_id)


def check_export(tokenizer, turns: list[Turn], segments: list[dict]) -> None:
    """The invariants every export must keep."""
    by_step = {t.result.step_id: t for t in turns}
    owners: dict[int, int] = {}
    for segment in segments:
        tip = by_step[segment["tip_step"]]
        # (a) the segment is the TITO concatenation along its path: what the last step sent plus what it generated.
        assert segment["token_ids"] == list(tip.checkpoint)
        assert len(segment["loss_mask"]) == len(segment["token_ids"]) == len(segment["logprobs"])
        # (b) trained spans are exactly the committed generated ids.
        for step_id, generated in trained_spans(segment).items():
            assert generated == list(by_step[step_id].generated)
            owners[step_id] = owners.get(step_id, 0) + 1
        # (c) the detokenized segment is the conversation's text (every message's content, in order).
        text = tokenizer.decode(segment["token_ids"])
        position = 0
        for message in segment["messages"]:
            content = message.get("content") or ""
            if content:
                found = text.find(content, position)
                assert found >= 0, (content, text)
                position = found + len(content)
        assert sum(segment["loss_mask"]) == sum(len(by_step[s].generated) for s in trained_spans(segment))
    # Every step is trained exactly once, but a step an idempotent retry replaced or shadowed (the same answer is
    # trained once, in the step the segment holds).
    superseded = {t.result.replaced_step for t in turns} | {t.result.step_id for t in turns if t.result.shadowed}
    assert owners == {t.result.step_id: 1 for t in turns if t.result.step_id not in superseded}
    # Ordered by commit order: the session's last interaction is last.
    assert [s["tip_step"] for s in segments] == sorted(s["tip_step"] for s in segments)


async def test_fork_sequential_extension_is_one_chain_one_segment(real_tokenizer):
    reg = new_registry(real_tokenizer)
    t1 = await turn(reg, "s", [SYS, USER], A1, tools=TOOLS)
    t2 = await turn(reg, "s", [SYS, USER, A1, T1], A2, tools=TOOLS)
    t3 = await turn(reg, "s", [SYS, USER, A1, T1, A2, T2], A3, tools=TOOLS)
    assert [t.prepared.encode.value for t in (t1, t2, t3)] == ["full", "incremental", "incremental"]
    assert t1.context == tuple(real_tokenizer.encode_full([SYS, USER], TOOLS))
    for previous, current in ((t1, t2), (t2, t3)):
        assert current.context[: len(previous.checkpoint)] == previous.checkpoint
    segments = await export(reg)
    assert len(segments) == 1 and segments[0]["num_turns"] == 3
    check_export(real_tokenizer, [t1, t2, t3], segments)
    assert real_tokenizer.decode(segments[0]["token_ids"]).startswith(real_tokenizer.render_full([SYS, USER], TOOLS))


async def test_fork_system_keyed_split_then_return_to_main_continues_the_main_chain(real_tokenizer):
    reg = new_registry(real_tokenizer)
    sub_sys = {"role": "system", "content": "You are a sub-agent that only multiplies."}
    task = user("Multiply 8 by 2.")
    m1 = await turn(reg, "s", [SYS, USER], A1, tools=TOOLS)
    s1 = await turn(reg, "s", [sub_sys, task], say("16"), tools=TOOLS)
    s2 = await turn(reg, "s", [sub_sys, task, say("16"), user("Sure?")], say("Yes, 16."), tools=TOOLS)
    m2 = await turn(reg, "s", [SYS, USER, A1, T1], A2, tools=TOOLS)
    assert s1.prepared.boundary_reason == "new_conversation" and s2.prepared.encode.value == "incremental"
    assert m2.prepared.encode.value == "incremental" and m2.result.chain_id == m1.result.chain_id
    assert m2.context[: len(m1.checkpoint)] == m1.checkpoint
    segments = await export(reg)
    assert [(s["tip_step"], s["boundary_reason"]) for s in segments] == [(3, "new_conversation"), (4, "session_start")]
    check_export(real_tokenizer, [m1, s1, s2, m2], segments)


async def test_fork_condensation_recap_and_mid_history_splice(real_tokenizer):
    reg = new_registry(real_tokenizer)
    t1 = await turn(reg, "s", [SYS, USER], A1, tools=TOOLS)
    t2 = await turn(reg, "s", [SYS, USER, A1, T1], A2, tools=TOOLS)
    t3 = await turn(reg, "s", [SYS, USER, A1, T1, A2, T2], A3, tools=TOOLS)
    # Recap: the history is replaced by a summary after the system prompt: a new segment.
    recap = await turn(reg, "s", [SYS, user("Summary so far: 5+3=8, 8*2=16. State the result.")], say("16."),
                       tools=TOOLS)
    assert recap.prepared.encode.value == "full" and recap.prepared.boundary_reason == "history_rewritten"
    # Splice: the middle of the history is replaced after A2: a sibling at the fork point, reusing A2's checkpoint.
    splice = await turn(reg, "s", [SYS, USER, A1, T1, A2, user("(tool output elided) go on")], A3, tools=TOOLS)
    assert splice.prepared.encode.value == "incremental" and splice.result.forked
    assert splice.context[: len(t2.checkpoint)] == t2.checkpoint
    segments = await export(reg)
    spliced = segment_by_tip(segments, splice.result.step_id)
    assert spliced["forked_from_step"] == t2.result.step_id and set(trained_spans(spliced)) == {splice.result.step_id}
    check_export(real_tokenizer, [t1, t2, t3, recap, splice], segments)


async def test_fork_best_of_n_generated_concurrently_then_one_continues(real_tokenizer):
    reg = new_registry(real_tokenizer)
    t1 = await turn(reg, "s", [SYS, USER], A1, tools=TOOLS)
    samples = [say(f"Sample {i}: the answer is {16 + i}.") for i in range(4)]
    turns: dict[int, Turn] = {}

    async def sample(i: int, delay: float) -> None:
        prepared = await reg.prepare("s", [SYS, USER, A1, T1], tools=TOOLS)
        context = tuple(prepared.input_ids())
        await trio.sleep(delay)  # generation runs outside any lock
        ids = answer_ids(real_tokenizer, samples[i])
        committed = await reg.commit(prepared.handle, ids, logprobs_for(ids, i), None, None, "stop", samples[i])
        turns[i] = Turn(prepared, context, tuple(ids), committed)

    async with trio.open_nursery() as nursery:
        for i, delay in enumerate([0.03, 0.01, 0.04, 0.02]):
            nursery.start_soon(sample, i, delay)
    assert reg.debug_view("s").trie.checkpoints == 5
    assert sorted(t.result.forked for t in turns.values()) == [False, True, True, True]
    # The agent picks sample 2 and continues it.
    winner = await turn(reg, "s", [SYS, USER, A1, T1, samples[2], user("Double-check it.")], say("Checked."),
                        tools=TOOLS)
    assert winner.result.chain_id == turns[2].result.chain_id
    segments = await export(reg)
    assert len(segments) == 4 and segments[-1]["tip_step"] == winner.result.step_id
    check_export(real_tokenizer, [t1, *turns.values(), winner], segments)


async def test_fork_idempotent_retry_refreshes_the_node(real_tokenizer):
    reg = new_registry(real_tokenizer)
    t1 = await turn(reg, "s", [SYS, USER], A1, tools=TOOLS)
    t2 = await turn(reg, "s", [SYS, USER, A1, T1], A2, tools=TOOLS)
    # The client timed out and retries with the same history; the model answers the same.
    retry = await turn(reg, "s", [SYS, USER, A1, T1], A2, tools=TOOLS, salt=9)
    assert retry.result.refreshed and retry.context == t2.context
    assert retry.result.replaced_step == t2.result.step_id
    assert reg.debug_view("s").trie.checkpoints == 2
    t3 = await turn(reg, "s", [SYS, USER, A1, T1, A2, T2], A3, tools=TOOLS)
    assert t3.result.chain_id == retry.result.chain_id == t1.result.chain_id
    segments = await export(reg)
    # One segment: the retry took the first attempt's place (its logprobs are the ones kept).
    assert [s["step_ids"] for s in segments] == [[1, 3, 4]]
    check_export(real_tokenizer, [t1, t2, retry, t3], segments)


async def test_fork_warm_start_history_without_checkpoints_then_live_generation(real_tokenizer):
    reg = new_registry(real_tokenizer)
    # The history holds an assistant turn the proxy never generated.
    history = [SYS, USER, A1, T1]
    g1 = await turn(reg, "s", history, A2, tools=TOOLS)
    assert g1.prepared.encode.value == "full" and g1.prepared.boundary_reason == "session_start"
    g2 = await turn(reg, "s", history + [A2, T2], A3, tools=TOOLS)
    assert g2.prepared.encode.value == "incremental"
    segments = await export(reg)
    check_export(real_tokenizer, [g1, g2], segments)
    # The warm-started turn is context: only the two live generations are trained.
    assert sum(segments[0]["loss_mask"]) == len(g1.generated) + len(g2.generated)


async def test_boundary_length_exhaustion_then_full_encode(real_tokenizer):
    reg = new_registry(real_tokenizer)
    prepared = await reg.prepare("s", [SYS, USER], tools=TOOLS)
    ids = answer_ids(real_tokenizer, A3)[:4]
    cut = say(real_tokenizer.decode(ids))
    first = await reg.commit(prepared.handle, ids, logprobs_for(ids), None, None, "length", cut)
    assert not first.extendable
    t2 = await turn(reg, "s", [SYS, USER, cut, user("Continue.")], A3, tools=TOOLS)
    assert t2.prepared.boundary_reason == "length_exhausted"
    assert t2.context == tuple(real_tokenizer.encode_full([SYS, USER, cut, user("Continue.")], TOOLS))
    segments = await export(reg)
    assert [s["boundary_reason"] for s in segments] == ["session_start", "length_exhausted"]
    assert segments[0]["token_ids"] == prepared.input_ids() + ids


async def test_boundary_tito_failure_falls_back_to_a_full_encode(real_tokenizer):
    reg = new_registry(real_tokenizer)
    t1 = await turn(reg, "s", [SYS, USER], A3, tools=TOOLS)
    # Nothing after the checkpoint: the incremental encode has no fragment (empty_fragment) and a full encode runs.
    t2 = await turn(reg, "s", [SYS, USER, A3], say("Anything else?"), tools=TOOLS)
    assert t2.prepared.boundary_reason == "tito_failed" and t2.prepared.boundary_detail.startswith("empty_fragment")
    assert t2.context == tuple(real_tokenizer.encode_full([SYS, USER, A3], TOOLS))
    segments = await export(reg)
    assert segments[1]["steps"][0]["concat_incremental_tokenization_failed"] is True
    check_export(real_tokenizer, [t1, t2], segments)


async def test_boundary_tool_schema_and_template_kwargs_changes_start_new_subtrees(real_tokenizer):
    reg = new_registry(real_tokenizer)
    t1 = await turn(reg, "s", [SYS, USER], A1, tools=TOOLS)
    more_tools = TOOLS + [{"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}}]
    t2 = await turn(reg, "s", [SYS, USER, A1, T1], A2, tools=more_tools)
    t3 = await turn(reg, "s", [SYS, USER, A1, T1], A2, tools=TOOLS, kwargs={"enable_thinking": False})
    assert [t.prepared.boundary_reason for t in (t2, t3)] == ["context_changed", "context_changed"]
    assert t2.context == tuple(real_tokenizer.encode_full([SYS, USER, A1, T1], more_tools))
    segments = await export(reg)
    assert segments[2]["chat_template_kwargs"] == {"enable_thinking": False}
    check_export(real_tokenizer, [t1, t2, t3], segments)


async def test_reasoning_dropped_when_echoing_still_continues_the_chain(real_tokenizer):
    reg = new_registry(real_tokenizer)
    thought = {"role": "assistant", "content": "8", "reasoning_content": "Five plus three is eight."}
    t1 = await turn(reg, "s", [SYS, USER], thought)
    t2 = await turn(reg, "s", [SYS, USER, say("8"), user("Now double it.")], say("16"))
    assert t2.prepared.encode.value == "incremental" and t2.result.chain_id == t1.result.chain_id
    # The checkpoint keeps the reasoning the model generated, though the history no longer shows it.
    assert "Five plus three is eight." in real_tokenizer.decode(t2.context)
    check_export(real_tokenizer, [t1, t2], await export(reg))


async def test_last_step_build_mode_re_renders_the_final_conversation(real_tokenizer):
    reg = new_registry(real_tokenizer, export=ExportOptions(build_mode=BuildMode.LAST_STEP))
    kwargs = {"enable_thinking": False}
    t1 = await turn(reg, "s", [SYS, USER], say("Let me think: 16."), kwargs=kwargs)
    segments = await export(reg)
    (segment,) = segments
    expected = build_last_step(real_tokenizer, [SYS, USER, say("Let me think: 16.")], None, kwargs)
    assert segment["build_mode"] == "last_step" and segment["token_ids"] == list(expected.ids)
    assert segment["loss_mask"] == list(expected.loss_mask)
    # One turn, generated exactly as re-rendered: its logprobs are attached.
    start, stop = expected.assistant_spans[0]
    assert segment["logprobs"][start:stop] == logprobs_for(list(t1.generated))
    assert "concat_token_ids" not in segment["steps"][0]


@pytest.mark.parametrize("family", ["qwen3"])
async def test_ignore_cch_matches_rewritten_billing_hashes(family, qwen3_path):
    from proxy.families import load_tito_tokenizer

    tokenizer = load_tito_tokenizer(family, qwen3_path)
    reg = new_registry(tokenizer, ignore_cch_for_prefix_hash=True)
    t1 = await turn(reg, "s", [SYS, USER, A1, result("call_1", "8 (cch=ab12)")], A2, tools=TOOLS)
    t2 = await turn(reg, "s", [SYS, USER, A1, result("call_1", "8 (cch=zz99)"), A2, T2], A3, tools=TOOLS)
    assert t2.prepared.encode.value == "incremental" and t2.result.chain_id == t1.result.chain_id
    strict = new_registry(tokenizer)
    await turn(strict, "s", [SYS, USER, A1, result("call_1", "8 (cch=ab12)")], A2, tools=TOOLS)
    other = await turn(strict, "s", [SYS, USER, A1, result("call_1", "8 (cch=zz99)"), A2, T2], A3, tools=TOOLS)
    assert other.prepared.boundary_reason == "history_rewritten"


@pytest.mark.parametrize("family", ["qwen3"])
async def test_ignore_cch_matches_an_answer_that_holds_a_billing_hash(family, qwen3_path):
    # Failed before the commit keyed its answer under the flag: the stored key kept "cch=ab12" while the echo's was
    # normalized, so the echoed answer (verbatim or with its hash rewritten) missed its checkpoint.
    from proxy.families import load_tito_tokenizer

    tokenizer = load_tito_tokenizer(family, qwen3_path)
    for echoed in ("See cch=ab12.", "See cch=zz99."):
        reg = new_registry(tokenizer, ignore_cch_for_prefix_hash=True)
        t1 = await turn(reg, "s", [SYS, USER], say("See cch=ab12."))
        t2 = await turn(reg, "s", [SYS, USER, say(echoed), T2], A3)
        assert t2.prepared.encode.value == "incremental", echoed
        assert t2.result.chain_id == t1.result.chain_id and t2.prepared.boundary_reason is None, echoed


@pytest.mark.parametrize("family", ["qwen3"])
async def test_ignore_cch_keys_a_replayed_answer_as_the_live_commit_did(family, qwen3_path):
    # A proxy restarted on the same store rebuilds the session from its journal: the replayed answer must be keyed
    # under the flag too, or the echo after the restart misses the checkpoint the journal holds.
    from proxy.families import load_tito_tokenizer
    from proxy.trajectory.memory_store import InMemoryTrajectoryStore

    tokenizer = load_tito_tokenizer(family, qwen3_path)
    store = InMemoryTrajectoryStore()
    config = SessionConfig(max_steps_per_session=None, ignore_cch_for_prefix_hash=True)
    t1 = await turn(SessionRegistry(tokenizer, store=store, config=config), "s", [SYS, USER], say("See cch=ab12."))
    restarted = SessionRegistry(tokenizer, store=store, config=config)
    t2 = await turn(restarted, "s", [SYS, USER, say("See cch=zz99."), T2], A3)
    assert t2.prepared.encode.value == "incremental" and t2.result.chain_id == t1.result.chain_id


async def test_last_step_build_mode_with_earlier_turns_keeps_logprobs_all_or_none(real_tokenizer):
    reg = new_registry(real_tokenizer, export=ExportOptions(build_mode=BuildMode.LAST_STEP))
    t1 = await turn(reg, "s", [SYS, USER], A1, tools=TOOLS)
    t2 = await turn(reg, "s", [SYS, USER, A1, T1], A2, tools=TOOLS)
    (segment,) = await export(reg)
    expected = build_last_step(real_tokenizer, [SYS, USER, A1, T1, A2], TOOLS)
    assert segment["token_ids"] == list(expected.ids) and segment["loss_mask"] == list(expected.loss_mask)
    if segment["logprobs"] is None:
        # The templates re-render earlier turns differently from what was generated: then no logprobs at all.
        assert "re-render differs" in segment["logprobs_absent_reason"]
    else:
        assert len(segment["logprobs"]) == len(segment["token_ids"])
    assert [step["step_id"] for step in segment["steps"]] == [t1.result.step_id, t2.result.step_id]
