"""Deterministic tool-call ids (spec §10): the same session, step and call index always give the same id.

``call_`` + the first 24 hex digits (96 bits) of a domain-separated SHA-256 of the three values, so a re-run of a
trajectory reproduces its ids, and ids of different steps or sessions do not collide in practice.

A request with ``n > 1`` answers one step with several choices: choice ``i > 0`` adds its index to the hashed key, so
two choices that make the same call still get different ids, while choice 0 keeps the ids an ``n = 1`` request gets
(and an identical retry of the whole request gets identical ids for every choice).
"""

from __future__ import annotations

import hashlib
import json

_DOMAIN = b"dressage-proxy/tool-call-id/v1\x00"


def tool_call_id(session_id: str, step_index: int, call_index: int, choice_index: int = 0) -> str:
    """The id of call ``call_index`` (0-based, in output order) of step ``step_index`` of ``session_id``, in the
    answer's choice ``choice_index`` (0 for every ``n = 1`` request)."""
    parts: list[object] = [session_id, step_index, call_index]
    if choice_index:
        parts.append(choice_index)
    key = json.dumps(parts, ensure_ascii=False, separators=(",", ":"))
    return "call_" + hashlib.sha256(_DOMAIN + key.encode("utf-8", "surrogatepass")).hexdigest()[:24]
