"""The text of one token id, for the viewer's token strip and its tooltip.

Each id is decoded on its own from the exact bytes it stands for (``TitoTokenizer.token_bytes``): a token that
holds part of a UTF-8 character shows its bytes as ``\\xNN`` escapes instead of a replacement character, so what
the page shows is what the model saw. Texts are cached per id (a vocabulary is bounded; sessions repeat tokens).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs


@attrs.define(eq=False)
class TokenTexts:
    """Token id -> text, through a TITO tokenizer (None: no tokenizer, every text is empty)."""

    tokenizer: Any = None
    _cache: dict[int, str] = attrs.field(factory=dict, init=False)

    @property
    def available(self) -> bool:
        return self.tokenizer is not None

    def text(self, token_id: int) -> str:
        cached = self._cache.get(token_id)
        if cached is not None:
            return cached
        if self.tokenizer is None:
            return ""
        try:
            text = self.tokenizer.token_bytes(int(token_id)).decode("utf-8", errors="backslashreplace")
        except (ValueError, KeyError, OverflowError):
            text = ""  # an id outside the vocabulary (a file from another model): the page shows the id alone
        self._cache[token_id] = text
        return text

    def texts(self, ids: Iterable[int]) -> list[str]:
        return [self.text(token_id) for token_id in ids]


__all__ = ["TokenTexts"]
