"""Seeded, stable hashing: the single source of every "random" value the engine reports.

Python's ``hash()`` is salted per process, so everything goes through BLAKE2b over a canonical string. Values
depend only on the seed and on what a real model's output would depend on (position, token, weights), which
makes them reproducible across runs and checkable by tests.
"""

from __future__ import annotations

import hashlib


def stable_hash(*parts: object) -> int:
    """A 64-bit integer determined by ``parts`` (their ``repr``s, joined)."""
    data = "\x1f".join(repr(part) for part in parts).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def token_logprob(seed: int, position: int, token_id: int, weight_version: str) -> float:
    """The logprob reported for ``token_id`` sampled at absolute sequence ``position`` under a weight version.

    A negative number in [-4.0, -0.0001], rounded to 6 digits. Deterministic, so a continuation request that
    re-generates the same position under the same weights reports the same value.
    """
    h = stable_hash("logprob", seed, position, token_id, weight_version)
    return -round(0.0001 + (h % 1_000_000) / 1_000_000 * 3.9999, 6)


def prompt_logprob(seed: int, position: int, token_id: int, weight_version: str) -> float:
    """The logprob reported for prompt token ``token_id`` at ``position`` (``input_token_logprobs``)."""
    h = stable_hash("prompt-logprob", seed, position, token_id, weight_version)
    return -round(0.0001 + (h % 1_000_000) / 1_000_000 * 7.9999, 6)
