"""The viewer's data from an exported file, for ``dressage-proxy view`` (no proxy, no engine).

Two formats, one segment each record, with the fields ``POST /trajectory/read`` returns
(``proxy/trajectory/export.py``):

- JSONL: one segment object per line (a line holding a whole read answer, ``{"data": [...]}``, counts as its
  segments); blank lines are skipped;
- Parquet (read with pyarrow): one row per segment. A file ``dressage-proxy export`` wrote (its schema:
  ``proxy/trajectory/parquet_schema.py``, recognized by its metadata) is decoded back into the segments
  ``/trajectory/read`` returned (JSON columns parsed, weight versions as strings again, ``extra`` merged). Any other
  Parquet file is read as it is: lists of numbers of any numeric type, nested fields (``messages``, ``steps``,
  ``reward_info``...) as structs, lists, or JSON strings.

Segments are grouped into sessions by ``parent_traj_id`` (the session id), else by their ``trajectory_id`` without
its ``:<index>`` tail.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from proxy.ui.segment_view import as_json_value, as_list, segment_view
from proxy.ui.token_text import TokenTexts
from proxy.ui.trie_view import trie_from_segments


class ExportFileError(ValueError):
    """The file cannot be read as an export (the message says where and why)."""


def _jsonl_segments(path: Path) -> list[dict[str, Any]]:
    segments: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise ExportFileError(f"{path}:{number}: not a JSON object ({exc})") from None
            if isinstance(record, Mapping) and isinstance(record.get("data"), list):
                segments += [dict(segment) for segment in record["data"] if isinstance(segment, Mapping)]
            elif isinstance(record, Mapping):
                segments.append(dict(record))
            else:
                raise ExportFileError(f"{path}:{number}: expected a segment object, got {type(record).__name__}")
    return segments


def _parquet_segments(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet  # only the view command reads Parquet: the proxy never pays for the import

    from proxy.trajectory.parquet_schema import segments_of

    try:
        table = pyarrow.parquet.read_table(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise ExportFileError(f"{path}: not a readable Parquet file ({exc})") from None
    try:
        return segments_of(table)
    except ValueError as exc:  # a JSON column that is not JSON: the file was changed by something else
        raise ExportFileError(f"{path}: not a segment export ({exc})") from None


def read_export(path: Path) -> list[dict[str, Any]]:
    """Every segment of an exported file (by its suffix: ``.parquet``/``.pq``, else JSONL)."""
    if not path.is_file():
        raise ExportFileError(f"{path}: no such file")
    segments = _parquet_segments(path) if path.suffix.lower() in (".parquet", ".pq") else _jsonl_segments(path)
    for number, segment in enumerate(segments, start=1):
        if segment.get("token_ids") is None:
            raise ExportFileError(f"{path}: segment {number} has no token_ids (is this a trajectory export?)")
    return segments


def session_of(segment: Mapping[str, Any]) -> str:
    """The session a segment belongs to (see the module docstring)."""
    parent = segment.get("parent_traj_id")
    if parent is not None:
        return str(parent)
    return str(segment.get("trajectory_id") or "").rpartition(":")[0] or "(unnamed)"


def _steps(segments: Sequence[Mapping[str, Any]]) -> int:
    return len({step for segment in segments for step in as_list(segment.get("step_ids")) or ()})


@attrs.define(eq=False)
class ExportFileSource:
    """The viewer source of an exported file: every session finalized, its trie rebuilt from its segments."""

    label: str
    segments: list[dict[str, Any]]
    texts: TokenTexts
    _by_session: dict[str, list[dict[str, Any]]] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._by_session = {}
        for segment in self.segments:
            self._by_session.setdefault(session_of(segment), []).append(segment)

    @classmethod
    def from_file(cls, path: Path, texts: TokenTexts) -> ExportFileSource:
        return cls(path.name, read_export(path), texts)

    def session_ids(self) -> list[str]:
        return list(self._by_session)

    def describe(self) -> dict[str, Any]:
        return {"kind": "file", "label": self.label, "token_text": self.texts.available}

    def _summary(self, session_id: str, segments: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        first = segments[0]
        return {
            "session_id": session_id, "state": "finalized", "machine_state": None, "live": False,
            "steps": _steps(segments), "in_flight": 0, "branches": len(segments), "segments": len(segments),
            "segments_preview": False, "tokens": sum(len(as_list(s.get("token_ids")) or ()) for s in segments),
            "finalize_reason": as_json_value(first.get("finalize_reason")),
            "instance_id": as_json_value(first.get("instance_id")),
        }

    async def sessions(self) -> list[dict[str, Any]]:
        return [self._summary(session_id, segments) for session_id, segments in self._by_session.items()]

    async def session(self, session_id: str) -> dict[str, Any] | None:
        segments = self._by_session.get(session_id)
        if segments is None:
            return None
        return {"session": self._summary(session_id, segments), "trie": trie_from_segments(segments),
                "segments": [segment_view(segment, self.texts) for segment in segments],
                "note": "from an exported file: the trie is rebuilt from the segments' messages"}


__all__ = ["ExportFileError", "ExportFileSource", "read_export", "session_of"]
