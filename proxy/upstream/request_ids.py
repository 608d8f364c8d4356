"""Request ids (``rid``) for SGLang: unique, and never a prefix of one another.

SGLang's scheduler aborts by prefix (``req.rid.startswith(rid)``, sglang-protocol.md §2.1), so aborting ``"abc"``
would also kill an in-flight ``"abc-2"``. The argument for the scheme below:

* every rid has the **same length** (32 characters), and a string is a prefix of another string of the same
  length only if the two are equal; so distinct rids are never prefixes of each other;
* rids are **distinct** with overwhelming probability: :func:`proxy.random_ids.random_hex` draws 128 random
  bits from ``os.urandom``, so among a billion rids the chance of any collision is about 1e-20 (birthday bound
  ``n**2 / 2**129``).

The client refuses any other rid shape (:func:`check_rid`), including for ``abort``, so that an abort can never
hit a request it was not aimed at.
"""

from __future__ import annotations

import re

from proxy.random_ids import random_hex

RID_LENGTH = 32
_RID_RE = re.compile(r"[0-9a-f]{32}")


def new_rid() -> str:
    """A fresh rid: 32 lowercase hex digits (:func:`~proxy.random_ids.random_hex`)."""
    return random_hex()


def is_valid_rid(rid: object) -> bool:
    """True for exactly the shape :func:`new_rid` produces (32 lowercase hex digits)."""
    return isinstance(rid, str) and _RID_RE.fullmatch(rid) is not None


def check_rid(rid: str) -> str:
    """Return ``rid`` if it is valid, else raise ``ValueError`` (a prefix-unsafe rid is a programming error)."""
    if not is_valid_rid(rid):
        raise ValueError(f"rid must be {RID_LENGTH} lowercase hex digits (prefix-safe), got {rid!r}")
    return rid
