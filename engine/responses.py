"""Building ``/generate`` response bodies and stream chunks from a request's state (sglang-protocol.md §1.4-§1.6).

Kept apart from the scheduler so that the exact shapes (key sets, cumulative vs incremental slicing, the
waiting-queue quirk, stop trimming) can be read in one place.
"""

from __future__ import annotations

import time
from typing import Any

import trio

from .determinism import as_float32, prompt_logprob, stable_hash
from .request_state import RequestState
from .routed_experts import encode_routed_experts
from .scheduler import Engine


def _triple(engine: Engine, logprob: float | None, token_id: int, with_text: bool) -> list[Any]:
    return [logprob, token_id, engine.tokenizer.token_text(token_id) if with_text else None]


def _alternatives(engine: Engine, position: int, token_id: int, logprob: float, count: int) -> list[tuple[float, int]]:
    """``count`` (logprob, id) pairs for a top-logprobs list: the sampled token first, then lower ones."""
    pairs = [(logprob, token_id)]
    vocab = engine.tokenizer.vocab_size
    k = 1
    while len(pairs) < count:
        alt = stable_hash("alt", engine.config.seed, position, token_id, k) % vocab
        if alt != token_id and all(alt != other for _, other in pairs):
            pairs.append((as_float32(round(logprob - 0.5 * len(pairs) - 0.05, 6)), alt))
        k += 1
    return pairs


def _logprob_lists(engine: Engine, state: RequestState, start: int, end: int) -> dict[str, Any]:
    """``input_token_logprobs`` & co. (cumulative) and the output lists for output positions ``start:end``."""
    request = state.request
    with_text = request.return_text_in_logprobs
    seed = engine.config.seed
    prefill = state.prefill_version or engine.weight_version
    out: dict[str, Any] = {}
    if request.logprob_start_len >= 0:
        out["input_token_logprobs"] = [
            _triple(engine, None if pos == 0 else prompt_logprob(seed, pos, tid, prefill), tid, with_text)
            for pos, tid in enumerate(state.input_ids)
            if pos >= request.logprob_start_len
        ]
    else:
        out["input_token_logprobs"] = []
    prompt_len = len(state.input_ids)
    ids = state.output_ids[start:end]
    lps = state.output_logprobs[start:end]
    out["output_token_logprobs"] = [_triple(engine, lp, tid, with_text) for lp, tid in zip(lps, ids)]
    if request.top_logprobs_num > 0:
        n = request.top_logprobs_num
        out["input_top_logprobs"] = (
            [None if pos == 0 else [_triple(engine, lp, alt, with_text) for lp, alt in _alternatives(
                engine, pos, tid, prompt_logprob(seed, pos, tid, prefill), n)]
             for pos, tid in enumerate(state.input_ids) if pos >= request.logprob_start_len]
            if request.logprob_start_len >= 0 else []
        )
        out["output_top_logprobs"] = [
            [_triple(engine, lp_alt, alt, with_text)
             for lp_alt, alt in _alternatives(engine, prompt_len + start + i, tid, lp, n)]
            for i, (lp, tid) in enumerate(zip(lps, ids))
        ]
    if request.token_ids_logprob is not None:
        wanted = request.token_ids_logprob

        def row(position: int, sampled: int, sampled_lp: float) -> list[list[Any]]:
            return [
                _triple(engine, sampled_lp if t == sampled else as_float32(-round(
                    sampled_lp * -1 + 1 + (stable_hash("tid", seed, position, t) % 1000) / 100, 6)), t, with_text)
                for t in wanted
            ]

        out["input_token_ids_logprobs"] = []
        out["output_token_ids_logprobs"] = [
            row(prompt_len + start + i, tid, lp) for i, (lp, tid) in enumerate(zip(lps, ids))
        ]
    return out


def output_text(engine: Engine, state: RequestState, upto: int, *, final: bool) -> str:
    """Decoded text of the first ``upto`` output tokens; on the final chunk trimmed of the matched stop (§1.3)."""
    sampling = state.request.sampling
    ids = state.output_ids[:upto]
    reason = state.finish_reason if final else None
    matched = reason.get("matched") if reason and reason.get("type") == "stop" else None
    if matched is not None and not sampling.no_stop_trim and isinstance(matched, int) and ids:
        ids = ids[:-1]
    text = engine.tokenizer.decode(ids, skip_special_tokens=sampling.skip_special_tokens)
    if isinstance(matched, str) and not sampling.no_stop_trim:
        position = text.find(matched)
        if position != -1:
            text = text[:position]
    if not final:
        text = text.rstrip("\ufffd")  # an incomplete UTF-8 sequence waits for its next byte token
    return text


def held_back(state: RequestState, text: str) -> bool:
    """An intermediate chunk is held while the text ends with the start of a stop string (§1.6)."""
    for stop in state.request.sampling.stop:
        for k in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:k]):
                return True
    return False


def build_output(
    engine: Engine,
    state: RequestState,
    *,
    final: bool,
    upto: int | None = None,
    since_tokens: int = 0,
    since_text: int = 0,
    stream: bool = False,
    text: str | None = None,
) -> dict[str, Any]:
    """One response body (non-streaming) or chunk (streaming) for the first ``upto`` output tokens.

    ``since_tokens`` / ``since_text`` > 0 make an incremental chunk: ``output_ids``, ``text`` and the output
    logprob lists hold only what follows them (``input_token_logprobs`` and ``output_token_logprobs_length`` stay
    cumulative, §1.6). ``text`` is ``output_text(...)`` when the caller already has it.
    """
    request = state.request
    upto = len(state.output_ids) if upto is None else upto
    if text is None:
        text = output_text(engine, state, upto, final=final)
    if final and state.waiting_form:
        return _waiting_form_output(engine, state, text, stream=stream)
    meta: dict[str, Any] = {
        "id": state.rid,
        "finish_reason": state.finish_reason if final else None,
        "prompt_tokens": len(state.input_ids),
        "weight_version": engine.weight_version,
        "num_retractions": state.num_retractions,
        "reasoning_tokens": 0,
        "completion_tokens": upto,
        "cached_tokens": 0,
    }
    if request.return_logprob:
        meta.update(_logprob_lists(engine, state, since_tokens, upto))
        meta["output_token_logprobs_length"] = upto
    if final and request.return_routed_experts and engine.config.enable_return_routed_experts:
        start = request.routed_experts_start_len
        if 0 <= start <= len(state.input_ids) and state.output_ids:
            meta["routed_experts"] = encode_routed_experts(
                seed=engine.config.seed,
                tokens=list(state.input_ids) + state.output_ids,
                step_versions=engine.step_versions(state),
                start_len=start,
                num_layers=engine.config.num_layers,
                num_experts=engine.config.num_experts,
                top_k=engine.config.experts_per_token,
            )
    if final:
        meta["e2e_latency"] = round(trio.current_time() - state.created_clock, 6)
        meta["response_sent_to_client_ts"] = time.time()
    body: dict[str, Any] = {
        "text": text[since_text:],
        "output_ids": state.output_ids[since_tokens:upto],
        "meta_info": meta,
    }
    if request.return_prompt_token_ids:
        body["prompt_token_ids"] = list(state.input_ids)
    return body


def _waiting_form_output(engine: Engine, state: RequestState, text: str, *, stream: bool) -> dict[str, Any]:
    """An abort while waiting/retracted (``_handle_abort_req``, §2.2): no prompt/cached tokens, no routing;
    in streaming mode ``output_ids`` is only the last token, even in cumulative mode."""
    meta: dict[str, Any] = {
        "id": state.rid,
        "finish_reason": state.finish_reason,
        "weight_version": engine.weight_version,
        "e2e_latency": round(trio.current_time() - state.created_clock, 6),
    }
    if state.request.return_logprob:
        meta.update(_logprob_lists(engine, state, 0, len(state.output_ids)))
    meta["completion_tokens"] = len(state.output_ids)
    output_ids = state.output_ids[-1:] if stream else list(state.output_ids)
    body: dict[str, Any] = {"text": text, "output_ids": output_ids, "meta_info": meta}
    if state.request.return_prompt_token_ids:
        body["prompt_token_ids"] = list(state.input_ids)
    return body
