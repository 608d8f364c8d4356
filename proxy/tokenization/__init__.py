"""TITO tokenization (see docs/tokenization.md); the model families are in ``proxy/families/`` (docs/families.md).

- :class:`TitoTokenizer` -- a family's tokenizer and chat template (``proxy.families.load_tito_tokenizer`` loads
  the family's for a folder, cached per path): ``encode_full``, ``encode_incremental`` (exact fragment or
  :class:`TitoFailure`), ``decode``, ``render_assistant``.
- :func:`build_last_step` -- the last-step build mode: full re-render with an assistant-only loss mask.
- :func:`audit_drift` -- where and why TITO ids differ from a canonical re-render (diagnostic only).
"""

from proxy.tokenization.drift import DriftKind, DriftReport, audit_drift
from proxy.tokenization.last_step import LastStepError, LastStepSample, TurnGeneration, build_last_step
from proxy.tokenization.messages import MessageError, normalize_message, normalize_messages
from proxy.tokenization.results import IncrementalResult, TitoError, TitoFailure, TitoFailureReason, TitoFragment
from proxy.tokenization.tito import TemplateMismatchError, TitoTokenizer

__all__ = [
    "DriftKind",
    "DriftReport",
    "IncrementalResult",
    "LastStepError",
    "LastStepSample",
    "MessageError",
    "TemplateMismatchError",
    "TitoError",
    "TitoFailure",
    "TitoFailureReason",
    "TitoFragment",
    "TitoTokenizer",
    "TurnGeneration",
    "audit_drift",
    "build_last_step",
    "normalize_message",
    "normalize_messages",
]
