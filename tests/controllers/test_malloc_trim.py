"""Freed memory goes back to the OS (proxy/controllers/malloc_trim.py): glibc's malloc_trim, off the event loop."""

from __future__ import annotations

import logging

import pytest
import trio

from proxy.cli import build_parser, config_from_args
from proxy.controllers.malloc_trim import find_malloc_trim, run_malloc_trim, trim_once

TRIM = find_malloc_trim()
needs_glibc = pytest.mark.skipif(TRIM is None, reason="this C library has no malloc_trim (not glibc)")


def _churn_in_a_thread() -> list[bytes]:
    """What a large request does in a worker thread: ~80 MB of malloc'd buffers in the thread's arena, freed but for
    one in 50 (the pins keep the arena's top from shrinking by itself)."""
    blocks = [bytes(4000) for _ in range(20_000)]
    pins = blocks[::50]
    del blocks
    return pins


@needs_glibc
async def test_a_trim_gives_back_what_a_worker_thread_freed():
    pins = await trio.to_thread.run_sync(_churn_in_a_thread)
    released = await trim_once(TRIM)
    assert released is not None and released > 40 * 2**20, released  # of ~78 MB freed
    assert len(pins) == 400


@needs_glibc
async def test_the_timer_trims_every_interval_and_logs_what_it_gave_back(caplog):
    caplog.set_level(logging.DEBUG, logger="dressage_proxy.malloc_trim")
    with trio.move_on_after(0.5):
        await run_malloc_trim(0.1)
    trims = [record for record in caplog.records if record.getMessage().startswith("malloc_trim")]
    assert len(trims) >= 2 and all(isinstance(record.rss_bytes, int) for record in trims)


def test_the_flag_sets_the_interval_and_zero_turns_it_off():
    parse = build_parser().parse_args
    assert config_from_args(parse([])).malloc_trim_interval == 60.0
    assert config_from_args(parse(["--malloc-trim-interval", "5"])).malloc_trim_interval == 5.0
    assert config_from_args(parse(["--malloc-trim-interval", "0"])).malloc_trim_interval is None
