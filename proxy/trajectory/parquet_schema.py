"""The Parquet schema of exported segments: one row per segment, one definition for the writer
(``dressage-proxy export``, ``proxy/export_command.py``) and the reader (``dressage-proxy view``,
``proxy/ui/export_file.py``). ``docs/storage.md`` ("Reads and export") has the table for users.

The segment dict (``proxy/trajectory/export.py``) becomes typed columns where training code reads arrays, and JSON
text where the value is nested and read rarely:

==========================  =================  =================================================================
column                      type               from the segment
==========================  =================  =================================================================
``trajectory_id``           string             as is (also ``parent_traj_id``, ``rollout_id``, ``instance_id``,
                                               ``build_mode``, ``finalize_reason``, ``finish_reason``,
                                               ``boundary_reason``, ``boundary_detail``,
                                               ``logprobs_absent_reason``, ``last_step_error``)
``segment_index``           int32              as is (also ``segment_count``, ``num_turns``)
``tip_step``                int64              as is (also ``forked_from_step``)
``step_ids``                list<int64>        as is
``token_ids``               list<int32>        as is
``loss_mask``               list<int8>         as is (0/1)
``logprobs``                list<float32>      as is, rounded to float32; null when the segment has none
``weight_versions``         list<int32>        the per-token versions when every one is a decimal integer in int32
                                               range written canonically (``"7"``, not ``"07"``); context tokens
                                               null. Null when the segment has no versions or they are not all such
                                               integers: then ``weight_versions_text`` holds them
``weight_versions_text``    list<string>       the per-token versions as the proxy recorded them (SGLang reports
                                               strings, e.g. ``"default"``), when they do not fit ``weight_versions``
``routed_experts``          string             base64, as is
``routed_experts_chunks``   string (JSON)      the list of chunks
``routed_experts_parts``    string (JSON)      the list of parts
``reward_info``             string (JSON)      also ``messages``, ``tools``, ``chat_template_kwargs``, ``steps``
``extra``                   string (JSON)      an object of every other field: fields a later proxy adds, and any
                                               value that does not fit its column's type (kept exactly, never
                                               dropped); null when there is none
``absent_fields``           list<string>       the columns' fields this segment does not have (null: it has every
                                               one a segment always has; a proxy's segments always do)
==========================  =================  =================================================================

Reading a row back (:func:`segment_from_row`) gives the segment dict ``/trajectory/read`` returned: JSON columns
parsed, the versions as strings again (from whichever column holds them), ``extra`` merged, the fields a segment
carries only sometimes (:data:`SOMETIMES_FIELDS`) left out when null, and ``absent_fields`` left out. The one
change is the logprobs' float32 rounding (of a list of numbers; one holding a null is kept exactly, in ``extra``;
``tests/export/test_parquet_schema.py`` checks the round trip on arbitrary segments). A file written by something else (no :data:`SCHEMA_KEY` in its metadata) is read as it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

#: the schema's name and version in the Parquet file's key-value metadata
SCHEMA_KEY = b"dressage.segments"
SCHEMA_VERSION = b"1"

_PLAIN_STRINGS = (
    "trajectory_id", "parent_traj_id", "rollout_id", "instance_id", "build_mode", "finalize_reason", "finish_reason",
    "boundary_reason", "boundary_detail", "logprobs_absent_reason", "last_step_error", "routed_experts",
)
_INT32 = ("segment_index", "segment_count", "num_turns")
_INT64 = ("tip_step", "forked_from_step")
#: fields kept as JSON text
JSON_FIELDS = (
    "routed_experts_chunks", "routed_experts_parts", "reward_info", "messages", "tools", "chat_template_kwargs",
    "steps",
)
#: fields a segment carries only in some build modes or with some flags: absent (not null) when their column is null
SOMETIMES_FIELDS = frozenset({
    "weight_versions", "routed_experts", "routed_experts_chunks", "routed_experts_parts", "last_step_error",
})
VERSIONS, VERSIONS_TEXT, EXTRA, ABSENT = "weight_versions", "weight_versions_text", "extra", "absent_fields"

#: every column, in file order
SCHEMA = pa.schema(
    [pa.field(name, pa.string()) for name in _PLAIN_STRINGS[:4]]
    + [pa.field(name, pa.int32()) for name in _INT32]
    + [pa.field(name, pa.string()) for name in _PLAIN_STRINGS[4:]]
    + [pa.field(name, pa.int64()) for name in _INT64]
    + [
        pa.field("step_ids", pa.list_(pa.int64())),
        pa.field("token_ids", pa.list_(pa.int32())),
        pa.field("loss_mask", pa.list_(pa.int8())),
        pa.field("logprobs", pa.list_(pa.float32())),
        pa.field(VERSIONS, pa.list_(pa.int32())),
        pa.field(VERSIONS_TEXT, pa.list_(pa.string())),
    ]
    + [pa.field(name, pa.string()) for name in JSON_FIELDS]
    + [pa.field(EXTRA, pa.string()), pa.field(ABSENT, pa.list_(pa.string()))],
    metadata={SCHEMA_KEY: SCHEMA_VERSION},
)
_TYPED = frozenset(SCHEMA.names) - {VERSIONS_TEXT, EXTRA, ABSENT}
#: the fields every segment has (absent ones are listed in ``absent_fields``)
_ALWAYS = tuple(sorted(_TYPED - SOMETIMES_FIELDS))
_CANONICAL_INT = re.compile(r"0|-?[1-9][0-9]{0,9}")
_INT32_RANGE = range(-(2**31), 2**31)


def json_text(value: Any) -> str:
    """Compact JSON, UTF-8 where it can be; a string UTF-8 cannot hold (a lone surrogate, which the API refuses but
    the store keeps if it ever got one) makes the text ASCII-escaped instead, so it is always valid and exact."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, separators=(",", ":"))
    return text


def _int32_versions(versions: Sequence[Any]) -> list[int | None] | None:
    """The versions as int32 when every one is None or a canonical decimal int32 string; else None."""
    numbers: list[int | None] = []
    for version in versions:
        if version is None:
            numbers.append(None)
        elif isinstance(version, str) and _CANONICAL_INT.fullmatch(version) and int(version) in _INT32_RANGE:
            numbers.append(int(version))
        else:
            return None
    return numbers


def _row_values(segment: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One segment as column values, and the fields no column holds (the ``extra`` object)."""
    row: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in segment.items():
        if value is None and key in SOMETIMES_FIELDS:
            extra[key] = None  # present and null, which a null column would read back as absent
        elif key in JSON_FIELDS:
            row[key] = None if value is None else json_text(value)
        elif key == VERSIONS:
            numbers = _int32_versions(value) if isinstance(value, list) else None
            if numbers is not None:
                row[VERSIONS] = numbers
            elif isinstance(value, list) and all(v is None or isinstance(v, str) for v in value):
                row[VERSIONS_TEXT] = value
            else:
                extra[key] = value
        elif key in _TYPED:
            row[key] = value
        else:
            extra[key] = value
    return row, extra


class _DoesNotFit(Exception):
    """A value its column's type cannot hold exactly."""


def _fits(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether values pyarrow inferred as ``source`` convert to ``target`` without changing kind: no float into an
    integer column (pyarrow would truncate 1.5 to 1), no bool into a number, no integer-only list into a float one."""
    if pa.types.is_null(source):
        return True
    if pa.types.is_list(target):
        return pa.types.is_list(source) and _fits(source.value_type, target.value_type)
    if pa.types.is_integer(target):
        return pa.types.is_integer(source)
    if pa.types.is_floating(target):
        return pa.types.is_floating(source)
    return pa.types.is_string(source) and pa.types.is_string(target)


def _typed(values: list[Any], kind: pa.DataType) -> pa.Array:
    """``values`` as ``kind``, exactly (floats rounded to float32 and nothing else), or :class:`_DoesNotFit`."""
    try:
        inferred = pa.array(values)
        if not _fits(inferred.type, kind):
            raise _DoesNotFit
        converted = inferred.cast(kind)  # a safe cast: an integer out of range raises
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        raise _DoesNotFit from None
    if pa.types.is_list(inferred.type) and pa.types.is_floating(kind.value_type):
        # float64 -> float32 turns a finite value beyond float32's range into infinity, silently: not a rounding.
        before, after = inferred.flatten(), converted.flatten()
        if before.null_count:  # a null among the numbers: not a list of logprobs, kept exactly (in extra)
            raise _DoesNotFit
        if pc.sum(pc.is_inf(before)).as_py() != pc.sum(pc.is_inf(after)).as_py():
            raise _DoesNotFit
    return converted


def _column(name: str, values: list[Any], extras: list[dict[str, Any]]) -> pa.Array:
    """One column of a batch. A value its type cannot hold (a wrong type, an id beyond int32) goes to the row's
    ``extra`` instead: found row by row, only when the whole column does not convert."""
    kind = SCHEMA.field(name).type
    try:
        return _typed(values, kind)
    except _DoesNotFit:
        pass
    kept = []
    for index, value in enumerate(values):
        try:
            _typed([value], kind)
        except _DoesNotFit:
            extras[index][name] = value
            value = None
        kept.append(value)
    return _typed(kept, kind)


def table_of(segments: Sequence[Mapping[str, Any]]) -> pa.Table:
    """A batch of segments as a table of :data:`SCHEMA` (one Parquet row group when written at once)."""
    rows, extras, absent = [], [], []
    for segment in segments:
        row, extra = _row_values(segment)
        rows.append(row)
        extras.append(extra)
        absent.append([name for name in _ALWAYS if name not in segment] or None)
    columns = {name: _column(name, [row.get(name) for row in rows], extras)
               for name in SCHEMA.names if name not in (EXTRA, ABSENT)}
    columns[EXTRA] = pa.array([json_text(extra) if extra else None for extra in extras], type=pa.string())
    columns[ABSENT] = pa.array(absent, type=pa.list_(pa.string()))
    return pa.Table.from_pydict(columns, schema=SCHEMA)


def is_segment_table(schema: pa.Schema) -> bool:
    """Whether a file's schema is this one (written by ``dressage-proxy export``)."""
    return (schema.metadata or {}).get(SCHEMA_KEY) is not None


def segment_from_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row of :data:`SCHEMA` (``Table.to_pylist()``) back into the segment dict (see the module docstring)."""
    segment: dict[str, Any] = {}
    absent = frozenset(row.get(ABSENT) or ())
    for key, value in row.items():
        if key in (VERSIONS, VERSIONS_TEXT, EXTRA, ABSENT) or key in absent:
            continue
        if key in JSON_FIELDS and value is not None:
            value = json.loads(value)
        if value is None and key in SOMETIMES_FIELDS:
            continue
        segment[key] = value
    if row.get(VERSIONS_TEXT) is not None:
        segment[VERSIONS] = list(row[VERSIONS_TEXT])
    elif row.get(VERSIONS) is not None:
        segment[VERSIONS] = [None if v is None else str(v) for v in row[VERSIONS]]
    if row.get(EXTRA) is not None:
        segment.update(json.loads(row[EXTRA]))
    return segment


def segments_of(table: pa.Table) -> list[dict[str, Any]]:
    """Every row of a table read from a file: decoded when it is a segment table, as they are otherwise."""
    rows: Iterable[dict[str, Any]] = table.to_pylist()
    if not is_segment_table(table.schema):
        return list(rows)
    return [segment_from_row(row) for row in rows]


__all__ = [
    "JSON_FIELDS", "SCHEMA", "SCHEMA_KEY", "SCHEMA_VERSION", "SOMETIMES_FIELDS", "is_segment_table", "json_text",
    "segment_from_row", "segments_of", "table_of",
]
