"""The viewer's pure pieces on segments the scripted session does not produce: a last-step build (no per-step token
ranges), missing and non-finite logprobs, step counts that do not add up, fields an exported file holds as JSON
strings, and a history with an assistant turn the proxy never generated."""

from __future__ import annotations

import json
import math

from proxy.ui.segment_view import segment_view
from proxy.ui.token_text import TokenTexts
from proxy.ui.trie_view import trie_from_segments

NO_TEXT = TokenTexts(None)


def segment(**fields):
    base = {"trajectory_id": "s:0", "parent_traj_id": "s", "token_ids": [10, 11, 12, 13], "loss_mask": [0, 0, 1, 1],
            "logprobs": [0.0, 0.0, -0.25, -1.5], "step_ids": [1], "boundary_reason": "session_start",
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    return {**base, **fields}


def test_a_last_step_segment_has_no_step_ranges_and_takes_logprobs_where_the_mask_trains() -> None:
    view = segment_view(segment(build_mode="last_step", steps=[{"step_id": 1, "trained": True}]), NO_TEXT)
    assert view["step_boundaries_known"] is False and view["steps"][0]["start"] is None
    assert view["tokens"]["logprob"] == [None, None, -0.25, -1.5]
    assert view["tokens"]["generated"] == [0, 0, 1, 1]
    assert view["tokens"]["text"] == ["", "", "", ""]


def test_absent_or_non_finite_logprobs_are_none_and_bad_step_counts_are_ignored() -> None:
    steps = [{"step_id": 1, "trained": True, "concat_context_token_count": 2, "concat_output_token_count": 1,
              "concat_versions": [None, None, "3"]}]
    view = segment_view(segment(logprobs=[0.0, 0.0, -math.inf, -1.0], steps=steps), NO_TEXT)
    assert view["step_boundaries_known"] is False  # 3 tokens counted for 4: no boundaries rather than wrong ones
    assert view["tokens"]["logprob"] == [None, None, None, -1.0]
    json.dumps(view, allow_nan=False)  # nothing the page's JSON.parse would refuse
    assert segment_view(segment(logprobs=None), NO_TEXT)["tokens"]["logprob"] == [None] * 4


def test_versions_come_from_weight_versions_else_the_steps() -> None:
    steps = [{"step_id": 1, "trained": True, "concat_context_token_count": 2, "concat_output_token_count": 2,
              "concat_versions": [None, None, "v1", "v2"]}]
    assert segment_view(segment(steps=steps), NO_TEXT)["tokens"]["version"] == [None, None, "v1", "v2"]
    recorded = segment(steps=steps, weight_versions=[None, None, 7, 8])
    assert segment_view(recorded, NO_TEXT)["tokens"]["version"] == [None, None, 7, 8]


def test_the_trie_from_segments_marks_only_the_steps_answers_and_reads_json_string_fields() -> None:
    warm_start = [{"role": "system", "content": "s"}, {"role": "user", "content": "q1"},
                  {"role": "assistant", "content": "written by hand"}, {"role": "user", "content": "q2"},
                  {"role": "assistant", "content": "generated", "tool_calls": [
                      {"id": "c", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}]}]
    tree = trie_from_segments([segment(messages=json.dumps(warm_start), step_ids=[3],
                                       boundary_reason="history_rewritten", tools=json.dumps([
                                           {"type": "function", "function": {"name": "add"}}]))])
    (context,) = tree["contexts"]
    assert context["tools"] == ["add"]
    nodes = []
    node = context
    while node["children"]:
        (node,) = node["children"]
        nodes.append(node)
    assert [(n["role"], n["checkpoint"], n["step"] and n["step"]["step_id"]) for n in nodes] == [
        ("system", False, None), ("user", False, None), ("assistant", False, None), ("user", False, None),
        ("assistant", True, 3)]
    assert nodes[-1]["boundary"] == {"reason": "history_rewritten", "detail": None}
    assert nodes[-1]["tool_calls"] == ['add({"a": 1})'] and "→ add(" in nodes[-1]["preview"]
