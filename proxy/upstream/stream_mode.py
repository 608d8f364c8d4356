"""Which streaming mode the upstream speaks: SGLang's cumulative chunks (its default) or incremental ones
(``--incremental-streaming-output``), decided once at start (docs/upstream.md, "Streaming modes").

The decoder cannot tell the modes apart from the first chunk (both carry the output so far), so the mode is a
setting: ``--upstream-stream-mode auto`` reads ``incremental_streaming_output`` from each worker's
``/server_info`` (``/get_server_info`` where that is 404); ``cumulative`` / ``incremental`` skip the question.
Rules of ``auto``:

- the workers are asked, concurrently, each for at most 10 s (every one; the router when there are none: a gateway
  such as ``smg`` relays its *first* worker's answer);
- every worker that answered says the same: that mode (workers that did not answer are named in the log);
- they disagree: no single setting decodes both, so the start fails with :class:`MixedStreamModes` naming them
  (make them agree, or force a mode and let the other workers' streams fail loudly);
- nobody answered (or no answer has the field): cumulative, SGLang's default.

With a cumulative upstream (detected, assumed or forced) one warning says how to get O(new tokens) streams. A
chunk that contradicts the mode later (a worker restarted with other flags) is an ``UpstreamProtocolError`` from the
decoder, never a silent mis-decode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs
import trio

from proxy.upstream.errors import UpstreamError

StreamMode = Literal["auto", "cumulative", "incremental"]
STREAM_MODES: tuple[StreamMode, ...] = ("auto", "cumulative", "incremental")
SGLANG_FLAG = "--incremental-streaming-output"


class MixedStreamModes(Exception):
    """``auto`` found workers in both modes: the proxy cannot decode both with one setting."""


@attrs.frozen
class StreamModeDecision:
    """What ``decide_stream_mode`` settled on, and why."""

    incremental: bool
    #: ``flag`` (forced), ``detected`` (every answer agreed) or ``assumed`` (nobody answered)
    source: Literal["flag", "detected", "assumed"]
    #: (url, the worker's ``incremental_streaming_output``: True/False, None when it did not say)
    reports: tuple[tuple[str, bool | None], ...] = ()

    @property
    def mode(self) -> StreamMode:
        return "incremental" if self.incremental else "cumulative"

    def warning(self) -> str | None:
        """The one start-up warning: the upstream streams cumulative chunks (or could not say)."""
        if self.incremental:
            return None
        silent = [url for url, value in self.reports if value is None]
        why = {
            "flag": "--upstream-stream-mode cumulative",
            "detected": "the upstream reports incremental_streaming_output=false",
            "assumed": "could not read incremental_streaming_output from " + ", ".join(silent or ["the upstream"])
            + " (/server_info); assuming SGLang's default",
        }[self.source]
        return (f"upstream streams cumulative chunks ({why}): every chunk repeats the whole answer so far, so a "
                f"stream costs the proxy O(n^2) in its length; start SGLang with {SGLANG_FLAG} (the proxy detects "
                "it, or pass --upstream-stream-mode incremental)")

    def note(self) -> str | None:
        """Workers that did not answer while others did (logged at info level)."""
        silent = [url for url, value in self.reports if value is None]
        if self.source == "detected" and silent:
            return f"stream mode {self.mode} from the workers that answered; no answer from {', '.join(silent)}"
        return None


def reported_mode(server_info: Mapping[str, Any]) -> bool | None:
    """A ``/server_info`` body's ``incremental_streaming_output`` (the deprecated ``stream_output`` where only
    that is present); None when neither is a boolean."""
    for key in ("incremental_streaming_output", "stream_output"):
        value = server_info.get(key)
        if isinstance(value, bool):
            return value
    return None


async def decide_stream_mode(
    client: Any, requested: StreamMode = "auto", *, timeout: float = 10.0
) -> StreamModeDecision:
    """The mode to decode ``client``'s streams with (``client`` is an ``SGLangClient``); raises
    :class:`MixedStreamModes` when ``auto`` finds workers in both modes. A worker silent for ``timeout`` seconds
    counts as not answering (the start is not held for long by one stuck worker)."""
    if requested not in STREAM_MODES:
        raise ValueError(f"stream mode must be one of {STREAM_MODES}, got {requested!r}")
    if requested != "auto":
        return StreamModeDecision(requested == "incremental", "flag")
    urls: Sequence[str] = client.worker_urls or (client.router_url,)
    reports: list[bool | None] = [None] * len(urls)

    async def ask(index: int, url: str) -> None:
        with trio.move_on_after(timeout):
            try:
                reports[index] = reported_mode(await client.server_info(url))
            except UpstreamError:
                pass  # unreachable or no such endpoint: this worker does not say

    async with trio.open_nursery() as nursery:
        for index, url in enumerate(urls):
            nursery.start_soon(ask, index, url)
    pairs = tuple(zip(urls, reports, strict=True))
    said = {value for value in reports if value is not None}
    if len(said) > 1:
        modes = "; ".join(f"{url}: {'incremental' if value else 'cumulative'}" for url, value in pairs
                          if value is not None)
        raise MixedStreamModes(
            f"the SGLang workers stream in different modes ({modes}); start them all with or all without "
            f"{SGLANG_FLAG}, or force one with --upstream-stream-mode (the other workers' streams then fail)")
    if not said:
        return StreamModeDecision(False, "assumed", pairs)
    return StreamModeDecision(said.pop(), "detected", pairs)


__all__ = [
    "STREAM_MODES", "MixedStreamModes", "StreamMode", "StreamModeDecision", "decide_stream_mode", "reported_mode",
]
