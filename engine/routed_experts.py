"""Synthetic MoE routing for routing replay (sglang-protocol.md §1.4).

SGLang returns base64 of a C-contiguous int32 array ``[seqlen - 1 - start_len, num_layers, top_k]``: row ``p`` is
the routing computed at the step where position ``p`` was the *input* token (the last sampled token is never fed
forward, so it has no row). Here a row is a pure function of (seed, position, token id at that position, the weight
version of that step), so tests can recompute any row with :func:`expected_row` and check it.
"""

from __future__ import annotations

import base64
import sys
from array import array
from collections.abc import Sequence

from .determinism import stable_hash

_INT32 = "i" if array("i").itemsize == 4 else "l"


def expected_row(
    seed: int, position: int, token_id: int, weight_version: str, num_layers: int, num_experts: int, top_k: int
) -> list[list[int]]:
    """The ``[num_layers][top_k]`` expert ids routed for input ``token_id`` at ``position`` (distinct per layer)."""
    row = []
    for layer in range(num_layers):
        h = stable_hash("experts", seed, position, token_id, weight_version, layer)
        chosen: list[int] = []
        step = 0
        while len(chosen) < top_k:
            expert = (h >> (5 * step)) % num_experts if step < 12 else (h + step) % num_experts
            if expert not in chosen:
                chosen.append(expert)
            step += 1
        row.append(chosen)
    return row


def encode_routed_experts(
    *,
    seed: int,
    tokens: Sequence[int],
    step_versions: Sequence[str],
    start_len: int,
    num_layers: int,
    num_experts: int,
    top_k: int,
) -> str:
    """Base64 of the int32 rows for positions ``start_len .. len(tokens) - 2``.

    ``tokens`` is prompt + output; ``step_versions[p]`` is the weight version of the step where position ``p`` was
    the input token (so ``len(step_versions) >= len(tokens) - 1``).
    """
    values = array(_INT32)
    for position in range(start_len, len(tokens) - 1):
        for layer in expected_row(
            seed, position, tokens[position], step_versions[position], num_layers, num_experts, top_k
        ):
            values.extend(layer)
    if sys.byteorder != "little":
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def decode_routed_experts(data: str, num_layers: int, top_k: int) -> list[list[list[int]]]:
    """The inverse of :func:`encode_routed_experts` (for tests and tools): rows of ``[layer][k]`` expert ids."""
    values = array(_INT32)
    values.frombytes(base64.b64decode(data))
    if sys.byteorder != "little":
        values.byteswap()
    per_row = num_layers * top_k
    if len(values) % per_row:
        raise ValueError(f"{len(values)} int32 values do not split into rows of {num_layers}x{top_k}")
    flat = values.tolist()
    return [
        [flat[r + layer * top_k : r + (layer + 1) * top_k] for layer in range(num_layers)]
        for r in range(0, len(flat), per_row)
    ]
