"""Decoding SGLang's JSON: orjson when it can, the standard library when it cannot.

Why: ``bench/overhead.py`` profiles put ``json.loads`` at about a tenth of the proxy's CPU when it relays streams.
SGLang's default (cumulative) streaming repeats the whole output so far, ids and logprob triples, in every chunk,
so a 128-token stream decodes about 64 tokens' worth of JSON per token; orjson decodes such a chunk about four
times faster than ``json`` (5 µs against 20 µs for 64 tokens, on the bench machine).

Results: standard JSON decodes to the same values as with ``json.loads`` (dict, list, str, int, float, bool, None;
floats correctly rounded in both), with one exception, which is why this is for SGLang's replies only and not
for client request bodies: orjson decodes an integer beyond 64 bits as a float. SGLang never sends one (its
encoder is orjson, which cannot write them); were one to come, the chunk decoder refuses a float where it needs
an integer. Whatever orjson refuses (Python's ``NaN``/``Infinity`` extensions, lone surrogate escapes, nesting
malformed input) goes to ``json.loads``, which then accepts it or raises as it always did.
``tests/upstream/test_wire_json.py`` holds the two equal.

Encoding request bodies (:func:`dumps_body`): compact JSON that reads back to the same values as the standard
library's (``json.dumps(body, separators=(",", ":"), allow_nan=False)``, its ``ValueError`` for a NaN or an infinity
included), written by orjson: the members other than ids ~6.5 -> ~1 us a run inside the proxy, two runs a
``/generate`` (issue 21 item 2). What orjson cannot write (an integer beyond 64 bits, a lone surrogate, a non-string
key) and a non-finite float (which orjson would write as ``null``) go to the standard library. An ``array`` of token
ids (the ``input_ids`` of a ``/generate``, which grow with the session: 30k ids at turn 100) is written by orjson from
a numpy view of the array's buffer, with no Python object per id. Measured on 30k ids (docs/benchmarks.md, issue 21
item 4): ``json.dumps`` of the list about 19x, ``orjson.dumps(ids.tolist())`` about 3x the cost of this.
"""

from __future__ import annotations

import json
import math
from array import array
from typing import Any

import numpy
import orjson

__all__ = ["dumps_body", "has_non_finite", "loads"]


def loads(data: str | bytes) -> Any:
    """``json.loads(data)``, computed by orjson whenever orjson accepts ``data`` (see the module docstring)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def dumps_body(body: Any) -> bytes:
    """``json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()``: JSON of the same
    values (and the same ValueError for NaN), with a top-level ``array`` value written without a Python object per
    item (see the module docstring)."""
    if type(body) is not dict or not any(type(value) is array for value in body.values()):
        return _dumps(body)
    # The members between arrays are written a run at a time, one ``_dumps`` of the run (its braces cut),
    # not one call per key and value: 26 -> 10 us for a /generate body (timeit).
    members: list[bytes] = []
    run: dict[Any, Any] = {}
    for name, value in body.items():
        if type(value) is not array:
            run[name] = value
            continue
        if run:
            members.append(_dumps(run)[1:-1])
            run = {}
        members.append(_dumps(name) + b":" + _dumps_array(value))
    if run:
        members.append(_dumps(run)[1:-1])
    return b"{" + b",".join(members) + b"}"


def _dumps(value: Any) -> bytes:
    """Compact JSON of ``value``: orjson's, or the standard library's where orjson cannot write it or would write a
    non-finite float as ``null`` (the standard library then raises ``ValueError``, as ``allow_nan=False`` says)."""
    try:
        data = orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return _stdlib_dumps(value)
    if b"null" in data and has_non_finite(value):
        return _stdlib_dumps(value)
    return data


def _stdlib_dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def has_non_finite(value: Any) -> bool:
    """Whether a float in ``value`` is NaN or infinite (orjson writes those as ``null``)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is float:
            if not math.isfinite(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def _dumps_array(values: array) -> bytes:
    """An integer array as a JSON list: orjson writes numpy's view of its buffer (no copy, no Python ints)."""
    if values.typecode not in _INTEGER_TYPECODES:
        return _dumps(values.tolist())
    if not values:
        return b"[]"
    view = numpy.frombuffer(values, dtype=numpy.dtype(f"{values.typecode}"))
    return orjson.dumps(view, option=orjson.OPT_SERIALIZE_NUMPY)


#: array typecodes of integers (numpy reads the same codes, native order and size)
_INTEGER_TYPECODES = frozenset("bBhHiIlLqQ")
