"""Routed-expert rows of an exported segment, whatever its shape (spec 9; ``export.py`` documents the shapes).

A trainer doing routing replay needs one array ``[N - 1, num_layers, top_k]`` per segment of ``N`` tokens (row ``p``:
the routing computed when position ``p`` was the input token). :func:`assemble_routed_experts` builds it from a
segment dict that carries ``routed_experts``, ``routed_experts_chunks`` or ``routed_experts_parts``: every chunk is laid
at its ``start_len`` (a later chunk wins over an earlier one should they ever overlap; the proxy never produces
overlaps) and the positions no chunk covers are reported, never filled with made-up rows.

    rows = assemble_routed_experts(segment)
    if rows is not None and not rows.missing:
        experts = np.frombuffer(rows.data, "<i4").reshape(rows.num_rows, num_layers, top_k)
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from typing import Any

import attrs


@attrs.frozen
class RoutedRows:
    """The rows of one segment: ``data`` is ``num_rows`` rows of little-endian int32 (``row_bytes`` each), in
    position order; ``missing`` the positions no chunk covered (their bytes are zero)."""

    data: bytes = attrs.field(repr=lambda d: f"<{len(d)} bytes>")
    num_rows: int
    row_bytes: int
    missing: tuple[int, ...] = ()

    def row(self, position: int) -> bytes:
        return self.data[position * self.row_bytes : (position + 1) * self.row_bytes]


def segment_chunks(segment: Mapping[str, Any]) -> Iterator[tuple[int, int, bytes]]:
    """``(start_len, num_rows, raw bytes)`` of every chunk of the segment, in order (any of the three shapes)."""
    if isinstance(segment.get("routed_experts"), str):
        data = base64.b64decode(segment["routed_experts"])
        yield 0, len(segment["token_ids"]) - 1, data
    for chunk in segment.get("routed_experts_chunks") or ():
        yield chunk["start_len"], chunk["num_rows"], base64.b64decode(chunk["data"])
    for part in segment.get("routed_experts_parts") or ():
        if isinstance(part.get("routed_experts"), str):
            yield part["start_len"], part["num_rows"], base64.b64decode(part["routed_experts"])
        for chunk in part.get("routed_experts_chunks") or ():
            yield chunk["start_len"], chunk["num_rows"], base64.b64decode(chunk["data"])


def assemble_routed_experts(segment: Mapping[str, Any]) -> RoutedRows | None:
    """The segment's ``N - 1`` rows (None when it carries no routed experts). Raises ``ValueError`` for a chunk
    whose bytes do not split into its rows, rows of different sizes, or rows beyond position ``N - 2``."""
    count = len(segment["token_ids"]) - 1
    chunks = list(segment_chunks(segment))
    if not chunks:
        return None
    row_bytes = None
    rows: list[bytes | None] = [None] * max(count, 0)
    for start, num_rows, data in chunks:
        if num_rows <= 0:
            continue
        if len(data) % num_rows or len(data) // num_rows % 4:
            raise ValueError(f"a chunk of {len(data)} bytes does not split into {num_rows} int32 rows")
        size = len(data) // num_rows
        if row_bytes is None:
            row_bytes = size
        elif size != row_bytes:
            raise ValueError(f"rows of {size} and {row_bytes} bytes in one segment")
        if start < 0 or start + num_rows > count:
            raise ValueError(f"rows {start}..{start + num_rows - 1} outside positions 0..{count - 1}")
        for index in range(num_rows):
            rows[start + index] = data[index * size : (index + 1) * size]
    row_bytes = row_bytes or 0
    missing = tuple(position for position, row in enumerate(rows) if row is None)
    blank = bytes(row_bytes)
    return RoutedRows(b"".join(blank if row is None else row for row in rows), count, row_bytes, missing)


__all__ = ["RoutedRows", "assemble_routed_experts", "segment_chunks"]
