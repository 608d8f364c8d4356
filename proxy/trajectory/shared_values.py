"""Small immutable values that many sessions hold alike, kept once per process (issue 21 item 5), as Python shares
small ints and interned strings: one weight version's runs, a step's common extras. (Large ones, a context's tools,
are shared through weak tables instead: ``node_contents.py:context_contents``.)

Each kind has its own table, bounded: once a table holds its limit, a new value is built per use and not kept, so a
workload of ever-new values costs what it did without the table, never more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def shared(table: dict[K, V], key: K, build: Callable[[], V], limit: int) -> V:
    """The one immutable value ``table`` holds for ``key`` (built on first use); bounded by ``limit`` values."""
    value = table.get(key)
    if value is None:
        value = build()
        if len(table) < limit:
            table[key] = value
    return value


__all__ = ["shared"]
