"""Storing a full encode without a second copy of the path the session already holds (issue 21 item 5).

A session starts a new segment with a full encode of the whole conversation when it cannot continue a checkpoint
(spec 5.4: an answer that did not end its turn, a TITO failure, a drifted template). That encode repeats, token for
token, most of the path the trie already holds on the prompt's side: every earlier turn, up to where the template
renders something the path does not have (the end-of-turn token after an answer cut short by ``max_tokens``, an
earlier turn's reasoning a template drops...). :func:`stored_context` finds how many of the ids are that path's
and stores the encode as a :class:`~proxy.trajectory.tokens.PrefixedContext` (the path's step, the count, the rest),
so a session whose answers keep hitting ``max_tokens`` holds O(context) ids, not O(turns x context) (one whole copy
every :data:`MAX_CHAIN` such turns, which bounds the work of reading them back).

Exact by construction: the count is where the two id sequences first differ (numpy compares them in C), and the ids
read back (``TokenSpan.context``, ``path_ids``) are the path's first ``count`` ids followed by the stored rest.
"""

from __future__ import annotations

from array import array

import numpy

from proxy.trajectory.tokens import PrefixedContext, Step, path, path_ids

#: the fewest shared ids worth naming: a PrefixedContext is a 64-byte object, 16 ids' worth, so it must save more
MIN_SHARED_IDS = 64
#: the longest chain of names (a named path whose root names another path...): reading a PrefixedContext's ids walks
#: its chain, ~1 us a link (timeit) on every request that continues it, so past this many links a full encode is
#: stored whole (one copy every MAX_CHAIN cut turns, in a session whose answers keep hitting ``max_tokens``)
MAX_CHAIN = 16


def shared_length(ids: bytes, prior: bytes | memoryview | array) -> int:
    """How many leading ids (native int32) ``ids`` and ``prior`` (any buffer of them) have in common."""
    count = min(len(ids), memoryview(prior).nbytes) >> 2
    if not count:
        return 0
    left = numpy.frombuffer(ids, dtype=numpy.int32, count=count)
    right = numpy.frombuffer(prior, dtype=numpy.int32, count=count)
    differ = numpy.flatnonzero(left != right)
    return int(differ[0]) if differ.size else count


def chain_length(step: Step) -> int:
    """How many PrefixedContexts reading ``step``'s path goes through (0: its root holds its ids)."""
    links = 0
    root = path(step)[0].stored_context
    while type(root) is PrefixedContext:
        links += 1
        root = path(root.step)[0].stored_context
    return links


def stored_context(ids: bytes, held: Step | None) -> bytes | PrefixedContext:
    """``ids`` (native int32) as a span stores them: a :class:`PrefixedContext` naming ``held`` (a step whose path
    the session holds) when at least :data:`MIN_SHARED_IDS` of them begin that path, else ``ids`` themselves."""
    if held is None or len(ids) >> 2 < MIN_SHARED_IDS or chain_length(held) >= MAX_CHAIN:
        return ids
    length = shared_length(ids, path_ids(held))
    if length < MIN_SHARED_IDS:
        return ids
    return PrefixedContext(held, length, ids[4 * length:])


__all__ = ["MAX_CHAIN", "MIN_SHARED_IDS", "chain_length", "shared_length", "stored_context"]
