"""One exported segment as the viewer draws it: its tokens (id, text, loss mask, logprob, weight version) and where
each step begins.

The input is a segment exactly as ``POST /trajectory/read`` returns it (``proxy/trajectory/export.py`` documents the
fields), or a row of an exported file with the same fields. The token arrays go out as parallel lists (one entry
per token: compact JSON for long segments):

- ``ids``, ``text`` (``token_text.py``), ``mask`` (the loss mask);
- ``logprob``: the sampled token's logprob where the segment recorded a real one, None elsewhere. The export
  writes 0.0 for context tokens and for the generated tokens of steps another segment trains (a placeholder, not
  a logprob), so those are None here;
- ``version``: the weight version (``weight_versions`` when recorded, else the steps' ``concat_versions``);
- ``generated``: 1 for a token the model generated (trained here or not), 0 for a context token.

``steps`` give each step's first token (``start``) and its context and output counts when the segment has them
(concat build); a last-step build re-renders the conversation, so only the segment's start is known.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.ui.token_text import TokenTexts

#: the segment fields the viewer shows as they are
HEADER_FIELDS = (
    "trajectory_id", "parent_traj_id", "rollout_id", "instance_id", "segment_index", "segment_count", "build_mode",
    "num_turns", "step_ids", "tip_step", "finish_reason", "boundary_reason", "boundary_detail", "forked_from_step",
    "reward_info", "finalize_reason", "logprobs_absent_reason", "last_step_error",
)


def as_list(value: Any) -> list[Any] | None:
    """A JSON list, a pyarrow/NumPy array (``tolist``) or a JSON string of a list, as a Python list; None stays."""
    if value is None:
        return None
    if isinstance(value, str):
        value = json.loads(value)
    elif hasattr(value, "tolist"):
        value = value.tolist()
    return list(value)


def as_json_value(value: Any) -> Any:
    """A field an exported file may hold as a JSON string (``messages``, ``reward_info``...) as its value."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def _finite(value: Any) -> float | None:
    """A logprob JSON can carry (JSON has no -Infinity, which the page's ``JSON.parse`` would refuse)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _step_layout(steps: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
    """Each step's first token and its counts (concat build), or None when the steps do not say."""
    layout, start = [], 0
    for step in steps:
        context, output = step.get("concat_context_token_count"), step.get("concat_output_token_count")
        if context is None or output is None:
            return None
        layout.append({
            "step_id": step.get("step_id"), "start": start, "context": int(context), "output": int(output),
            "trained": bool(step.get("trained", True)), "finish_reason": step.get("finish_reason"),
            "generation_id": step.get("generation_id"), "turn_id": step.get("turn_id"),
            "tito_failed": bool(step.get("concat_incremental_tokenization_failed", False)),
        })
        start += int(context) + int(output)
    return layout


def _versions(segment: Mapping[str, Any], steps: Sequence[Mapping[str, Any]], count: int) -> list[Any]:
    recorded = as_list(segment.get("weight_versions"))
    if recorded is None and steps and all(step.get("concat_versions") is not None for step in steps):
        recorded = [version for step in steps for version in as_list(step["concat_versions"]) or ()]
    if recorded is None or len(recorded) != count:
        return [None] * count
    return recorded


def segment_view(segment: Mapping[str, Any], texts: TokenTexts, *, preview: bool = False) -> dict[str, Any]:
    """The viewer's JSON for one segment (see the module docstring); ``preview``: built from a live session."""
    ids = [int(token) for token in as_list(segment.get("token_ids")) or ()]
    count = len(ids)
    mask = [int(bit) for bit in as_list(segment.get("loss_mask")) or [0] * count]
    logprobs = as_list(segment.get("logprobs"))
    steps = [dict(step) for step in as_list(as_json_value(segment.get("steps"))) or ()]
    layout = _step_layout(steps) if steps else None
    if layout is not None and sum(step["context"] + step["output"] for step in layout) != count:
        layout = None  # counts that do not add up (a foreign file): show no step boundaries rather than wrong ones
    generated = [0] * count
    real_logprob = [False] * count
    if layout is not None:
        for step in layout:
            first_output = step["start"] + step["context"]
            for index in range(first_output, first_output + step["output"]):
                generated[index] = 1
                real_logprob[index] = step["trained"]
    else:
        generated = list(mask)
        real_logprob = [bool(bit) for bit in mask]
    if logprobs is None or len(logprobs) != count:
        shown = [None] * count
    else:
        shown = [_finite(value) if real else None for value, real in zip(logprobs, real_logprob)]
    view = {field: as_json_value(segment.get(field)) for field in HEADER_FIELDS}
    view.update({
        "preview": preview,
        "token_count": count,
        "trained_tokens": sum(mask),
        "tokens": {
            "ids": ids, "text": texts.texts(ids), "mask": mask, "logprob": shown,
            "version": _versions(segment, steps, count), "generated": generated,
        },
        "steps": layout if layout is not None else [
            {"step_id": step.get("step_id"), "start": None, "trained": bool(step.get("trained", True)),
             "finish_reason": step.get("finish_reason"), "generation_id": step.get("generation_id")}
            for step in steps
        ],
        "step_boundaries_known": layout is not None,
    })
    return view


__all__ = ["as_json_value", "as_list", "segment_view"]
