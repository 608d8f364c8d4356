"""One JSON spelling per value, for in-process keys: sorted keys, compact, UTF-8 text kept.

The message keys of the session trie (``proxy/trajectory/message_keys.py``), TITO's per-kwargs caches and the
chat-template render cache (``proxy/tokenization/``) key values by their JSON. A key must be deterministic (a value
is always spelled the same) and injective (two values that differ, 1 and 1.0 and true included, never share a
spelling). orjson writes most values (two or three keys a request, ~19 us in all with the json module, ~12 us
with this, thread CPU inside the proxy: issue 21 item 2); the json module writes what orjson cannot (an integer
beyond 64 bits, a lone surrogate) and every value holding a NaN or an infinity, which orjson would write as ``null``
(the same spelling as None: not injective). Either spelling reads back to its value, so no two values share one.
Never persisted: a key is rebuilt from the messages it keys (the journal holds the messages), so the spelling may
change between versions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson

from proxy.upstream.wire_json import has_non_finite

_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def canonical_json(value: Any, *, default: Callable[[Any], Any] | None = repr) -> str:
    """``value``'s one spelling. ``default`` spells what is not JSON (repr by default); None refuses it with
    ``TypeError``, as the json module does."""
    try:
        data = orjson.dumps(value, default=default, option=_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return _json_module(value, default)
    if b"null" in data and has_non_finite(value):
        return _json_module(value, default)
    return data.decode("utf-8")


def _json_module(value: Any, default: Callable[[Any], Any] | None) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=default)


__all__ = ["canonical_json"]
