"""Configured faults: an HTTP error instead of an answer, or a built ``/generate`` chunk or body broken the way its
script entry's ``protocol_fault`` says.

:class:`InjectedHTTPError` is raised by the scheduler when ``fault_error_every`` or a script entry's
``error_status`` selects a request; the app answers it with that status.

A protocol fault (:func:`break_output`) is applied last, to what ``responses.build_output`` built, so the engine's
own state (the tokens it generated, its request log, script resumption) stays faithful and only the wire carries
the fault. A fault hits every chunk that carries output token ``fault_after`` or a later one (in cumulative mode
every chunk from the one that first carries it; in incremental mode the chunks whose delta holds it or follows
it); the tokens before it arrive intact. The names and what each one does are :data:`~engine.script.PROTOCOL_FAULTS`.
"""

from __future__ import annotations

import json
from typing import Any

from .request_state import RequestState


class InjectedHTTPError(Exception):
    """A configured fault: answer this request with an HTTP error status instead of generating."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def break_output(vocab_size: int, state: RequestState, body: dict[str, Any], *, offset: int, final: bool) -> dict | bytes:
    """``body`` as the request's protocol fault makes it: the (mutated) dict, or raw bytes that are not JSON.

    ``offset`` is the output position of ``body["output_ids"][0]`` (0 for a cumulative chunk or a whole body).
    """
    entry = state.plan.entry if state.plan is not None else None
    if entry is None or entry.protocol_fault is None:
        return body
    kind, at = entry.protocol_fault, entry.fault_after
    meta = body.get("meta_info")
    if kind == "bad_finish_reason":
        if final and isinstance(meta, dict):
            meta["finish_reason"] = {"type": "exploded", "message": "scripted protocol fault"}
        return body
    ids = body.get("output_ids") or []
    if offset + len(ids) <= at:
        return body  # the chunk ends before the faulty position
    triples = meta.get("output_token_logprobs") if isinstance(meta, dict) else None
    index = at - offset  # where the faulty token is in this chunk (outside it: an earlier chunk carried it)
    here = 0 <= index < len(ids)
    if kind in ("token_out_of_vocab", "negative_token_id"):
        if here:
            bad = vocab_size if kind == "token_out_of_vocab" else -1
            ids[index] = bad
            if triples is not None and index < len(triples):
                triples[index] = [triples[index][0], bad, None]  # the id is the only fault
    elif kind == "logprobs_mismatch":
        if here and triples is not None and index < len(triples):
            triples[index] = [triples[index][0], (ids[index] + 1) % vocab_size, None]
    elif kind == "logprobs_short":
        if triples:
            del triples[-1]
    elif kind == "no_output_ids":
        body.pop("output_ids", None)
    elif kind == "no_meta_info":
        body.pop("meta_info", None)
    elif kind == "not_json":
        text = json.dumps(body, separators=(",", ":"))
        return text[: len(text) // 2].encode()  # a proper prefix of a JSON object is never JSON
    else:  # pragma: no cover - ScriptEntry.from_json accepts only the known names
        raise ValueError(f"unknown protocol fault {kind!r}")
    return body


__all__ = ["break_output"]
