"""Seeded, stable hashing: the single source of every "random" value the engine reports.

Python's ``hash()`` is salted per process, so everything goes through BLAKE2b over a canonical string. Values
depend only on the seed and on what a real model's output would depend on (position, token, weights), which
makes them reproducible across runs and checkable by tests.
"""

from __future__ import annotations

import hashlib
import struct

_FLOAT32 = struct.Struct("<f")


def as_float32(value: float) -> float:
    """``value`` rounded to the nearest float32, as a Python float: what SGLang reports (its logprobs are float32
    tensors turned into lists), so a client can store them in 4 bytes without losing a bit."""
    return _FLOAT32.unpack(_FLOAT32.pack(value))[0]


def stable_hash(*parts: object) -> int:
    """A 64-bit integer determined by ``parts`` (their ``repr``s, joined)."""
    data = "\x1f".join(repr(part) for part in parts).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def token_logprob(seed: int, position: int, token_id: int, weight_version: str) -> float:
    """The logprob reported for ``token_id`` sampled at absolute sequence ``position`` under a weight version.

    A negative number in [-4.0, -0.0001] (6 digits, then the nearest float32, as SGLang's are). Deterministic, so a
    continuation request that re-generates the same position under the same weights reports the same value.
    """
    h = stable_hash("logprob", seed, position, token_id, weight_version)
    return as_float32(-round(0.0001 + (h % 1_000_000) / 1_000_000 * 3.9999, 6))


def prompt_logprob(seed: int, position: int, token_id: int, weight_version: str) -> float:
    """The logprob reported for prompt token ``token_id`` at ``position`` (``input_token_logprobs``)."""
    h = stable_hash("prompt-logprob", seed, position, token_id, weight_version)
    return as_float32(-round(0.0001 + (h % 1_000_000) / 1_000_000 * 7.9999, 6))
