"""Segment export: which segments, in which order, trained where, with which fields (spec 5.5, 5.6)."""

from __future__ import annotations

import base64

from proxy.trajectory.export import BuildMode, ExportOptions, SessionExport, export_segments, segment_tips
from proxy.trajectory.message_keys import context_key, message_key
from proxy.trajectory.prefix_trie import PrefixTrie
from proxy.trajectory.routed_experts import RoutedRows, assemble_routed_experts
from proxy.trajectory.tokens import RoutedChunk, Step, committed_span, context_span, routed_rows_end

TOOLS = [{"type": "function", "function": {"name": "t"}}]


class Builder:
    """Builds a trie and steps by hand: ``add(parent_node, prompt, answer, base, chain)``."""

    def __init__(self):
        self.trie = PrefixTrie()
        self.context = self.trie.context(context_key(TOOLS), TOOLS, {"enable_thinking": False})
        self.next_id = 0

    def add(self, parent, prompt_text, answer_text, base, chain, *, context_ids, generated, logprobs=True,
            versions=None, mask=None, routed=(), finish="stop", boundary=None):
        prompt = {"role": "user", "content": prompt_text}
        node = self.trie.attach(parent, [prompt], [message_key(prompt)])
        answer = {"role": "assistant", "content": answer_text}
        answer_node, _ = self.trie.upsert_assistant(node, answer, message_key(answer), None)
        self.next_id += 1
        span = committed_span(context_span(context_ids, mask), generated,
                              [-0.1 * (i + 1) for i in range(len(generated))] if logprobs else None,
                              versions or ["v1"] * len(generated), routed)
        position = base.position + 1 if base is not None and base.chain_id == chain else 1
        step = Step.of(span, step_id=self.next_id, base=base, chain_id=chain, position=position, node=answer_node,
                       session_id="s", generation=self.next_id, finish_reason=finish, extendable=True,
                       boundary_reason=boundary if base is None else None, logprobs_invalid=not logprobs)
        self.trie.set_checkpoint(answer_node, step)
        return answer_node, step


def best_of_two():
    """s1 (chain 1) -> s2 (chain 1, continued) and s3 (chain 2, forked at s1)."""
    b = Builder()
    n1, s1 = b.add(b.context, "q", "a1", None, 1, context_ids=[1, 2], generated=[3], boundary="session_start")
    n2, s2 = b.add(n1, "more", "a2", s1, 1, context_ids=[4], generated=[5, 6])
    _, s3 = b.add(n1, "other", "a3", s1, 2, context_ids=[7], generated=[8])
    return b, s1, s2, s3


def export(tips, options=ExportOptions(), **extra):
    meta = dict(session_id="sess", rollout_id="r1", instance_id="i1", reward_info={"score": 1.0})
    meta.update(extra)
    return export_segments(SessionExport(tips=tuple(tips), **meta), options)


def test_export_one_segment_per_chain_tip_in_commit_order():
    _, s1, s2, s3 = best_of_two()
    segments = export([s3, s2])
    assert [s["tip_step"] for s in segments] == [2, 3]
    assert [s["trajectory_id"] for s in segments] == ["sess:0", "sess:1"]
    assert [s["segment_index"] for s in segments] == [0, 1]
    assert all(s["segment_count"] == 2 for s in segments)


def test_export_segment_ids_are_the_concatenation_of_the_path_spans():
    _, s1, s2, s3 = best_of_two()
    first, second = export([s2, s3])
    assert first["token_ids"] == [1, 2, 3, 4, 5, 6]
    assert second["token_ids"] == [1, 2, 3, 7, 8]
    assert [step["concat_token_ids"] for step in first["steps"]] == [[1, 2, 3], [4, 5, 6]]


def test_export_shared_prefix_is_trained_only_in_the_owning_chain():
    _, s1, s2, s3 = best_of_two()
    owner, fork = export([s2, s3])
    assert owner["loss_mask"] == [0, 0, 1, 0, 1, 1]
    assert fork["loss_mask"] == [0, 0, 0, 0, 1]
    assert fork["forked_from_step"] == 1 and owner["forked_from_step"] is None
    assert [step["trained"] for step in fork["steps"]] == [False, True]
    # The shared step's logprobs are context positions in the fork: 0.0.
    assert fork["logprobs"] == [0.0, 0.0, 0.0, 0.0, -0.1]
    assert owner["logprobs"] == [0.0, 0.0, -0.1, 0.0, -0.1, -0.2]


def test_export_carries_every_spec_field_and_the_finalize_arguments():
    _, s1, s2, s3 = best_of_two()
    segment = export([s2], instance_id="inst", rollout_id="roll")[0]
    assert segment["parent_traj_id"] == "sess" and segment["rollout_id"] == "roll" and segment["instance_id"] == "inst"
    assert segment["reward_info"] == {"score": 1.0}
    assert segment["num_turns"] == 2 and segment["step_ids"] == [1, 2]
    assert segment["finish_reason"] == "stop" and segment["boundary_reason"] == "session_start"
    assert segment["build_mode"] == "concat" and "weight_versions" not in segment
    assert segment["tools"] == TOOLS and segment["chat_template_kwargs"] == {"enable_thinking": False}
    assert [m["content"] for m in segment["messages"]] == ["q", "a1", "more", "a2"]
    record = segment["steps"][1]
    assert record == {
        "step_id": 2, "turn_id": None, "generation_id": "s#g2", "trained": True, "finish_reason": "stop",
        "concat_token_ids": [4, 5, 6], "concat_response_logprobs": [0.0, -0.1, -0.2],
        "concat_response_mask": [0, 1, 1], "concat_versions": [None, "v1", "v1"],
        "concat_context_token_count": 1, "concat_output_token_count": 2, "concat_logprobs_invalid": False,
        "concat_incremental_tokenization_failed": False,
    }


def test_export_logprobs_are_all_or_none():
    b = Builder()
    n1, s1 = b.add(b.context, "q", "a1", None, 1, context_ids=[1], generated=[2], logprobs=False)
    _, s2 = b.add(n1, "m", "a2", s1, 1, context_ids=[3], generated=[4])
    segment = export([s2])[0]
    assert segment["logprobs"] is None and "step 1" in segment["logprobs_absent_reason"]
    assert segment["steps"][0]["concat_logprobs_invalid"] is True
    # A fork that does not train the step without logprobs has them all.
    _, s3 = b.add(n1, "x", "a3", s1, 2, context_ids=[5], generated=[6])
    fork = export([s2, s3])[1]
    assert fork["logprobs"] == [0.0, 0.0, 0.0, -0.1]


def test_export_client_mask_on_context_tokens_is_kept():
    b = Builder()
    _, s1 = b.add(b.context, "q", "a", None, 1, context_ids=[1, 2, 3], generated=[4], mask=[0, 1, 1])
    assert export([s1])[0]["loss_mask"] == [0, 1, 1, 1]


def test_export_versions_recorded_on_request_and_stale_ones_masked_on_request():
    b = Builder()
    _, s1 = b.add(b.context, "q", "a", None, 1, context_ids=[1], generated=[2, 3, 4], versions=["v1", "v1", "v2"])
    plain = export([s1])[0]
    assert "weight_versions" not in plain and plain["loss_mask"] == [0, 1, 1, 1]
    options = ExportOptions(record_token_versions=True, mask_nonlast_version_tokens=True)
    masked = export([s1], options)[0]
    assert masked["weight_versions"] == [None, "v1", "v1", "v2"]
    assert masked["loss_mask"] == [0, 0, 0, 1]
    assert masked["logprobs"] == [0.0] + [-0.1 * (i + 1) for i in range(3)]


def _rows(*values):
    """Routed rows of one int32 each (one layer, top-1), little-endian."""
    return b"".join(value.to_bytes(4, "little") for value in values)


def test_export_routed_experts_shapes_direct_chunks_and_parts():
    b = Builder()
    # One step, one request: the direct shape, rows 0 .. N-2 (3 tokens -> 2 rows).
    whole = RoutedChunk(_rows(1, 2), 2, 0)
    n1, s1 = b.add(b.context, "q", "a", None, 1, context_ids=[1, 2], generated=[3], routed=[whole])
    (single,) = export([s1])
    assert single["routed_experts"] == base64.b64encode(whole.data).decode()
    assert "routed_experts_chunks" not in single and "routed_experts_parts" not in single
    assert assemble_routed_experts(single) == RoutedRows(_rows(1, 2), 2, 4)
    # One step, two requests (a continuation after a pause): the chunks shape, contiguous.
    first, rest = RoutedChunk(_rows(7, 8), 2, 0), RoutedChunk(_rows(9, 10), 2, 2)
    _, resumed = b.add(b.context, "r", "c", None, 3, context_ids=[1, 2], generated=[3, 4, 5], routed=[first, rest])
    (chunked,) = export([resumed])
    assert chunked["routed_experts_chunks"] == [
        {"data": base64.b64encode(first.data).decode(), "num_rows": 2, "start_len": 0},
        {"data": base64.b64encode(rest.data).decode(), "num_rows": 2, "start_len": 2},
    ]
    assert assemble_routed_experts(chunked).data == _rows(7, 8, 9, 10)
    # Two steps: one part per step; step 2 asked from position 2 (step 1's last token had no row).
    _, s2 = b.add(n1, "m", "b", s1, 1, context_ids=[4], generated=[5, 6], routed=[RoutedChunk(_rows(3, 4, 5), 3, 2)])
    (multi,) = export([s2])
    assert multi["routed_experts_parts"] == [
        {"step_id": 1, "prefix_token_count": 0, "concat_token_count": 3, "is_first_step": True, "start_len": 0,
         "num_rows": 2, "routed_experts": base64.b64encode(whole.data).decode()},
        {"step_id": s2.step_id, "prefix_token_count": 3, "concat_token_count": 3, "is_first_step": False,
         "start_len": 2, "num_rows": 3, "routed_experts": base64.b64encode(_rows(3, 4, 5)).decode()},
    ]
    rows = assemble_routed_experts(multi)
    assert (rows.data, rows.num_rows, rows.missing) == (_rows(1, 2, 3, 4, 5), 5, ())
    assert routed_rows_end(s2) == 5 == len(multi["token_ids"]) - 1
    # A step without rows leaves a reported gap, never made-up rows.
    _, s3 = b.add(n1, "n", "d", s1, 4, context_ids=[4], generated=[8])
    gap = assemble_routed_experts(export([s3])[0])
    assert (gap.num_rows, gap.missing) == (4, (2, 3))
    # A segment without any routing has none of the keys.
    _, plain = b.add(b.context, "p", "e", None, 2, context_ids=[6], generated=[7])
    (bare,) = export([plain])
    assert not {"routed_experts", "routed_experts_chunks", "routed_experts_parts"} & set(bare)
    assert assemble_routed_experts(bare) is None


def test_export_all_checkpoints_adds_intermediate_segments():
    _, s1, s2, s3 = best_of_two()
    assert [s.step_id for s in segment_tips([s2, s3], True)] == [1, 2, 3]
    segments = export([s2, s3], ExportOptions(export_all_checkpoints=True))
    assert [s["tip_step"] for s in segments] == [1, 2, 3]
    assert segments[0]["token_ids"] == [1, 2, 3] and segments[0]["loss_mask"] == [0, 0, 1]


def test_export_last_step_without_tokenizer_falls_back_to_concat_and_says_why():
    _, s1, s2, s3 = best_of_two()
    segment = export([s2], ExportOptions(build_mode=BuildMode.LAST_STEP))[0]
    assert segment["build_mode"] == "concat"
    assert "needs a tokenizer" in segment["last_step_error"]
    assert segment["token_ids"] == [1, 2, 3, 4, 5, 6]
