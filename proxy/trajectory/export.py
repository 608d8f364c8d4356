"""Finalize-time export: chains -> segments (training samples), in concat or last-step build mode (spec 5.5, 5.6).

Which segments (the export policy):

- one segment per exported chain, ending at the chain's tip: the chain's *terminal* checkpoint. A branch that was
  continued is one segment ending at its deepest checkpoint; a rejected best-of-N sibling is a short segment that
  shares the prefix (``forked_from_step``); with ``export_all_checkpoints`` every step of every chain also ends a
  segment of its own (intermediate checkpoints; their steps then appear in several segments, as asked);
- ordered by the commit order of their last step, so the session's last interaction is last.

What a segment holds: the TITO concatenation of the spans of every step on its token path (concat mode: exact
prefix consistency however long the trajectory). A step's generated tokens are *trained* (loss mask 1, logprobs
given) only in the segment of the chain that owns the step; in a segment that merely shares it as a prefix (a fork)
they are context: mask 0, logprob 0.0. So every committed step is a generated span of exactly one segment
(architecture invariant 6) and the shared prefix of best-of-N siblings is trained once. The one exception is an
idempotent retry (the same answer over the same checkpoint position, spec 5.2): it takes the position of the step
it refreshes (a chain's path is the walk back from its tip), so the answer is exported once and the superseded
step is in no segment (``docs/sessions.md``).

Segment dict (JSON-ready; ``/trajectory/read`` answers ``{"data": [segment, ...]}``):

==========================  ========================================================================================
``trajectory_id``           ``"<session id>:<segment_index>"``: one segment, readable on its own
``parent_traj_id``          the session id
``rollout_id``              the finalize call's rollout id (default: the session id)
``instance_id``             the finalize call's, else the first one a request of the session carried
``segment_index``           0-based, in export order; ``segment_count`` the session's total
``build_mode``              ``concat`` or ``last_step`` (a last-step segment that cannot be built falls back to
                            concat and says why in ``last_step_error``)
``token_ids``               every token of the sample; ``loss_mask`` one 0/1 per token
``logprobs``                one per token, 0.0 at context positions; **all or none**: None unless every trained
                            step has aligned logprobs (``logprobs_absent_reason`` says which did not)
``weight_versions``         with ``record_token_versions``: the version that produced each token, None for context
``routed_experts``          routing replay, concat mode, one of three shapes (below): the rows of one uninterrupted
``routed_experts_chunks``   generation; of a partial or resumed one; of a multi-step segment
``routed_experts_parts``
``num_turns``               steps (model calls) whose tokens are in the segment; ``step_ids`` them in order
``finish_reason``           the last step's; ``tip_step`` its step id
``boundary_reason``         why the segment's tokens began with a full encode (``boundaries.py``), and
                            ``boundary_detail`` (the TITO failure, for ``tito_failed``)
``forked_from_step``        the last step owned by another chain (trained there), or None
``reward_info``             the finalize call's, the same for every segment of the session
``finalize_reason``         why the session was finalized (:class:`FinalizeReason`): ``requested`` (POST
                            /session/finalize) or ``idle_timeout`` (no request for ``--session-idle-timeout``: the
                            proxy finalized it, with no ``reward_info``)
``messages``, ``tools``,    the conversation of the last step (its request plus its answer) and its context
``chat_template_kwargs``
``steps``                   concat mode: one record per step with spec 5.6's ``concat_token_ids``,
                            ``concat_response_logprobs``, ``concat_response_mask``, ``concat_versions``,
                            ``concat_context_token_count``, ``concat_output_token_count``, ``concat_logprobs_invalid``,
                            ``concat_incremental_tokenization_failed`` plus ``step_id``, ``turn_id``,
                            ``generation_id``, ``trained``, ``finish_reason``; last-step mode: the same without the
                            ``concat_*`` arrays
==========================  ========================================================================================

``mask_nonlast_version_tokens``: trained tokens whose weight version differs from the version of the segment's last
generated token get loss mask 0 (their logprobs stay).

Routed experts (``--use-rollout-routing-replay``, spec 9; concat mode only: a last-step re-render has other token
positions). A *row* is SGLang's routing for one input position: ``num_layers x top_k`` int32 expert ids; the last
token of a sequence is never fed forward, so a segment of ``N`` tokens has rows for positions ``0 .. N-2``. Each
upstream request's rows are one *chunk* ``{"data": base64 of little-endian int32, "num_rows", "start_len"}`` covering
positions ``start_len .. start_len + num_rows - 1`` of the segment. The proxy asks every request only for the rows it
does not hold yet (``routed_experts_start_len``), so the chunks of a segment are contiguous and never overlap: laid
at their ``start_len`` (later chunks win, should a consumer ever see an overlap), they give exactly ``N - 1`` rows.
The segment carries exactly one of:

- ``routed_experts``: a base64 string, rows ``0 .. N-2``: the segment is one step generated by one upstream request;
- ``routed_experts_chunks``: a list of chunks: one step generated by several requests (a partial rollout
  continuation after a pause; its rows continue where the interrupted request's rows end, or, when that stream
  was cut before its final chunk, the continuation's own rows cover the kept tokens);
- ``routed_experts_parts``: one part per step of a multi-step segment, in path order: ``step_id``,
  ``prefix_token_count`` (tokens before the step's span), ``concat_token_count`` (tokens of its span),
  ``is_first_step``, ``start_len`` and ``num_rows`` (the part's coverage: ``prefix_token_count - 1`` for a step that
  extends a checkpoint, whose last token had no row yet), and ``routed_experts`` (one chunk: its base64) or
  ``routed_experts_chunks``.

:func:`proxy.trajectory.routed_experts.assemble_routed_experts` turns any of the three into the ``[N-1, L*K]`` rows.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from proxy.trajectory.prefix_trie import PrefixTrie
from proxy.trajectory.tokens import Step, path


class BuildMode(enum.Enum):
    """How a segment's tokens are built (spec 5.6)."""

    CONCAT = "concat"
    LAST_STEP = "last_step"


@attrs.frozen
class ExportOptions:
    """The export policy (flags ``--trajectory-build-mode``, ``--export-all-checkpoints``, ``--record-token-versions``,
    ``--mask-nonlast-version-tokens``)."""

    build_mode: BuildMode = attrs.field(default=BuildMode.CONCAT, converter=BuildMode)
    export_all_checkpoints: bool = False
    record_token_versions: bool = False
    mask_nonlast_version_tokens: bool = False


class FinalizeReason(enum.Enum):
    """Why a session was finalized: the segment's ``finalize_reason``."""

    # POST /session/finalize (the rollout's own finalize).
    REQUESTED = "requested"
    # The session saw no request for --session-idle-timeout and the proxy finalized it (session_reaper.py).
    IDLE_TIMEOUT = "idle_timeout"


@attrs.frozen
class SessionExport:
    """What finalize hands the exporter: the tips of the session's exported chains and the finalize arguments."""

    session_id: str
    rollout_id: str
    instance_id: str | None
    reward_info: Mapping[str, Any] | None
    # The tip of every exported chain (any order).
    tips: tuple[Step, ...]
    reason: FinalizeReason = FinalizeReason.REQUESTED


def trajectory_id(session_id: str, segment_index: int) -> str:
    """The id of one segment: unique because the part after the last ``:`` is always the integer index."""
    return f"{session_id}:{segment_index}"


def segment_tips(tips: Sequence[Step], export_all_checkpoints: bool) -> list[Step]:
    """The last step of every segment, in commit order: chain tips, plus every owned step with export-all."""
    ends = list(tips)
    if export_all_checkpoints:
        for tip in tips:
            step = tip.base
            while step is not None and step.chain_id == tip.chain_id:
                ends.append(step)
                step = step.base
    return sorted(ends, key=lambda step: step.step_id)


def export_segments(export: SessionExport, options: ExportOptions, tokenizer: Any = None) -> list[dict[str, Any]]:
    """Every segment of a finalized session, as JSON-ready dicts in export order (see the module docstring).

    CPU-bound (O(tokens x segments), plus a re-render per segment in last-step mode): run it off the event loop.
    ``tokenizer`` (a TITO tokenizer) is needed only in last-step mode.
    """
    ends = segment_tips(export.tips, options.export_all_checkpoints)
    segments = []
    for index, end in enumerate(ends):
        # With export-all, an intermediate segment is trained as its chain trains it.
        owner = end.chain_id
        steps = path(end)
        segment = _header(export, index, len(ends), end, steps, owner)
        built = None
        if options.build_mode is BuildMode.LAST_STEP:
            try:
                built = _last_step_body(end, steps, owner, options, tokenizer)
            except Exception as exc:  # noqa: BLE001 - any render failure falls back to the always-exact concat build
                segment["last_step_error"] = f"{type(exc).__name__}: {exc}"
        if built is None:
            built = _concat_body(steps, owner, options)
            segment["build_mode"] = BuildMode.CONCAT.value
        segment.update(built)
        segments.append(segment)
    return segments


def _header(export: SessionExport, index: int, count: int, end: Step, steps: list[Step], owner: int) -> dict[str, Any]:
    """The fields that do not depend on the build mode."""
    root = steps[0]
    shared = [step for step in steps if step.chain_id != owner]
    context = PrefixTrie.context_of(end.node).message
    return {
        "trajectory_id": trajectory_id(export.session_id, index),
        "parent_traj_id": export.session_id,
        "rollout_id": export.rollout_id,
        "instance_id": export.instance_id,
        "segment_index": index,
        "segment_count": count,
        "build_mode": None,
        "num_turns": len(steps),
        "step_ids": [step.step_id for step in steps],
        "tip_step": end.step_id,
        "finish_reason": end.finish_reason,
        "boundary_reason": root.boundary_reason,
        "boundary_detail": root.boundary_detail,
        "forked_from_step": shared[-1].step_id if shared else None,
        "reward_info": dict(export.reward_info) if export.reward_info is not None else None,
        "finalize_reason": export.reason.value,
        "messages": PrefixTrie.messages(end.node),
        "tools": list(context.tools) if context.tools is not None else None,
        "chat_template_kwargs": dict(context.template_kwargs),
    }


def _last_version(end: Step) -> str | None:
    """The weight version of the segment's last generated token."""
    runs = end.span.version_runs
    return runs[-1][0] if runs else None


def _trained_mask(step: Step, options: ExportOptions, last_version: str | None) -> list[int]:
    """Loss mask of a trained step's generated tokens (stale-version tokens masked on request)."""
    if not options.mask_nonlast_version_tokens:
        return [1] * step.span.generated_count
    return [1 if version == last_version else 0 for version in step.span.versions()]


def _chunk_json(chunk: Any) -> dict[str, Any]:
    return {"data": base64.b64encode(chunk.data).decode("ascii"), "num_rows": chunk.num_rows,
            "start_len": chunk.start_len}


def _routed_part(step: Step, offset: int, first: bool) -> dict[str, Any] | None:
    """The routed-experts part of one step (see the module docstring), or None when it recorded none."""
    chunks = step.span.routed_experts
    if not chunks:
        return None
    part: dict[str, Any] = {
        "step_id": step.step_id, "prefix_token_count": offset, "concat_token_count": step.span_length,
        "is_first_step": first, "start_len": chunks[0].start_len,
        "num_rows": chunks[-1].start_len + chunks[-1].num_rows - chunks[0].start_len,
    }
    if len(chunks) == 1:
        part["routed_experts"] = _chunk_json(chunks[0])["data"]
    else:
        part["routed_experts_chunks"] = [_chunk_json(chunk) for chunk in chunks]
    return part


def _routed_fields(steps: list[Step], parts: list[dict[str, Any]], token_count: int) -> dict[str, Any]:
    """The segment's routed-experts field: one of the three shapes of the module docstring (none without rows)."""
    if not parts:
        return {}
    if len(steps) > 1:
        return {"routed_experts_parts": parts}
    chunks = steps[0].span.routed_experts
    if len(chunks) == 1 and chunks[0].start_len == 0 and chunks[0].num_rows == token_count - 1:
        return {"routed_experts": parts[0]["routed_experts"]}
    return {"routed_experts_chunks": [_chunk_json(chunk) for chunk in chunks]}


def _step_meta(step: Step, trained: bool) -> dict[str, Any]:
    """A step record's identification."""
    return {"step_id": step.step_id, "turn_id": step.turn_id, "generation_id": step.generation_id, "trained": trained,
            "finish_reason": step.finish_reason}


def _concat_body(steps: list[Step], owner: int, options: ExportOptions) -> dict[str, Any]:
    """Concat build: the spans of the path, trained where the segment's chain owns the step."""
    last_version = _last_version(steps[-1])
    token_ids: list[int] = []
    loss_mask: list[int] = []
    logprobs: list[float] = []
    versions: list[str | None] = []
    absent: list[str] = []
    records = []
    parts = []
    for index, step in enumerate(steps):
        span = step.span
        trained = step.chain_id == owner
        context, generated = span.context_count, span.generated_count
        if trained:
            generated_mask = _trained_mask(step, options, last_version)
            if span.logprobs is not None:
                generated_logprobs = span.logprobs.tolist()
            else:
                generated_logprobs = [0.0] * generated
                absent.append(f"step {step.step_id} has no aligned logprobs")
        else:
            generated_mask, generated_logprobs = [0] * generated, [0.0] * generated
        part = _routed_part(step, len(token_ids), index == 0)
        if part is not None:
            parts.append(part)
        step_ids = span.ids()
        step_mask = span.context_mask_values() + generated_mask
        step_logprobs = [0.0] * context + generated_logprobs
        step_versions = [None] * context + span.versions()
        token_ids += step_ids
        loss_mask += step_mask
        logprobs += step_logprobs
        versions += step_versions
        records.append({
            **_step_meta(step, trained),
            "concat_token_ids": step_ids,
            "concat_response_logprobs": step_logprobs,
            "concat_response_mask": step_mask,
            "concat_versions": step_versions,
            "concat_context_token_count": context,
            "concat_output_token_count": generated,
            "concat_logprobs_invalid": step.logprobs_invalid,
            "concat_incremental_tokenization_failed": step.tito_failed,
        })
    body: dict[str, Any] = {
        "token_ids": token_ids,
        "loss_mask": loss_mask,
        "logprobs": None if absent else logprobs,
        "logprobs_absent_reason": "; ".join(absent) or None,
        "steps": records,
    }
    if options.record_token_versions:
        body["weight_versions"] = versions
    body.update(_routed_fields(steps, parts, len(token_ids)))
    return body


def _last_step_body(
    end: Step, steps: list[Step], owner: int, options: ExportOptions, tokenizer: Any
) -> dict[str, Any]:
    """Last-step build: re-render the last step's conversation, mask the assistant turns this segment trains."""
    from proxy.tokenization import build_last_step

    if tokenizer is None:
        raise ValueError("last_step build mode needs a tokenizer")
    context = PrefixTrie.context_of(end.node).message
    messages = PrefixTrie.messages(end.node)
    sample = build_last_step(tokenizer, messages, context.tools, context.template_kwargs)
    # The assistant nodes on the message path, in order; the ones answered by a step this segment trains.
    assistant_nodes = []
    node = end.node
    while node.depth > 0:
        message = node.message  # read once: a packed text is unpacked on each read
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            assistant_nodes.append(node)
        node = node.parent
    assistant_nodes.reverse()
    trained_steps = {step.node: step for step in steps if step.chain_id == owner}
    ids = list(sample.ids)
    mask = list(sample.loss_mask)
    logprobs = [0.0] * len(ids)
    versions: list[str | None] = [None] * len(ids)
    last_version = _last_version(end)
    absent = []
    for (start, stop), node in zip(sample.assistant_spans, assistant_nodes, strict=True):
        step = trained_steps.get(node)
        if step is None:
            # An assistant turn the proxy never generated here (warm start), or trained in another segment.
            mask[start:stop] = [0] * (stop - start)
            continue
        if ids[start:stop] != step.span.generated_ids.tolist():
            absent.append(f"step {step.step_id}: the re-render differs from the generated ids")
            continue
        if options.mask_nonlast_version_tokens:
            mask[start:stop] = _trained_mask(step, options, last_version)
        versions[start:stop] = step.span.versions()
        if step.span.logprobs is None:
            absent.append(f"step {step.step_id} has no aligned logprobs")
        else:
            logprobs[start:stop] = step.span.logprobs.tolist()
    body: dict[str, Any] = {
        "build_mode": BuildMode.LAST_STEP.value,
        "token_ids": ids,
        "loss_mask": mask,
        "logprobs": None if absent else logprobs,
        "logprobs_absent_reason": "; ".join(absent) or None,
        "steps": [_step_meta(step, step.chain_id == owner) for step in steps],
    }
    if options.record_token_versions:
        body["weight_versions"] = versions
    return body


__all__ = ["BuildMode", "ExportOptions", "FinalizeReason", "SessionExport", "export_segments", "segment_tips", "trajectory_id"]
