"""A real SGLang Model Gateway for the e2e tests: ``smg`` 1.13 (the test extra installs it; its wheel is x86_64 Linux
only), launched on a free loopback port in front of the given worker URLs with ``--policy consistent_hashing``.

``async with smg_gateway(worker_urls) as router_url:`` skips the test loudly when ``smg`` is not installed, waits for
the gateway's ``/readiness``, and stops it (terminate, then kill) when the block ends.
"""

from __future__ import annotations

import shutil
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

#: how long the gateway may take to become ready
READY_TIMEOUT = 60.0


def smg_executable() -> str:
    found = shutil.which("smg") or str(Path(sys.executable).parent / "smg")
    if not Path(found).exists():
        pytest.skip("SKIPPED LOUDLY: the smg gateway is not installed (the test extra installs smg==1.13.0, whose "
                    "wheel exists for x86_64 Linux only); the gateway conformance test did not run")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _until_ready(url: str) -> None:
    async with httpx.AsyncClient(timeout=2.0) as client:
        with trio.fail_after(READY_TIMEOUT):
            while True:
                try:
                    if (await client.get(url + "/readiness")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await trio.sleep(0.2)


@asynccontextmanager
async def smg_gateway(worker_urls: Sequence[str]) -> AsyncIterator[str]:
    """The router URL of an ``smg`` gateway in front of ``worker_urls`` (module docstring)."""
    port = free_port()
    command = [smg_executable(), "launch", "--worker-urls", *worker_urls, "--policy", "consistent_hashing",
               "--host", "127.0.0.1", "--port", str(port), "--prometheus-host", "127.0.0.1",
               "--prometheus-port", str(free_port()), "--log-level", "warn"]
    gateway = await trio.lowlevel.open_process(command)
    try:
        router = f"http://127.0.0.1:{port}"
        await _until_ready(router)
        yield router
    finally:
        gateway.terminate()
        with trio.move_on_after(10):
            await gateway.wait()
        if gateway.returncode is None:
            gateway.kill()
