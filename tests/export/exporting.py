"""Helpers of the export tests: ``dressage-proxy export`` as a real subprocess, a store filled without a proxy, and
segments as a float32 Parquet file holds them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy
import trio

from proxy.trajectory.stores import open_store

ROOT = Path(__file__).resolve().parents[2]
EXPORT = [sys.executable, "-m", "proxy.cli", "export"]


async def run_export(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``dressage-proxy export ARGS`` to its end, output captured (stdin, stdout and stderr are pipes)."""
    return await trio.run_process([*EXPORT, *args], cwd=ROOT, capture_stdout=True, capture_stderr=True,
                                  check=False, env={**os.environ, **(env or {})})


def synthetic_segment(index: int, tokens: int = 64, segment: int = 0) -> dict[str, Any]:
    """A segment with every field the exporter builds, of ``tokens`` tokens (for stores filled without a proxy)."""
    half = tokens // 2
    return {
        "trajectory_id": f"s{index}:{segment}", "parent_traj_id": f"s{index}", "rollout_id": f"s{index}",
        "instance_id": None, "segment_index": segment, "segment_count": segment + 1, "build_mode": "concat",
        "num_turns": 1, "step_ids": [1], "tip_step": 1, "finish_reason": "stop", "boundary_reason": "session_start",
        "boundary_detail": None, "forked_from_step": None, "reward_info": {"reward": index},
        "finalize_reason": "requested", "messages": [{"role": "user", "content": f"question {index}"}],
        "tools": None, "chat_template_kwargs": {},
        "token_ids": list(range(index, index + tokens)), "loss_mask": [0] * half + [1] * (tokens - half),
        "logprobs": [0.0] * half + [-0.25] * (tokens - half), "logprobs_absent_reason": None,
        "steps": [{"step_id": 1, "trained": True}],
    }


async def fill_store(url: str, sessions: int, tokens: int = 64, per_session: int = 1) -> None:
    """A durable store holding ``sessions`` finalized sessions of ``per_session`` synthetic segments each."""
    async with open_store(url) as store:
        for index in range(sessions):
            segments = [synthetic_segment(index, tokens, k) for k in range(per_session)]
            await store.write(f"s{index}", segments, result={"session_id": f"s{index}"})


def as_float32(segments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The segments with their logprobs rounded to float32, as the Parquet export stores them."""
    rounded = []
    for segment in segments:
        logprobs = segment.get("logprobs")
        if logprobs is not None:
            logprobs = numpy.asarray(logprobs, dtype=numpy.float32).astype(float).tolist()
        rounded.append({**segment, "logprobs": logprobs})
    return rounded


def leftovers(folder: Path, name: str) -> list[str]:
    """The files in ``folder`` named ``name`` or a partial of it."""
    return sorted(p.name for p in folder.iterdir() if p.name == name or p.name.startswith(f"{name}.partial-"))
