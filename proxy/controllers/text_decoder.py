"""Generated token ids -> the answer's text, incrementally, exactly as SGLang's final ``text`` would read.

Sans-IO. One decoder per generation (a restart from scratch makes a new one; a continuation keeps it):

- bytes come from the tokenizer's exact per-token bytes, through an incremental UTF-8 decoder, so a character
  split across tokens is released whole, once its last byte arrives;
- end tokens (``<|im_end|>``, ``<|endoftext|>``) are not text: SGLang includes the stop token in ``output_ids``
  but not in ``text``. Other special tokens (``<think>``, ``<tool_call>``) are text: the parsers read them;
- stop strings (the request's ``stop``): text that could still become a stop string is held back, and when the
  generation finishes on a stop string the text is cut where it begins (SGLang trims the matched stop from
  ``text``), so a streamed answer never shows a stop string or a piece of one.

``feed(token_id)`` returns the text that is now certain; ``finish(matched_stop)`` the rest; ``text`` is everything
released so far (after ``finish``: the whole answer).
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Sequence
from typing import Any


class TextDecoder:
    """Incremental detokenization with stop-string hold-back (see the module docstring)."""

    def __init__(self, tokenizer: Any, *, end_ids: Iterable[int], stop: Sequence[str] | None = None) -> None:
        self._token_bytes = tokenizer.token_bytes
        self._end_ids = frozenset(end_ids)
        self._stop = tuple(s for s in stop or () if s)
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        # Decoded but not released: it could still be (the start of) a stop string.
        self._held = ""
        # A complete stop string was seen: everything from it on stays held (generation ends there).
        self._stopped = False
        self._released: list[str] = []

    @property
    def text(self) -> str:
        """Everything released so far."""
        return "".join(self._released)

    def feed(self, token_id: int) -> str:
        """One generated token; returns the text it makes certain (often ``""`` or several characters)."""
        if token_id in self._end_ids:
            return ""
        piece = self._utf8.decode(self._token_bytes(token_id))
        return self._release(piece)

    def finish(self, matched_stop: Any = None) -> str:
        """The end of the generation; ``matched_stop`` is SGLang's ``FinishStop.matched`` when it stopped on a stop
        string (cut there), anything else releases what was held."""
        tail = self._held + self._utf8.decode(b"", final=True)
        self._held = ""
        if isinstance(matched_stop, str) and matched_stop:
            cut = tail.find(matched_stop)
            if cut >= 0:
                tail = tail[:cut]
        elif self._stopped:
            # Stopped on a stop string that SGLang did not report (length hit on the same token): cut anyway.
            cut = _first_stop(tail, self._stop)
            if cut is not None:
                tail = tail[:cut]
        if tail:
            self._released.append(tail)
        return tail

    def _release(self, piece: str) -> str:
        if not self._stop:
            if piece:
                self._released.append(piece)
            return piece
        pending = self._held + piece
        if self._stopped:
            self._held = pending
            return ""
        cut = _first_stop(pending, self._stop)
        if cut is not None:
            self._stopped = True
            out, self._held = pending[:cut], pending[cut:]
        else:
            keep = _longest_stop_prefix_suffix(pending, self._stop)
            out, self._held = pending[: len(pending) - keep], pending[len(pending) - keep :]
        if out:
            self._released.append(out)
        return out


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    """Where the earliest complete stop string starts in ``text``."""
    found = [index for index in (text.find(stop) for stop in stops) if index >= 0]
    return min(found) if found else None


def _longest_stop_prefix_suffix(text: str, stops: Sequence[str]) -> int:
    """The length of the longest suffix of ``text`` that is a proper prefix of some stop string."""
    best = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:size]):
                best = size
                break
    return best


__all__ = ["TextDecoder"]
