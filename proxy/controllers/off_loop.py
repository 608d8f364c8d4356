"""CPU work that grows with a request's size runs off the event loop: worker threads behind one bounded limiter.

The event loop answers every request of the process (a ``pause_state`` probe, a pause, the tokens of every open
stream); a step that holds it for long holds all of them (issue 15: a 10 MB prompt froze everything for seconds).
The O(request size) steps of the request path therefore run here when their input is large:

- parsing and validating a request body (``json.loads``, the Unicode walk, ``ChatCompletionRequest.from_http``),
  and the idempotency fingerprint of a chat body (``proxy/routes/json_body.py``);
- rendering the chat template and encoding a step's context (``SessionRegistry`` in
  ``proxy/controllers/session_registry.py``), and exporting a long session's segments.

Why threads and not a process pool: the HF tokenizer releases the GIL while it encodes (through ``encode_batch_fast``,
see ``proxy/tokenization/tito.py:TitoTokenizer.encode_text``), and that is where nearly all the time of a large
request goes (about 2.5 s per MB of text here, against ~6 ms per MB for ``json.loads``). Python code in a thread
(the template render, the id conversion in slices) hands the GIL back to the loop every ``sys.getswitchinterval()``
(5 ms); a single C call holds it until it returns wherever it runs (``json.loads`` of 10 MB: ~45 ms; freeing the
tokenizer's result for 2.5M tokens: ~0.9 s). A process pool would move those last ones out of the process, but a
parsed body would have to be unpickled on the loop (about the cost of parsing it), and each worker would hold a
second tokenizer: measured, threads meet the target (docs/benchmarks.md).

**One limiter** (:func:`limiter`, ``OFF_LOOP_THREADS`` threads) bounds the threads every such step may use
together, so a burst of large requests queues instead of starting one thread each (the work would not finish
sooner on a 2-core host, and each would hold its body and ids meanwhile). Small inputs stay inline: a thread hop
costs ~0.3 ms here, more than the work it would move (thresholds measured in docs/benchmarks.md).

Cancellation: a step in a thread runs to its end (trio cannot interrupt a thread); the caller then sees its
cancellation at its next checkpoint, as it would have after the inline call.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import trio

T = TypeVar("T")

#: worker threads the O(size) steps of all requests may use at once: every core but one, which stays the event
#: loop's (measured on 2 cores: with 2 threads the loop competed with them for CPU, p99 4.4x idle; with 1, 2.4x)
OFF_LOOP_THREADS = max(1, (os.cpu_count() or 2) - 1)
#: request bodies up to this many bytes are parsed and validated inline (about 0.5 ms of loop time at most, orjson
#: and the chat validation; the hop to a thread and back costs 0.15-0.4 ms of CPU more at 120-250 KiB: measured in
#: docs/benchmarks.md, "the inline body threshold")
INLINE_BODY_BYTES = 163_840

_LIMITER: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("dressage_off_loop_limiter")


def limiter() -> trio.CapacityLimiter:
    """The run's one limiter of off-loop threads (created on first use: one per ``trio.run``)."""
    try:
        return _LIMITER.get()
    except LookupError:
        created = trio.CapacityLimiter(OFF_LOOP_THREADS)
        _LIMITER.set(created)
        return created


async def run_off_loop(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` in a worker thread behind :func:`limiter`; its result or its exception."""
    return await trio.to_thread.run_sync(function, *args, limiter=limiter())


def runs_inline(size: int, inline_max: int) -> bool:
    """Whether :func:`run_sized` runs a step of ``size`` inline (too small to be worth a thread)."""
    return size <= inline_max


async def run_sized(size: int, inline_max: int, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` inline when ``size <= inline_max`` (too small to be worth a thread), else off the loop."""
    if runs_inline(size, inline_max):
        return function(*args)
    return await run_off_loop(function, *args)


__all__ = ["INLINE_BODY_BYTES", "OFF_LOOP_THREADS", "limiter", "run_off_loop", "run_sized", "runs_inline"]
