"""The step journal record: one committed step, as the opaque bytes ``TrajectoryStore.append_step`` keeps.

A record holds everything a replay needs to commit the step again exactly (``session_replay.py``), and nothing it
would have to compute again: the request (tools, chat_template_kwargs, instance and turn ids, and the messages after
the prompt's newest checkpoint, which an earlier record holds: :meth:`JournaledRequest.after_prefix`), the context
token ids the step actually used (a replay sets them, it never renders the conversation again: TITO continues
with the recorded ids), whether its incremental encode failed (and the failure's detail), the boundary reason its prepare gave it, what
it generated (ids,
logprobs, weight versions, routed-expert chunks), the answer (finish reason, assistant message), its version stamp,
its generation id, step id and chain id (checked by the replay), and the session's counters before each of its
critical sections (:class:`~proxy.trajectory.session.Moment`: the replay's order and the ids it hands out).

Layout (format 2; format 1 had no ``idempotency`` in its header and is still read), little-endian::

    u8   FORMAT_VERSION
    u32  length of the header, then the header: ``o`` + orjson's JSON, or ``j`` + the standard library's (every
         field that is not a number array)
    u32  length, then the bytes, for each blob in order: context ids (int32), generated ids (int32), logprobs
         (float32 or float64, as the header's ``logprobs`` typecode says), the context loss mask (0/1 bytes), then one
         per routed-expert chunk (its raw bytes)

Number arrays are raw binary, never decimal text: logprobs come back bit for bit (float32 when every value is a
float32, as SGLang's are; float64 otherwise, ``tokens.exact_logprobs``). The JSON is ``orjson``'s (fast on the commit
path), or the standard library's for what orjson refuses (integers over 64 bits, a lone surrogate): either way
``json.loads`` gives back what was written, a non-finite float aside (orjson writes it as null; requests are parsed
JSON, which has none). A later format bumps ``FORMAT_VERSION``; :func:`decode` refuses a version it does not know.

Format 2 adds the request's ``Idempotency-Key`` and its body's fingerprint (``JournaledRequest.idempotency``), in the
same record as the step they committed: a step is durable with its key or not at all, so after a restart a repeat
of the request is answered from the step (``proxy/controllers/idempotency.py``) instead of generating again.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import orjson

from proxy.trajectory.pending_step import Moment
from proxy.trajectory.tokens import RoutedChunk
from proxy.trajectory.version_stamp import VersionStamp

#: the record layout's version (the first byte)
FORMAT_VERSION = 2
#: every version :func:`decode` reads (1: before Idempotency-Keys were journaled)
READ_VERSIONS = frozenset({1, 2})

_LENGTH = struct.Struct("<I")


class JournalFormatError(ValueError):
    """A journal record this proxy cannot read (unknown format version, truncated, malformed)."""


@attrs.frozen
class JournaledRequest:
    """The request of a generation, as prepare received it (kept by the registry until the commit)."""

    messages: Sequence[Any]
    tools: Sequence[Any] | None = None
    chat_template_kwargs: Mapping[str, Any] | None = None
    instance_id: str | None = None
    turn_id: str | None = None
    # In a journal record: ``messages`` are only those after the first ``prefix_depth``, which are the prompt and
    # answer of step ``prefix_step`` (the newest checkpoint on the prompt's path at prepare). A record then grows with
    # the turn, not with the conversation; the replay puts the prefix back (``session_replay.py``).
    prefix_step: int | None = None
    prefix_depth: int = 0
    # The request's Idempotency-Key and its body's fingerprint (``proxy/controllers/idempotency.py``), or None: a
    # restart restores the key's record from the step it committed.
    idempotency: tuple[str, str] | None = None

    def after_prefix(self, prefix_step: int | None, prefix_depth: int) -> JournaledRequest:
        """The request as a journal record keeps it: without the messages the prefix step already holds."""
        if prefix_step is None:
            return self
        return attrs.evolve(self, messages=list(self.messages[prefix_depth:]), prefix_step=prefix_step,
                            prefix_depth=prefix_depth)


@attrs.frozen(eq=False)
class StepRecord:
    """One committed step (see the module docstring); ``==`` compares every field, arrays by value and type."""

    step_id: int
    chain_id: int
    generation_id: str
    request: JournaledRequest
    # The context tokens the step used (the TITO fragment, or the whole prompt of a full encode) and their loss mask
    # (None: all 0).
    context_ids: array
    context_mask: bytes | None
    # The incremental encode failed and the step restarted with a full encode: the failure's detail.
    tito_detail: str | None
    # The boundary reason its prepare gave it (``Session.restore_boundary_reason`` says why a replay needs it).
    boundary_reason: str | None
    generated_ids: array
    # None when absent or misaligned (then ``logprobs_invalid``).
    logprobs: array | None
    logprobs_invalid: bool
    version_runs: tuple[tuple[str | None, int], ...]
    routed_experts: tuple[RoutedChunk, ...]
    finish_reason: str
    assistant_message: Mapping[str, Any]
    version_stamp: VersionStamp | None
    prepared: Moment
    restarted: Moment | None
    committed: Moment

    @property
    def tito_failed(self) -> bool:
        """The step's incremental encode failed (it restarted its segment)."""
        return self.restarted is not None

    def _key(self) -> tuple[Any, ...]:
        def arr(values: array | None) -> Any:
            return None if values is None else (values.typecode, values.tobytes())

        return (
            self.step_id, self.chain_id, self.generation_id, self.request, arr(self.context_ids), self.context_mask,
            self.tito_detail, self.boundary_reason, arr(self.generated_ids), arr(self.logprobs), self.logprobs_invalid, self.version_runs,
            self.routed_experts, self.finish_reason, _dumps(self.assistant_message), self.version_stamp,
            self.prepared, self.restarted, self.committed,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StepRecord):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]


def _dumps(value: Any) -> bytes:
    """JSON bytes: orjson, or the standard library where orjson refuses (see the module docstring)."""
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii")


#: the header's first byte: which JSON library wrote it (orjson reads integers over 64 bits back as floats, so
#: what the standard library wrote it reads back)
_ORJSON, _STDLIB = b"o", b"j"


def _dumps_header(value: Any) -> bytes:
    try:
        return _ORJSON + orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        return _STDLIB + json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _loads_header(data: bytes) -> Any:
    kind, body = data[:1], data[1:]
    if kind == _ORJSON:
        return orjson.loads(body)
    if kind == _STDLIB:
        return json.loads(body.decode("ascii"))
    raise JournalFormatError(f"unknown header encoding {kind!r}")


def _little(values: array) -> bytes:
    """An array's bytes in little-endian order."""
    if sys.byteorder == "big":  # pragma: no cover - every platform the proxy runs on is little-endian
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _array(typecode: str, data: bytes) -> array:
    values = array(typecode)
    if len(data) % values.itemsize:
        raise JournalFormatError(f"{len(data)} bytes are not a whole number of {typecode!r} items")
    values.frombytes(data)
    if sys.byteorder == "big":  # pragma: no cover
        values.byteswap()
    return values


def _moment(moment: Moment | None) -> list[int] | None:
    return None if moment is None else [moment.events, moment.generations, moment.chains]


def _unmoment(values: Sequence[int] | None) -> Moment | None:
    return None if values is None else Moment(*(int(v) for v in values))


def encode(record: StepRecord) -> bytes:
    """The record's bytes (format :data:`FORMAT_VERSION`)."""
    request = record.request
    stamp = record.version_stamp
    header = {
        "step_id": record.step_id, "chain_id": record.chain_id, "generation_id": record.generation_id,
        "messages": list(request.messages), "tools": request.tools, "chat_template_kwargs": request.chat_template_kwargs,
        "instance_id": request.instance_id, "turn_id": request.turn_id,
        "prefix": None if request.prefix_step is None else [request.prefix_step, request.prefix_depth],
        "idempotency": None if request.idempotency is None else list(request.idempotency),
        "mask": record.context_mask is not None, "tito_detail": record.tito_detail,
        "boundary_reason": record.boundary_reason,
        "logprobs": record.logprobs.typecode if record.logprobs is not None else None,
        "logprobs_invalid": record.logprobs_invalid,
        "version_runs": [list(run) for run in record.version_runs],
        "routed": [[chunk.num_rows, chunk.start_len] for chunk in record.routed_experts],
        "finish_reason": record.finish_reason, "assistant_message": record.assistant_message,
        "version_stamp": None if stamp is None else [stamp.epoch, stamp.weight_version],
        "prepared": _moment(record.prepared), "restarted": _moment(record.restarted),
        "committed": _moment(record.committed),
    }
    blobs = [_little(record.context_ids), _little(record.generated_ids),
             _little(record.logprobs) if record.logprobs is not None else b"", record.context_mask or b""]
    blobs += [chunk.data for chunk in record.routed_experts]
    parts = [bytes([FORMAT_VERSION])]
    for blob in (_dumps_header(header), *blobs):
        parts += [_LENGTH.pack(len(blob)), blob]
    return b"".join(parts)


def decode(data: bytes) -> StepRecord:
    """The record ``encode`` wrote; raises :class:`JournalFormatError` for anything else."""
    view = memoryview(data)
    if not view or view[0] not in READ_VERSIONS:
        version = view[0] if view else None
        raise JournalFormatError(f"step journal format {version} is not one of {sorted(READ_VERSIONS)}: written by "
                                 "another version")
    blobs: list[bytes] = []
    offset = 1
    while offset < len(view):
        if offset + _LENGTH.size > len(view):
            raise JournalFormatError("truncated step journal record")
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += _LENGTH.size
        if offset + length > len(view):
            raise JournalFormatError("truncated step journal record")
        blobs.append(bytes(view[offset:offset + length]))
        offset += length
    try:
        header = _loads_header(blobs[0])
        context, generated, logprobs, mask = blobs[1:5]
        chunks = tuple(RoutedChunk(data, int(rows), int(start))
                       for data, (rows, start) in zip(blobs[5:], header["routed"], strict=True))
        stamp = header["version_stamp"]
        # Format 1 has no key; format 2 has one or null.
        keyed = header.get("idempotency") if view[0] >= 2 else None
        return StepRecord(
            step_id=int(header["step_id"]), chain_id=int(header["chain_id"]), generation_id=header["generation_id"],
            request=JournaledRequest(header["messages"], header["tools"], header["chat_template_kwargs"],
                                     header["instance_id"], header["turn_id"],
                                     *((int(header["prefix"][0]), int(header["prefix"][1])) if header["prefix"]
                                       else (None, 0)),
                                     idempotency=None if keyed is None else (str(keyed[0]), str(keyed[1]))),
            context_ids=_array("i", context), context_mask=mask if header["mask"] else None,
            tito_detail=header["tito_detail"], boundary_reason=header["boundary_reason"], generated_ids=_array("i", generated),
            logprobs=_array(header["logprobs"], logprobs) if header["logprobs"] is not None else None,
            logprobs_invalid=bool(header["logprobs_invalid"]),
            version_runs=tuple((version, int(count)) for version, count in header["version_runs"]),
            routed_experts=chunks, finish_reason=header["finish_reason"],
            assistant_message=header["assistant_message"],
            version_stamp=None if stamp is None else VersionStamp(int(stamp[0]), stamp[1]),
            prepared=_unmoment(header["prepared"]), restarted=_unmoment(header["restarted"]),
            committed=_unmoment(header["committed"]),
        )
    except JournalFormatError:
        raise
    except (IndexError, KeyError, TypeError, ValueError) as exc:
        raise JournalFormatError(f"malformed step journal record: {type(exc).__name__}") from None


__all__ = ["FORMAT_VERSION", "READ_VERSIONS", "JournalFormatError", "JournaledRequest", "StepRecord", "decode", "encode"]
