"""Drift audit: where and why a TITO token sequence differs from a canonical re-render of the same conversation.

A diagnostic for metrics and debugging, never on the hot path: it needs a full re-render to compare with, which is
exactly the cost TITO avoids. TITO ids are the truth (they are what the model saw); a divergence tells how far the
template's re-render has moved away from them.

The first differing token is found, then classified by looking at the two texts (as exact bytes) around it:

``bpe_resplit``
    The differing tokens spell the same text: the model (or the junction between prompt and generation) split it
    into other tokens than a whole-text encode does. Example: Qwen3.5 prompt ends ``<think>\\n`` and the model emits
    ``\\n</think>``; the re-render encodes ``<think>\\n\\n</think>`` with one ``\\n\\n`` token.
``reasoning_stripped``
    The texts differ at a think block: one side has ``<think>``/``</think>`` where the other has not, or they
    differ inside a think block or in the whitespace right after a think tag. Both Qwen templates drop the
    reasoning of assistant turns before the last user query; Qwen3 also drops the empty ``<think>`` block of any
    non-final assistant turn without reasoning.
``junction``
    The texts differ at a turn boundary: right after ``<|im_end|>`` (the junction newline), or where one side starts
    a turn (``<|im_start|>``) or ends one. This is the field-notes item 1 failure (a dropped newline).
``other``
    Anything else, including one sequence being a strict prefix of the other away from a boundary.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from proxy.tokenization.tito import TitoTokenizer


class DriftKind(enum.Enum):
    """Classification of the first divergence (see the module docstring)."""

    NONE = "none"
    """The sequences are identical."""
    REASONING_STRIPPED = "reasoning_stripped"
    """The template removed or rewrote a reasoning block."""
    JUNCTION = "junction"
    """The texts differ at a turn boundary."""
    BPE_RESPLIT = "bpe_resplit"
    """Same text, split into different tokens."""
    OTHER = "other"
    """Any other difference."""


@attrs.frozen
class DriftReport:
    """The first divergence between a TITO sequence and a canonical one, and its kind."""

    kind: DriftKind
    first_divergence: int | None
    """Index of the first token that differs (or where the shorter sequence ends); None when identical."""
    byte_divergence: int | None
    """Byte offset of the first difference between the two texts; None when the texts are identical."""
    tito_length: int
    canonical_length: int
    tito_snippet: str
    """TITO text around the divergence (``context`` bytes either side, decoded with replacement)."""
    canonical_snippet: str
    """Canonical text around the divergence."""

    @property
    def drifted(self) -> bool:
        """True unless the sequences are identical."""
        return self.kind is not DriftKind.NONE


def _first_difference(a: Sequence, b: Sequence) -> int | None:
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def _think_related(data: bytes, pos: int, open_: bytes, close: bytes) -> bool:
    """A think tag starts at ``pos``, ``pos`` is inside a think block, or only whitespace follows a think tag."""
    if data.startswith(open_, pos) or data.startswith(close, pos):
        return True
    last_open, last_close = data.rfind(open_, 0, pos), data.rfind(close, 0, pos)
    if last_open > last_close:
        return True
    head = data[:pos].rstrip(b" \t\r\n")
    return head.endswith(close) or head.endswith(open_)


def _junction_related(data: bytes, pos: int, after: tuple[bytes, ...], at: tuple[bytes, ...]) -> bool:
    """``pos`` is right after an end of turn (ChatML: ``<|im_end|>`` with or without its newline; GLM: a role
    token) or where a turn starts or ends (the family's ``boundary_markers``)."""
    head = data[:pos]
    if any(head.endswith(marker) for marker in after):
        return True
    return any(data.startswith(marker, pos) for marker in at)


def audit_drift(
    tito_ids: Sequence[int], canonical_ids: Sequence[int], tokenizer: TitoTokenizer, *, context: int = 48
) -> DriftReport:
    """Compare ``tito_ids`` with ``canonical_ids`` (a full re-render of the same conversation) and classify the first
    divergence. Pure and thread-safe; cost linear in the sequences."""
    index = _first_difference(tito_ids, canonical_ids)
    if index is None:
        return DriftReport(DriftKind.NONE, None, None, len(tito_ids), len(canonical_ids), "", "")
    tito_pieces = [tokenizer.token_bytes(t) for t in tito_ids]
    canon_pieces = [tokenizer.token_bytes(t) for t in canonical_ids]
    tito_text, canon_text = b"".join(tito_pieces), b"".join(canon_pieces)
    byte_div = _first_difference(tito_text, canon_text)
    token_start = sum(len(p) for p in tito_pieces[:index])

    def snippet(data: bytes, at: int) -> str:
        return data[max(0, at - context) : at + context].decode("utf-8", errors="replace")

    at = token_start if byte_div is None else byte_div
    report = attrs.evolve(
        DriftReport(DriftKind.OTHER, index, byte_div, len(tito_ids), len(canonical_ids), "", ""),
        tito_snippet=snippet(tito_text, at),
        canonical_snippet=snippet(canon_text, at),
    )
    both_have_token = index < len(tito_ids) and index < len(canonical_ids)
    if both_have_token:
        span_end = token_start + max(len(tito_pieces[index]), len(canon_pieces[index]))
        if byte_div is None or byte_div >= span_end:
            return attrs.evolve(report, kind=DriftKind.BPE_RESPLIT)
    if byte_div is None:  # same text, one token list is a prefix of the other: cannot happen for real ids
        return report
    # Look where the texts part and where the first differing token starts: two tags can share leading bytes
    # ("<think>" and "<|im_end|>" both start with "<").
    where = (token_start, byte_div)
    open_, close = tokenizer.THINK_OPEN.encode(), tokenizer.THINK_CLOSE.encode()
    if any(_think_related(text, pos, open_, close) for text in (tito_text, canon_text) for pos in where):
        return attrs.evolve(report, kind=DriftKind.REASONING_STRIPPED)
    after, at = tokenizer.boundary_markers()
    if any(_junction_related(text, pos, after, at) for text in (tito_text, canon_text) for pos in where):
        return attrs.evolve(report, kind=DriftKind.JUNCTION)
    return report
