"""Fixtures of the preemptible-generation suite (``harness.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.pause.harness import PauseStack, serve_pause_stack

StartStack = Callable[..., Awaitable[PauseStack]]


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    """Jumps once every task has been idle 20 ms of real time (loopback I/O is never mistaken for idleness)."""
    return trio.testing.MockClock(autojump_threshold=0.02)


@pytest.fixture
def start_stack(nursery: trio.Nursery, qwen3_path: Path) -> StartStack:
    """``await start_stack(script=[...], engine={...}, workers=True, **proxy_config)`` -> :class:`PauseStack`."""

    async def start(**kwargs: Any) -> PauseStack:
        return await nursery.start(lambda task_status: serve_pause_stack(qwen3_path, task_status=task_status,
                                                                         **kwargs))

    return start
