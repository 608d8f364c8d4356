"""Sans-IO decoding of SGLang's ``/generate`` stream: bytes -> SSE payloads -> chunks -> token events.

Theory of operation
-------------------
SGLang streams ``data: <json>\\n\\n`` events ending with ``data: [DONE]\\n\\n`` (sglang-protocol.md §1.6).
:class:`SSEParser` turns bytes into payload strings; :class:`ChunkDecoder` turns payloads (or already parsed
chunk dicts) into :class:`~proxy.upstream.events.Token` events, one per new output token, followed by one
:class:`~proxy.upstream.events.Finished`. Nothing here does I/O, so every rule is unit- and property-tested.

The decoder keeps its own accumulation (ids, logprobs, per-token weight versions); chunks only ever *add* to
it. In the default **cumulative** mode every chunk repeats the whole output so far and the server may coalesce,
so a chunk can bring several new tokens; the new ones are ``output_ids[len(received):]``. In **incremental**
mode (server flag ``--incremental-streaming-output``) each chunk carries only its new tokens. The mode is a
server setting, so the caller must tell the decoder which one to expect.

The one exception to "a chunk's ids extend what was received" is the **waiting-queue abort quirk** (§2.2): a
request aborted while queued or retracted ends with a chunk whose ``finish_reason`` is an abort, which lacks
``prompt_tokens``, whose ``completion_tokens`` counts the whole output, and whose streamed ``output_ids`` is only
``[last token]`` in either mode (its logprob lists hold the whole output so far). The decoder recognises it by
"abort and no prompt_tokens" and then takes the tokens it has not seen yet from, in order of preference:
``output_ids`` if it is complete (non-streaming), the logprob triples if they are complete, the single id if
exactly one token is missing; otherwise it adds nothing. It never shrinks or duplicates what it already has.

Invariants (checked, a violation raises ``UpstreamProtocolError``): every chunk is a JSON object with a
``meta_info`` object and an ``output_ids`` list; token events have consecutive indices from 0; every id is an
integer inside the vocabulary (``0 <= id < vocab_size``, when the caller gives the tokenizer's size: an id the
tokenizer cannot decode is a broken answer, never a token to train on); a cumulative chunk never has fewer ids than
already received (quirk aside) and agrees with the last received id; where logprobs are present there is one
triple per id, its id matches and its value is a number (or null).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.upstream import wire_json
from proxy.upstream.errors import UpstreamProtocolError, UpstreamStreamCut, error_from_chunk
from proxy.upstream.events import (
    Event,
    FinishAbort,
    Finished,
    FinishReason,
    Partial,
    RoutedExperts,
    Token,
    parse_finish_reason,
)

DONE = "[DONE]"


class SSEParser:
    """Server-sent-events framing: feed bytes, get the ``data`` payload of every complete event.

    Lines end with LF or CRLF; several ``data:`` lines of one event are joined with LF; comments and other
    fields are ignored; an event not terminated by a blank line at EOF is dropped (as the SSE spec says).
    """

    __slots__ = ("_buffer", "_scanned", "_data")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._scanned = 0  # bytes of _buffer known to contain no LF: large chunks are scanned once
        self._data: list[str] = []

    def feed(self, data: bytes) -> list[str]:
        buffer = self._buffer
        buffer += data
        payloads: list[str] = []
        start = 0
        search = self._scanned
        while True:
            end = buffer.find(b"\n", search)
            if end < 0:
                break
            line = bytes(buffer[start:end])
            start = search = end + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    payloads.append("\n".join(self._data))
                    self._data = []
                continue
            if line.startswith(b":"):
                continue
            name, _, value = line.partition(b":")
            if name != b"data":
                continue
            if value.startswith(b" "):
                value = value[1:]
            try:
                self._data.append(value.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise UpstreamProtocolError(f"SSE line is not UTF-8: {exc}") from None
        del buffer[:start]
        self._scanned = len(buffer)
        return payloads

    @property
    def pending_bytes(self) -> int:
        """Bytes of an unterminated line still buffered."""
        return len(self._buffer)


class ChunkDecoder:
    """Feed SGLang ``/generate`` chunks (streamed or the one non-streaming body), get token events.

    ``feed_payload`` takes an SSE payload string (JSON or ``[DONE]``), ``feed_chunk`` a parsed dict, ``feed_done``
    the ``[DONE]`` marker and ``feed_eof`` the end of the byte stream. Errors are raised as ``UpstreamError``
    subclasses carrying :meth:`partial`. After a raise the decoder must not be fed again.
    """

    def __init__(
        self,
        *,
        rid: str | None = None,
        incremental: bool = False,
        routed_experts_start_len: int | None = None,
        url: str | None = None,
        vocab_size: int | None = None,
    ) -> None:
        self.rid = rid
        self.incremental = incremental
        self.routed_experts_start_len = routed_experts_start_len or 0
        self.url = url
        self.vocab_size = vocab_size
        """Token ids must be below it (None: any non-negative id)."""
        self._ids: list[int] = []
        self._logprobs: list[float | None] = []
        self._versions: list[str | None] = []
        self._tops: list[tuple[tuple[int, float], ...]] = []
        # Incremental text deltas are kept as parts and joined once at the end: appending to one string per chunk
        # would copy the answer so far every time (O(n^2) in its length).
        self._text_parts: list[str] = []
        self.result: Finished | None = None
        """The final event once a chunk with a finish reason arrived."""
        self.done = False
        """True once ``[DONE]`` was fed."""

    # -- queries ---------------------------------------------------------------------------------------------

    @property
    def num_tokens(self) -> int:
        return len(self._ids)

    def partial(self) -> Partial:
        """Everything received so far (for errors raised mid-stream)."""
        return Partial(self.rid, tuple(self._ids), tuple(self._logprobs), tuple(self._versions))

    # -- inputs ----------------------------------------------------------------------------------------------

    def feed_payload(self, payload: str) -> list[Event]:
        if payload == DONE:
            self.feed_done()
            return []
        try:
            chunk = wire_json.loads(payload)
        except ValueError as exc:
            raise self._protocol_error(f"chunk is not JSON ({exc}): {payload[:200]!r}") from None
        return self.feed_chunk(chunk)

    def feed_done(self) -> None:
        """``[DONE]``: the stream is over; it must have delivered a finish reason."""
        self.done = True
        if self.result is None:
            raise self._protocol_error("[DONE] arrived before any chunk with a finish reason")

    def feed_eof(self) -> None:
        """End of the byte stream. Without a finish reason (and so without ``[DONE]``) the stream was cut."""
        if self.result is None:
            raise UpstreamStreamCut(
                "SGLang stream ended without [DONE] and without a finish reason", url=self.url, partial=self.partial()
            )

    def feed_chunk(self, chunk: Any) -> list[Event]:
        if self.result is not None or self.done:
            raise self._protocol_error("chunk after the final chunk")
        if not isinstance(chunk, Mapping):
            raise self._protocol_error(f"chunk is not a JSON object: {str(chunk)[:200]!r}")
        if "error" in chunk:
            raise error_from_chunk(chunk["error"], url=self.url, partial=self.partial())
        meta = chunk.get("meta_info")
        ids = chunk.get("output_ids")
        if not isinstance(meta, Mapping):
            raise self._protocol_error("chunk has no meta_info object")
        if not isinstance(ids, list):
            raise self._protocol_error("chunk has no output_ids list")
        try:
            finish = parse_finish_reason(meta.get("finish_reason"))
        except ValueError as exc:
            raise self._protocol_error(str(exc)) from None
        if self.rid is None and isinstance(meta.get("id"), str):
            self.rid = meta["id"]
        version = meta.get("weight_version")
        version = None if version is None else str(version)
        logprobs = meta.get("output_token_logprobs")
        if logprobs is not None and not isinstance(logprobs, list):
            raise self._protocol_error("output_token_logprobs is not a list")
        # The alternatives are display data: a list aligned with the logprobs, else none (never a failure).
        tops = meta.get("output_top_logprobs")
        if not (isinstance(tops, list) and logprobs is not None and len(tops) == len(logprobs)):
            tops = None
        quirk = isinstance(finish, FinishAbort) and "prompt_tokens" not in meta

        if quirk:
            events = self._feed_quirk(ids, logprobs, meta, version, tops)
        elif self.incremental:
            self._check_delta(ids, meta)
            if logprobs is not None and len(logprobs) != len(ids):
                raise self._protocol_error(f"{len(ids)} new ids but {len(logprobs)} logprob triples")
            events = self._append(ids, logprobs, 0, version, tops)
        else:
            events = self._feed_cumulative(ids, logprobs, version, tops, meta)

        text = chunk.get("text")
        if isinstance(text, str):
            # Cumulative chunks and the quirk chunk carry the whole text; incremental chunks a delta.
            if self.incremental and not quirk:
                self._text_parts.append(text)
            else:
                self._text_parts = [text]
        if finish is not None:
            self.result = self._finished(finish, meta, version)
            events.append(self.result)
        return events

    # -- internals -------------------------------------------------------------------------------------------

    def _check_delta(self, ids: list[Any], meta: Mapping[str, Any]) -> None:
        """An incremental chunk must not be a cumulative one: ``completion_tokens`` counts every token generated so
        far in both modes (SGLang's scheduler: ``len(req.output_ids)``), so a chunk after the first whose ids are
        exactly that many repeats the output instead of extending it."""
        received = len(self._ids)
        total = meta.get("completion_tokens")
        if received and ids and isinstance(total, int) and not isinstance(total, bool) and total == len(ids):
            raise self._protocol_error(
                f"chunk repeats the whole output ({total} ids after {received} received): the upstream streams "
                f"cumulative chunks but the proxy expects incremental ones{_MODE_HINT}"
            )

    def _feed_cumulative(
        self, ids: list[Any], logprobs: list[Any] | None, version: str | None, tops: list[Any] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> list[Event]:
        """``meta`` (the chunk's ``meta_info``, None for the quirk's complete list) lets a delta be told apart."""
        received = len(self._ids)
        total = None if meta is None else meta.get("completion_tokens")
        if (received and isinstance(total, int) and not isinstance(total, bool) and len(ids) != total
                and total == received + len(ids)):
            # Exactly the tokens since the last chunk, counted on top of those received: a delta (read as a whole
            # output it could even pass the checks below and drop tokens).
            raise self._protocol_error(
                f"chunk holds only the {len(ids)} ids after the {received} received{_CUMULATIVE_HINT}"
            )
        if len(ids) < received:
            raise self._protocol_error(
                f"cumulative chunk has {len(ids)} ids, fewer than the {received} received{_CUMULATIVE_HINT}"
            )
        if received and ids[received - 1] != self._ids[-1]:
            raise self._protocol_error(
                f"cumulative chunk disagrees with received token {received - 1}{_CUMULATIVE_HINT}"
            )
        if logprobs is not None and len(logprobs) != len(ids):
            raise self._protocol_error(f"{len(ids)} ids but {len(logprobs)} logprob triples")
        return self._append(ids, logprobs, received, version, tops)

    def _feed_quirk(
        self, ids: list[Any], logprobs: list[Any] | None, meta: Mapping[str, Any], version: str | None,
        tops: list[Any] | None,
    ) -> list[Event]:
        """Final chunk of a request aborted while queued or retracted (see the module docstring)."""
        received = len(self._ids)
        total = meta.get("completion_tokens")
        if not isinstance(total, int) or isinstance(total, bool) or total <= received:
            return []  # nothing we have not seen (or no way to tell): keep our own accumulation
        if not self.incremental and len(ids) == total:
            return self._feed_cumulative(ids, logprobs, version, tops)  # complete list (non-streaming body)
        if logprobs is not None and len(logprobs) >= total:
            # The whole output's triples. In incremental mode SGLang may coalesce the quirk chunk with deltas still
            # queued before it (``_coalesce_streaming_chunks`` concatenates the lists): the last ``total`` are the
            # whole output then.
            logprobs = logprobs[len(logprobs) - total:]
            if received and _triple_id(logprobs[received - 1]) != self._ids[-1]:
                raise self._protocol_error("abort chunk's logprobs disagree with the received tokens")
            new_ids = [_triple_id(t) for t in logprobs[received:]]
            return self._append(new_ids, logprobs[received:], 0, version)
        if total == received + 1 and len(ids) == 1:
            last = logprobs[-1:] if logprobs and _triple_id(logprobs[-1]) == ids[0] else None
            return self._append(ids, last, 0, version)
        return []  # tokens the stream never showed are lost; Finished.completion_tokens tells how many

    def _append(
        self, ids: list[Any], logprobs: list[Any] | None, start: int, version: str | None,
        tops: list[Any] | None = None,
    ) -> list[Event]:
        """Record ``ids[start:]`` (with ``logprobs[start:]`` and their alternatives ``tops[start:]`` when present) as
        new tokens."""
        events: list[Event] = []
        index = len(self._ids)
        for offset in range(start, len(ids)):
            token_id = ids[offset]
            if not isinstance(token_id, int) or isinstance(token_id, bool):
                raise self._protocol_error(f"output id {str(token_id)[:40]!r} is not an integer")
            if token_id < 0 or (self.vocab_size is not None and token_id >= self.vocab_size):
                bound = f"ids 0 to {self.vocab_size - 1}" if self.vocab_size is not None else "ids are non-negative"
                raise self._protocol_error(f"output token id {token_id} is outside the vocabulary ({bound})")
            logprob: float | None = None
            top = _alternatives(tops[offset]) if tops is not None else ()
            if logprobs is not None:
                triple = logprobs[offset]
                if _triple_id(triple) != token_id:
                    raise self._protocol_error(
                        f"logprob triple {str(triple)[:80]} does not match output id {token_id}"
                    )
                value = triple[0]
                if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
                    raise self._protocol_error(f"logprob {str(value)[:40]!r} is not a number")
                logprob = None if value is None else float(value)
            self._ids.append(token_id)
            self._logprobs.append(logprob)
            self._versions.append(version)
            self._tops.append(top)
            events.append(Token(index, token_id, logprob, version, top))
            index += 1
        return events

    def _finished(self, finish: FinishReason, meta: Mapping[str, Any], version: str | None) -> Finished:
        prompt_tokens = _int_or_none(meta.get("prompt_tokens"))
        completion_tokens = _int_or_none(meta.get("completion_tokens"))
        routed = meta.get("routed_experts")
        experts = None
        if routed is not None:
            if not isinstance(routed, str) or prompt_tokens is None:
                raise self._protocol_error("routed_experts is not a base64 string next to prompt_tokens")
            completion = completion_tokens if completion_tokens is not None else len(self._ids)
            rows = prompt_tokens + completion - 1 - self.routed_experts_start_len
            try:
                experts = RoutedExperts.from_base64(routed, num_rows=rows, start_len=self.routed_experts_start_len)
            except ValueError as exc:
                raise self._protocol_error(str(exc)) from None
        return Finished(
            rid=self.rid,
            finish_reason=finish,
            output_ids=tuple(self._ids),
            output_logprobs=tuple(self._logprobs),
            weight_versions=tuple(self._versions),
            weight_version=version,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cached_tokens=_int_or_none(meta.get("cached_tokens")),
            routed_experts=experts,
            text="".join(self._text_parts),
            meta_info=meta,
            output_top_logprobs=tuple(self._tops) if any(self._tops) else (),
        )

    def _protocol_error(self, message: str) -> UpstreamProtocolError:
        return UpstreamProtocolError(message, url=self.url, partial=self.partial())


_AGREE = "SGLang's --incremental-streaming-output and the proxy's --upstream-stream-mode must agree, docs/upstream.md"
_MODE_HINT = f" ({_AGREE})"
#: a delta chunk read as cumulative: the likeliest cause is an incremental upstream
_CUMULATIVE_HINT = f" (is the upstream streaming incremental chunks? {_AGREE})"


def _alternatives(entry: Any) -> tuple[tuple[int, float], ...]:
    """One position's ``output_top_logprobs`` entry (triples ``[logprob, token_id, text]``, or null) as
    (token id, logprob) pairs; malformed triples are skipped (alternatives are for display, never recorded)."""
    if not isinstance(entry, list):
        return ()
    pairs = []
    for triple in entry:
        if (isinstance(triple, (list, tuple)) and len(triple) >= 2 and isinstance(triple[1], int)
                and not isinstance(triple[1], bool) and isinstance(triple[0], (int, float))
                and not isinstance(triple[0], bool)):
            pairs.append((triple[1], float(triple[0])))
    return tuple(pairs)


def _triple_id(triple: Any) -> Any:
    """The token id of a ``[logprob, token_id, text]`` triple (None if it is not one)."""
    if isinstance(triple, (list, tuple)) and len(triple) >= 2:
        return triple[1]
    return None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
