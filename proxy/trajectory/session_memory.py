"""Approximate bytes a session holds: what ``/health`` and ``/trajectory/stats`` report and the memory budget
(``--memory-budget``) is compared with.

Counted when a step commits, so reporting costs nothing per request (no walk of the trie):

- the step's token arrays, exactly: context and generated ids (4 bytes each; of a full encode that names the
  session's path, ``prefix_share.py``, only the ids it stores after it), the context mask (1 byte per token when the
  client sent one), the logprobs (4 bytes each), the routed-expert rows (their raw bytes);
- the messages the trie keeps for it, estimated from the tokens they were encoded to or generated as
  (``TEXT_BYTES_PER_TOKEN`` bytes of text per token): their exact JSON size would cost a serialization of every
  request and answer on the commit path, under the session's lock.

Not counted: Python object overheads, pending generations (held for the duration of one request), siblings' shared
encodings (counted once per committing step, so best-of-N over one prompt counts the prompt N times: an
over-estimate, which is the safe side of a budget). A session frees everything at finalize (after the export) or
abort, and then holds ``TOMBSTONE_BYTES``: its machine, lock and ids, kept until the tombstone expires
(``--tombstone-ttl``). The figures are an estimate, not an accounting: ``bench/soak.py`` compares them with RSS.
"""

from __future__ import annotations

from proxy.trajectory.tokens import TokenSpan

#: bytes of message text per context token, the usual order for BPE tokenizers on English and code
TEXT_BYTES_PER_TOKEN = 4
#: what a finalized or aborted session keeps until its tombstone expires (measured with tracemalloc: about 2 KB
#: for the registry entry, the session core, its machine, lock and event)
TOMBSTONE_BYTES = 2048


def span_bytes(span: TokenSpan) -> int:
    """The bytes of a committed span's tokens (ids, mask, logprobs, routed rows)."""
    return span.nbytes()


def step_bytes(span: TokenSpan) -> int:
    """What one committed step adds to its session: its tokens and the messages the trie keeps for it."""
    return span_bytes(span) + TEXT_BYTES_PER_TOKEN * (span.context_count + span.generated_count)


__all__ = ["TEXT_BYTES_PER_TOKEN", "TOMBSTONE_BYTES", "span_bytes", "step_bytes"]
