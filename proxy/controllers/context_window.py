"""The model's context window, known by default (issue 14, items 1-2).

Every upstream request carries an explicit ``max_new_tokens`` (``context_budget``): a gateway in between (the SGLang
Model Gateway ``smg``) drops ``null`` fields, and SGLang's default is 128 tokens, so ``null`` silently cut every
answer of an agent that sets no ``max_tokens``. An explicit number needs the window, so the proxy knows it:

1. ``--context-window`` when given (the operator knows best);
2. else what the upstream reports (``SGLangClient.context_length``: ``/v1/models``' ``max_model_len``, then
   ``/model_info``, then ``/server_info``), asked at start-up and, while unknown, again by the next request when the
   upstream could not be reached (an upstream that was down at start-up is asked once it is back), at most every
   :data:`RETRY_SECONDS` when it answered without saying;
3. else the tokenizer's ``model_max_length`` (``tokenizer_config.json``), with a warning: the model's own limit,
   which a server may lower but never raise.

The embedded engine reports its own (``--context-length``) through the same endpoints.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import attrs
import trio

from proxy.upstream.errors import UpstreamError

log = logging.getLogger("dressage_proxy.context_window")

#: how long a request waits for the upstream's answer about the window
ASK_TIMEOUT = 2.0
#: how often an upstream that answers without a window is asked again
RETRY_SECONDS = 60.0
#: the window when neither the operator, the upstream nor the tokenizer says (SGLang's common default)
LAST_RESORT = 32768


@attrs.define(eq=False)
class ContextWindow:
    """The context window in tokens (module docstring); ``await tokens()`` always answers a number."""

    upstream: Any  # proxy.upstream.client.SGLangClient
    configured: int | None = None
    tokenizer_path: Path | None = None
    _reported: int | None = attrs.field(default=None, init=False)
    _asked_at: float | None = attrs.field(default=None, init=False)
    _warned: bool = attrs.field(default=False, init=False)

    @property
    def source(self) -> str:
        """Where the window comes from now: ``configured``, ``upstream`` or ``tokenizer``."""
        if self.configured is not None:
            return "configured"
        return "upstream" if self._reported is not None else "tokenizer"

    async def refresh(self) -> int | None:
        """Ask the upstream now (bounded); the reported window, or None when it does not say."""
        with trio.move_on_after(ASK_TIMEOUT):
            try:
                reported = await self.upstream.context_length()
            except UpstreamError as exc:
                # Unreachable: the next request asks again (its own upstream call would fail anyway).
                log.info("context window: the upstream cannot be reached yet (%s)", exc)
                return self._reported
            # It answered, with or without a window: ask again only after RETRY_SECONDS.
            self._asked_at = trio.current_time()
            if reported is not None and reported != self._reported:
                log.info("context window: %d tokens, as the upstream reports", reported,
                         extra={"context_window": reported})
                self._reported = reported
        return self._reported

    async def tokens(self) -> int:
        """The window for a request now."""
        if self.configured is not None:
            return self.configured
        if self._reported is None and (
            self._asked_at is None or trio.current_time() - self._asked_at >= RETRY_SECONDS
        ):
            await self.refresh()
        if self._reported is not None:
            return self._reported
        fallback = _tokenizer_limit(self.tokenizer_path) or LAST_RESORT
        if not self._warned:
            self._warned = True
            log.warning("context window: the upstream does not report one; using %d tokens (the tokenizer's "
                        "model_max_length, else %d); set --context-window to be sure", fallback, LAST_RESORT,
                        extra={"context_window": fallback})
        return fallback

    def report(self) -> dict[str, Any]:
        """For /health: the window known now and where it comes from (None while unknown)."""
        known = self.configured if self.configured is not None else self._reported
        return {"tokens": known, "source": self.source if known is not None else None}


def _tokenizer_limit(path: Path | None) -> int | None:
    """``model_max_length`` of the tokenizer folder's ``tokenizer_config.json`` (None when absent or absurd)."""
    if path is None:
        return None
    try:
        value = json.loads((Path(path) / "tokenizer_config.json").read_text()).get("model_max_length")
    except (OSError, ValueError, AttributeError):
        return None
    # transformers writes 1e30 when a model sets no limit.
    return value if isinstance(value, int) and 0 < value < 10**8 else None


__all__ = ["ContextWindow"]
