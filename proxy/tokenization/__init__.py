"""TITO tokenization for the Qwen3 and Qwen3.5 families (see docs/tokenization.md).

- :func:`load_tito_tokenizer` -- the family's :class:`TitoTokenizer` for a tokenizer folder (cached per path):
  ``encode_full``, ``encode_incremental`` (exact fragment or :class:`TitoFailure`), ``decode``,
  ``render_assistant``.
- :func:`build_last_step` -- the last-step build mode: full re-render with an assistant-only loss mask.
- :func:`audit_drift` -- where and why TITO ids differ from a canonical re-render (diagnostic only).
"""

from proxy.tokenization.drift import DriftKind, DriftReport, audit_drift
from proxy.tokenization.families import (
    TITO_FAMILIES,
    Qwen3TitoTokenizer,
    Qwen35TitoTokenizer,
    family_name,
    load_tito_tokenizer,
)
from proxy.tokenization.last_step import LastStepError, LastStepSample, TurnGeneration, build_last_step
from proxy.tokenization.messages import MessageError, normalize_message, normalize_messages
from proxy.tokenization.results import IncrementalResult, TitoError, TitoFailure, TitoFailureReason, TitoFragment
from proxy.tokenization.tito import TemplateMismatchError, TitoTokenizer

__all__ = [
    "TITO_FAMILIES",
    "DriftKind",
    "DriftReport",
    "IncrementalResult",
    "LastStepError",
    "LastStepSample",
    "MessageError",
    "Qwen35TitoTokenizer",
    "Qwen3TitoTokenizer",
    "TemplateMismatchError",
    "TitoError",
    "TitoFailure",
    "TitoFailureReason",
    "TitoFragment",
    "TitoTokenizer",
    "TurnGeneration",
    "audit_drift",
    "build_last_step",
    "family_name",
    "load_tito_tokenizer",
    "normalize_message",
    "normalize_messages",
]
