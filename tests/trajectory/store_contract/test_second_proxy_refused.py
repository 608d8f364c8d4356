"""A second ``dressage-proxy`` process on a SQLite file another proxy holds refuses to start, exit status 1, with a
log line that names the file and the holding process and says what to do instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from proxy.trajectory.stores import open_store

ROOT = Path(__file__).resolve().parents[3]


async def test_a_second_proxy_on_a_held_sqlite_file_refuses_to_start_and_says_why(tmp_path):
    url = f"sqlite:///{tmp_path / 'held.sqlite3'}"
    async with open_store(url):
        second = subprocess.run(
            [sys.executable, "-m", "proxy.cli", "--store", url, "--host", "127.0.0.1", "--port", "0"],
            cwd=ROOT, capture_output=True, text=True, timeout=120, env=os.environ.copy(),
        )
    assert second.returncode == 1, second.stderr[-2000:]
    messages = [json.loads(line)["message"] for line in second.stderr.splitlines() if line.startswith("{")]
    assert any(
        f"StoreInUseError: {url} is in use by process {os.getpid()}: a SQLite store belongs to one proxy" in message
        for message in messages
    ), messages
