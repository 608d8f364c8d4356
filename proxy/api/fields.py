"""Readers for the fields of a JSON request body; every one raises :class:`ApiError` and nothing else.

The request parsers (:mod:`proxy.api.chat_request`, :mod:`proxy.api.rollout_requests`) are written with these, so
the rules are the same everywhere:

- **JSON values only.** A body is what ``json.loads`` makes: dict, list, str, int, float, bool, None. Anything else
  (a tuple, a set, bytes, a non-string key) is ``invalid_request``, as is a non-finite float (``NaN``,
  ``Infinity``: Python's json accepts them, JSON does not).
- **Numbers.** ``true``/``false`` are never numbers (Python's ``bool`` is an ``int``: refused explicitly). Integer
  fields take ints only (``512.0`` is refused, as OpenAI does); float fields take ints and floats. Ranges are checked
  before any conversion, so ``10**400`` is a clean 400, never an ``OverflowError``.
- **Identifiers** (session, instance and turn ids): a string, or an integer (turned into its decimal string); 1 to
  256 printable ASCII characters (0x20-0x7E) without leading or trailing spaces. ASCII because the session id is
  sent upstream as the ``X-SMG-Routing-Key`` header and becomes part of SGLang request ids.
- **Opaque JSON** the proxy stores or re-serializes without reading it (tool schemas, ``chat_template_kwargs``,
  tool-call arguments given as objects, ``reward_info``) is checked to be JSON and at most
  :data:`MAX_JSON_DEPTH` levels deep, so re-serializing it later, deeper in the call stack, can never hit Python's
  recursion limit.
- **Valid Unicode only.** Every string of a body, object keys included, must be encodable as UTF-8. JSON can
  spell a lone UTF-16 surrogate (``"\\ud800"``), which ``json.loads`` turns into a Python string that UTF-8 cannot
  encode; accepted, it would fail later, far from the request (a 500 when a template renders it, or a session that
  cannot be exported). :func:`parse_json_body` refuses it at once, ``invalid_request`` naming the first such field
  (:func:`require_valid_unicode`), before anything is stored or sent upstream. Headers cannot carry one (HTTP
  headers are bytes, read as Latin-1, and every id header must be ASCII).
- ``null`` means "absent" for every optional field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy
import orjson

from proxy.api.errors import ApiError

#: how deeply opaque JSON values (schemas, template kwargs, reward info) may nest
MAX_JSON_DEPTH = 100
#: the longest accepted session, instance or turn id
MAX_ID_LENGTH = 256
#: the largest accepted token count (SGLang and the gateway hold it in 32 bits)
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# A JSON escape of a UTF-16 surrogate code unit (U+D800-U+DFFF). Text decoded from UTF-8 never holds a surrogate
# (the strict decoder refuses them), so a body without such an escape cannot hold one after json.loads: the walk of
# require_valid_unicode is needed only when this matches (a pair spelling an emoji matches too; the walk finds it
# valid, as json.loads joined the pair into one character).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
# A run of 19 digits or more (a JSON integer that may not fit in 64 bits, which orjson would read as a float) is 19
# zeros once every digit is mapped to "0" (bytes.translate), or 19 one-bytes in numpy's digit mask. Both are ~20x
# cheaper than a regex character class, which tries every byte (515 KB chat body: 0.95 vs 20 ms). The mask costs a
# third of the mapping per byte (28 against 82 µs on a 117 KB chat body, issue 21 item 4) but its fixed cost is the
# larger inside the proxy: 16 µs a call on a short turn's 1.6 KB body, against ~2 µs for the mapping (thread CPU
# timed around each call under the bench's load, issue 21 item 2). Bodies up to _MAPPED_UP_TO take the mapping.
_DIGITS_TO_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_RUN_MAPPED = b"0" * 19
_LONG_RUN_MASKED = b"\x01" * 19
_MAPPED_UP_TO = 32 * 1024
_ZERO, _TEN = numpy.uint8(ord("0")), numpy.uint8(10)
# An object key written as ``.key`` in a field path; any other key is written ``["key"]`` (JSON, ASCII-escaped).
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def _has_long_number(data: bytes | bytearray) -> bool:
    """Whether ``data`` holds a run of 19 digits or more."""
    if len(data) <= _MAPPED_UP_TO:
        return _LONG_RUN_MAPPED in data.translate(_DIGITS_TO_ZERO)
    digits = numpy.frombuffer(data, numpy.uint8) - _ZERO < _TEN  # bytes below "0" wrap around to 246 and up
    return _LONG_RUN_MASKED in digits.tobytes()


def parse_json_body(data: bytes | str) -> Any:
    """A request body parsed as strict JSON (no ``NaN``/``Infinity``); ``invalid_request`` when it is not JSON.

    An empty body parses to ``None`` (the parsers then say "the body must be a JSON object", or, for endpoints whose
    fields are all optional, treat it as ``{}``).

    The parsed body holds only valid Unicode (see the module docstring): a string or key with a lone surrogate is
    ``invalid_request`` naming it.
    """
    decoded_from_utf8 = isinstance(data, (bytes, bytearray))
    if decoded_from_utf8 and not _has_long_number(data):
        # orjson first (issue 21: every body in, ~3x the stdlib's speed): it accepts exactly the valid UTF-8 JSON
        # without lone surrogates that the path below accepts, to the same values, except integers beyond 64 bits
        # (it reads them as floats: such a body takes the path below). Anything it refuses takes the path below
        # too, for the same answer and message as always.
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    if decoded_from_utf8:
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ApiError.invalid_request(f"the request body is not UTF-8: {exc}") from None
    if not data.strip():
        return None
    try:
        value = json.loads(data, parse_constant=_refuse_constant)
    except ApiError:
        raise
    except RecursionError:
        raise ApiError.invalid_request("the request body is nested too deeply") from None
    except ValueError as exc:
        raise ApiError.invalid_request(f"the request body is not valid JSON: {exc}") from None
    if _SURROGATE_ESCAPE.search(data) is not None or not (decoded_from_utf8 or _encodable(data)):
        require_valid_unicode(value)
    return value


def require_valid_unicode(value: Any, root: str = "") -> Any:
    """``value`` unchanged when every string in it (object keys too) can be encoded as UTF-8; else
    ``invalid_request`` whose ``param`` is the path of the first bad string in document order, such as
    ``messages[2].tool_calls[0].function.arguments`` or ``reward_info.scores["\\ud800"]`` (a bad key names itself).

    Iterative (no recursion, whatever the depth); ``root`` prefixes the paths (``""``: the request body). A quick
    pass answers the common case; only a value that holds a bad string is walked again, in order, to name it.
    """
    if _all_encodable(value):
        return value
    # Entries: (trail, value, is_key). Children are pushed in reverse so they pop in document order, each object key
    # just before its value.
    stack: list[tuple[Any, Any, bool]] = [(None, value, False)]
    while stack:
        trail, item, is_key = stack.pop()
        kind = type(item)
        if kind is str:
            if not _encodable(item):
                raise _not_unicode(_trail_path(root, trail), item)
            continue
        if is_key:
            continue
        if kind is dict:
            for key, child in reversed(list(item.items())):
                child_trail = (trail, key)
                stack.append((child_trail, child, False))
                stack.append((child_trail, key, True))
        elif kind is list:
            stack.extend(((trail, index), child, False) for index, child in reversed(list(enumerate(item))))
    raise AssertionError("_all_encodable found a bad string the ordered walk did not")  # pragma: no cover


def _all_encodable(value: Any) -> bool:
    """Whether every string and key in ``value`` can be encoded as UTF-8 (in no particular order: fast)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            if not all(type(key) is not str or key.isascii() or _encodable(key) for key in item):
                return False
            children: Any = item.values()
        elif kind is list:
            children = item
        else:
            if kind is str and not _encodable(item):
                return False
            continue
        for child in children:
            kind = type(child)
            if kind is str:
                if not (child.isascii() or _encodable(child)):
                    return False
            elif kind is dict or kind is list:
                stack.append(child)
    return True


def _trail_path(root: str, trail: Any) -> str:
    """The field path of a trail (see :func:`require_valid_unicode`)."""
    steps = []
    while trail is not None:
        trail, step = trail
        steps.append(step)
    path = root
    for step in reversed(steps):
        path = f"{path}[{step}]" if isinstance(step, int) else field_path(path, step)
    return path


def field_path(path: str, key: str) -> str:
    """The path of ``key`` inside the object at ``path``: ``path.key``, or ``path["key"]`` for a key that is not
    a plain name (JSON-quoted with ASCII escapes, so the path itself is always valid Unicode)."""
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def _encodable(text: str) -> bool:
    """Whether ``text`` can be encoded as UTF-8 (only a surrogate code point cannot)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _not_unicode(path: str, text: str) -> ApiError:
    bad = next(char for char in text if 0xD800 <= ord(char) <= 0xDFFF)
    where = path or "the request body"
    return ApiError.invalid_request(
        f"{where} is not valid Unicode: it holds a lone UTF-16 surrogate (\\u{ord(bad):04x}), which UTF-8 cannot "
        "encode; every string must be valid Unicode",
        path or None,
    )


def _refuse_constant(name: str) -> Any:
    raise ApiError.invalid_request(f"the request body is not valid JSON: {name} is not a JSON number")


def require_object(body: Any, what: str = "the request body") -> dict[str, Any]:
    """``body`` itself when it is a JSON object."""
    if not isinstance(body, dict):
        raise ApiError.invalid_request(f"{what} must be a JSON object, not {json_type(body)}")
    return body


def json_type(value: Any) -> str:
    """The JSON name of a value's type, for messages (``"string"``, ``"array"``...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def shown(value: Any, limit: int = 64) -> str:
    """A value for an error message: a string cut to ``limit`` characters, else its JSON type (never ``repr`` of
    a possibly huge or deeply nested structure)."""
    return repr(value[:limit]) if isinstance(value, str) else json_type(value)


def check_json(value: Any, param: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``value`` unchanged when it is a JSON value at most ``max_depth`` levels deep (iterative: no recursion).

    Hot for large tool schemas, hence the exact-type fast path for the common scalars.
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > max_depth:
                raise ApiError.invalid_request(f"{param} is nested more than {max_depth} levels deep", param)
            for key in item:
                if type(key) is not str:
                    raise ApiError.invalid_request(f"{param} has a non-string key {shown(key)}", param)
            children: Any = item.values()
        elif isinstance(item, list):
            if depth > max_depth:
                raise ApiError.invalid_request(f"{param} is nested more than {max_depth} levels deep", param)
            children = item
        else:
            _check_scalar(item, param)
            continue
        for child in children:
            kind = type(child)
            if kind is str or kind is int or kind is bool or child is None:
                continue
            stack.append((child, depth + 1))
    return value


def _check_scalar(item: Any, param: str) -> None:
    if isinstance(item, float):
        if not math.isfinite(item):
            raise ApiError.invalid_request(f"{param} holds a non-finite number ({item!r})", param)
    elif item is not None and not isinstance(item, (str, int)):
        raise ApiError.invalid_request(f"{param} holds a {type(item).__name__}, which is not JSON", param)


def optional_bool(body: Mapping[str, Any], key: str, param: str | None = None) -> bool | None:
    value = body.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise ApiError.invalid_request(f"{param or key} must be a boolean, not {json_type(value)}", param or key)


def optional_int(body: Mapping[str, Any], key: str, low: int, high: int, param: str | None = None) -> int | None:
    """An integer in ``[low, high]``, or None."""
    value = body.get(key)
    if value is None:
        return None
    param = param or key
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError.invalid_request(f"{param} must be an integer, not {json_type(value)}", param)
    if not low <= value <= high:
        raise ApiError.invalid_request(f"{param} must be between {low} and {high}, not {value}", param)
    return value


def optional_float(
    body: Mapping[str, Any], key: str, low: float, high: float, *, low_open: bool = False, param: str | None = None
) -> float | None:
    """A finite number in ``[low, high]`` (``(low, high]`` with ``low_open``) as a float, or None."""
    value = body.get(key)
    if value is None:
        return None
    param = param or key
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError.invalid_request(f"{param} must be a number, not {json_type(value)}", param)
    # Compare before converting: an int too large for a float must not raise OverflowError.
    in_range = (low < value if low_open else low <= value) and value <= high
    if (isinstance(value, float) and not math.isfinite(value)) or not in_range:
        bracket = "(" if low_open else "["
        raise ApiError.invalid_request(f"{param} must be in {bracket}{low}, {high}], not {value!r}", param)
    return float(value)


def optional_str(body: Mapping[str, Any], key: str, param: str | None = None) -> str | None:
    value = body.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ApiError.invalid_request(f"{param or key} must be a string, not {json_type(value)}", param or key)


def identifier(value: Any, param: str, *, max_length: int = MAX_ID_LENGTH) -> str:
    """A session, instance or turn id (see the module docstring for the rule)."""
    if isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX:
        value = str(value)
    if not isinstance(value, str):
        raise ApiError.invalid_request(f"{param} must be a string, not {json_type(value)}", param)
    if not 1 <= len(value) <= max_length:
        raise ApiError.invalid_request(f"{param} must have 1 to {max_length} characters, not {len(value)}", param)
    if not value.isascii() or not value.isprintable() or value != value.strip(" "):
        raise ApiError.invalid_request(
            f"{param} must be printable ASCII without leading or trailing spaces: {value[:64]!r}", param
        )
    return value


def optional_identifier(body: Mapping[str, Any], key: str, *, max_length: int = MAX_ID_LENGTH) -> str | None:
    """An optional id body field; ``null`` and ``""`` both mean absent."""
    value = body.get(key)
    if value is None or value == "":
        return None
    return identifier(value, key, max_length=max_length)


__all__ = [
    "INT32_MAX", "INT64_MAX", "INT64_MIN", "MAX_ID_LENGTH", "MAX_JSON_DEPTH", "check_json", "identifier", "json_type",
    "field_path", "optional_bool", "optional_float", "optional_identifier", "optional_int", "optional_str",
    "parse_json_body", "require_object", "require_valid_unicode", "shown",
]
