"""Deterministic tool-call ids (spec §10): the same session, step and call index always give the same id.

``call_`` + the first 24 hex digits (96 bits) of a domain-separated SHA-256 of the three values, so a re-run of a
trajectory reproduces its ids, and ids of different steps or sessions do not collide in practice.
"""

from __future__ import annotations

import hashlib
import json

_DOMAIN = b"dressage-proxy/tool-call-id/v1\x00"


def tool_call_id(session_id: str, step_index: int, call_index: int) -> str:
    """The id of call ``call_index`` (0-based, in output order) of step ``step_index`` of ``session_id``."""
    key = json.dumps([session_id, step_index, call_index], ensure_ascii=False, separators=(",", ":"))
    return "call_" + hashlib.sha256(_DOMAIN + key.encode("utf-8", "surrogatepass")).hexdigest()[:24]
