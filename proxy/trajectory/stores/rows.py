"""Records <-> table rows for the durable stores (SQLite and PostgreSQL store the same values; ``docs/storage.md``).

- A segment is stored as its JSON text in UTF-8, compressed with zlib at level 1 (a BLOB / BYTEA column). The JSON
  is exactly what the ``bytes`` statistic counts (:func:`proxy.trajectory.store.json_size`; the row's ``bytes``
  column), and total on every string the proxy can hold: a lone surrogate (JSON's ``"\\ud800"`` escape decodes to
  one) is kept with ``surrogatepass``, so it reads back as the same string; neither database's text type could hold
  it (SQLite's driver refuses to encode it, PostgreSQL refuses invalid UTF-8). A value JSON cannot hold raises
  here, before the store changes (``write`` is atomic). Why zlib level 1: a 4,000-token segment's 105 KB of JSON
  (token ids, logprobs, masks, the messages) becomes 26 KB (4.1x) for 2 ms more on top of the 5.6 ms the JSON
  encoding takes, on a worker thread (level 6: 4.6x for 9 ms); reading it back costs 0.8 ms (docs/benchmarks.md).
- A finalize result, an abort reason and the weight version are stored as ASCII JSON text (``ensure_ascii``): any
  string, surrogates and NUL included, becomes plain ASCII that a TEXT column holds and ``json.loads`` gives back
  exactly, and a person reading the table with ``sqlite3``/``psql`` sees readable JSON.
- Session, trajectory and lease ids and proxy ids are printable ASCII (``proxy/api/fields.py:identifier``), stored
  as TEXT as they are.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from proxy.trajectory.store import ControlState


@attrs.frozen
class SegmentRow:
    """One segment ready for its INSERT: encoded outside the transaction, so a bad segment fails before any change."""

    trajectory_id: str
    segment: bytes
    tokens: int
    # the segment's JSON size (``json_size``), what the ``bytes`` statistic counts
    size: int


#: zlib's fastest level (see the module docstring)
COMPRESSION_LEVEL = 1


def encode_segment(segment: Mapping[str, Any]) -> tuple[bytes, int]:
    """A segment's stored bytes and its JSON size; TypeError/ValueError if JSON cannot hold it."""
    text = json.dumps(segment, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return zlib.compress(text, COMPRESSION_LEVEL), len(text)


def decode_segment(data: bytes | memoryview) -> dict[str, Any]:
    return json.loads(zlib.decompress(data).decode("utf-8", "surrogatepass"))


def segment_rows(segments: Sequence[Mapping[str, Any]]) -> list[SegmentRow]:
    """The rows of one write, in export order. A trajectory id given twice keeps its first place and its last
    segment, as the memory store's dict does."""
    rows: dict[str, SegmentRow] = {}
    for segment in segments:
        tid = segment["trajectory_id"]
        stored, size = encode_segment(segment)
        rows[tid] = SegmentRow(tid, stored, len(segment.get("token_ids") or ()), size)
    return list(rows.values())


def encode_json(value: Any) -> str | None:
    """A result or reason as ASCII JSON text (None stays NULL)."""
    return None if value is None else json.dumps(value, ensure_ascii=True)


def decode_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def control_from_row(row: tuple[Any, Any] | None) -> ControlState:
    """``(paused, weight_version JSON)`` -> ControlState; no row yet is the default (running, no version)."""
    if row is None:
        return ControlState()
    return ControlState(paused=bool(row[0]), weight_version=decode_json(row[1]))


def control_params(state: ControlState) -> dict[str, Any]:
    return {"paused": bool(state.paused), "weight_version": encode_json(state.weight_version)}


__all__ = [
    "COMPRESSION_LEVEL", "SegmentRow", "control_from_row", "control_params", "decode_json", "decode_segment", "encode_json",
    "encode_segment", "segment_rows",
]
