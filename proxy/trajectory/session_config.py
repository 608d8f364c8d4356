"""The settings every session of a registry shares (``SessionConfig``) and the step limit's environment variable."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import attrs

from proxy.trajectory.export import ExportOptions

#: the environment variable read when no max-steps value is configured (spec 5.5)
MAX_STEPS_ENV = "DRESSAGE_PROXY_MAX_STEPS_PER_SESSION"


def max_steps_from_env(environ: Mapping[str, str] | None = None) -> int | None:
    """``DRESSAGE_PROXY_MAX_STEPS_PER_SESSION`` as a positive int; unset, empty or 0 means unlimited."""
    raw = (os.environ if environ is None else environ).get(MAX_STEPS_ENV, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{MAX_STEPS_ENV}={raw!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"{MAX_STEPS_ENV}={raw!r} is negative")
    return value or None


@attrs.frozen
class SessionConfig:
    """Settings of every session of a registry (the CLI wiring of the flags is a later issue)."""

    # Steps a session may hold (generations in flight count as reserved); None: unlimited. Read from
    # DRESSAGE_PROXY_MAX_STEPS_PER_SESSION when not given.
    max_steps_per_session: int | None = attrs.field(factory=max_steps_from_env)
    # The export policy: build mode, export-all-checkpoints, per-token versions, stale-version masking.
    export: ExportOptions = ExportOptions()
    # --ignore-cch-for-prefix-hash: blank cch=... billing hashes in message keys (matching only).
    ignore_cch_for_prefix_hash: bool = False
    # Chat-template kwargs applied under every request's own (they are part of the context key).
    default_template_kwargs: Mapping[str, Any] = attrs.field(factory=dict)
    # Encodes of requests whose text exceeds this many characters run off the event loop
    # (proxy/controllers/off_loop.py): from about 4k characters a worker thread is faster than inline too.
    thread_encode_chars: int = 4_096
    # Exports of sessions holding more tokens than this run in a worker thread.
    thread_export_tokens: int = 65_536


__all__ = ["MAX_STEPS_ENV", "SessionConfig", "max_steps_from_env"]
