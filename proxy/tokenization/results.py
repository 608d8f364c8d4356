"""Values returned by the TITO tokenizers: an exact fragment, or a failure with its reason.

An incremental encode never raises for bad input: it returns :class:`TitoFragment` or :class:`TitoFailure`. The
caller flags the step ``concat_incremental_tokenization_failed``, records ``failure.reason`` as the segment
boundary reason and starts a new segment with a full encode (spec 5.4). A full encode has no fallback, so it raises
:class:`TitoError` (carrying the same :class:`TitoFailure`), which the API layer turns into a 400.
"""

from __future__ import annotations

import enum

import attrs


class TitoFailureReason(enum.Enum):
    """Why an encode could not produce exact tokens."""

    NOT_AT_TURN_BOUNDARY = "not_at_turn_boundary"
    """The checkpoint is empty, does not end with the end-of-turn token (length exhaustion, another stop token),
    or its messages do not end with the assistant turn that produced it."""
    EMPTY_FRAGMENT = "empty_fragment"
    """There is nothing to append: no new messages."""
    INVALID_MESSAGE = "invalid_message"
    """A message cannot be template input (unknown role, non-text content, tool-call arguments not a JSON object)."""
    TEMPLATE_ERROR = "template_error"
    """The model's chat template raised (for example Qwen3.5: a system message after the first message)."""
    JUNCTION_MISMATCH = "junction_mismatch"
    """The rendered fragment breaks the family's junction rules (no newline after the end-of-turn token, no
    ``<|im_start|>`` next, not ending with the expected generation prompt, or its tokens do not split there)."""
    LAST_STEP_MODE = "last_step_mode"
    """The model family has no pinned junction rules (an unrecognised chat template, ``proxy/families/``): every
    step is a full render of the template instead of an incremental fragment."""


@attrs.frozen
class TitoFailure:
    """A failed encode: the reason (for metrics and boundary records) and a human-readable detail."""

    reason: TitoFailureReason
    detail: str

    @property
    def ok(self) -> bool:
        """Always False; lets callers test ``result.ok`` on either result type."""
        return False


@attrs.frozen
class TitoFragment:
    """The exact tokens to append after a checkpoint that ends with the end-of-turn token.

    ``text`` starts with the junction newline and ends with the generation prompt (thinking prefix included);
    ``ids`` is its tokenization, which equals the tokens the template's full render has at that place whenever the
    template renders the history unchanged.
    """

    ids: tuple[int, ...]
    text: str

    @property
    def ok(self) -> bool:
        """Always True; lets callers test ``result.ok`` on either result type."""
        return True


#: what :meth:`TitoTokenizer.encode_incremental` returns
IncrementalResult = TitoFragment | TitoFailure


class TitoError(ValueError):
    """A full encode or render failed; ``failure`` says why (same reasons as incremental failures)."""

    def __init__(self, failure: TitoFailure):
        super().__init__(f"{failure.reason.value}: {failure.detail}")
        self.failure = failure

    @classmethod
    def of(cls, reason: TitoFailureReason, detail: str) -> TitoError:
        """Build the error and its failure in one call."""
        return cls(TitoFailure(reason, detail))


class LastStepError(ValueError):
    """The final message list cannot be turned into a masked sample (the text says why)."""
