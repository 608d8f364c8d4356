"""``dressage-proxy export`` as a process: an interrupted export leaves nothing under the final name (SIGKILL at a
crash point, SIGINT mid-way), progress goes to a terminal and nothing to a pipe, and every error is one clear line
with its exit code. The stores are filled directly (``open_store(...).write``): what is tested is the command."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import struct
import subprocess
import termios
from pathlib import Path

import pytest
import trio

from proxy.export_command import export_main

from .exporting import EXPORT, ROOT, fill_store, leftovers, run_export, synthetic_segment

#: sessions x segments in the store of the interruption tests: with --batch-size 1, thousands of batches
LARGE = (30, 100)


@pytest.fixture(scope="module")
def large_store(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("large") / "store.sqlite3"
    url = f"sqlite:///{path}"
    trio.run(fill_store, url, LARGE[0], 256, LARGE[1])
    return url


async def test_an_export_killed_mid_way_leaves_the_previous_file_untouched(large_store, tmp_path) -> None:
    out = tmp_path / "export.parquet"
    out.write_bytes(b"the previous export")
    # SIGKILL after the third batch was written to the partial file: nothing can clean up.
    done = await run_export("--store", large_store, "--out", str(out), "--batch-size", "10",
                            env={"DRESSAGE_CRASH_POINT": "export.batch.after:3"})
    assert done.returncode == -signal.SIGKILL
    assert out.read_bytes() == b"the previous export"
    (partial,) = [name for name in leftovers(tmp_path, out.name) if name != out.name]
    assert (tmp_path / partial).stat().st_size > 0  # it was killed mid-way, under the partial name


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
async def test_an_export_interrupted_mid_way_removes_its_partial_file(large_store, tmp_path, stop) -> None:
    out = tmp_path / "export.jsonl"
    process = await trio.lowlevel.open_process(
        [*EXPORT, "--store", large_store, "--out", str(out), "--batch-size", "1"], cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        # Mid-way: the partial file has grown (batches are being written).
        with trio.fail_after(120):
            while not any(p.name.startswith("export.jsonl.partial-") and p.stat().st_size > 0
                          for p in list(tmp_path.iterdir())):
                await trio.sleep(0.02)
        process.send_signal(stop)
        with trio.fail_after(120):
            code = await process.wait()
        errors = await process.stderr.receive_some(65536)
    finally:
        process.kill()
    assert code == 128 + stop, errors.decode()
    assert leftovers(tmp_path, out.name) == []
    assert b"interrupted" in errors and b"Traceback" not in errors


@pytest.mark.parametrize("with_size", [True, False], ids=["120 columns", "no size"])
async def test_progress_shows_on_a_terminal_and_nothing_goes_to_a_pipe(tmp_path, with_size: bool) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    await fill_store(url, 40)
    primary, secondary = pty.openpty()
    if with_size:
        fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))  # rows, columns
    try:
        process = await trio.lowlevel.open_process(
            [*EXPORT, "--store", url, "--out", str(tmp_path / "tty.jsonl"), "--batch-size", "8"], cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=secondary,
        )
        os.close(secondary)
        shown = b""
        with trio.fail_after(120):
            while True:
                try:
                    chunk = await trio.to_thread.run_sync(os.read, primary, 65536)
                except OSError:  # EIO: the process closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            assert await process.wait() == 0
    finally:
        os.close(primary)
    text = shown.decode(errors="replace")
    assert "40/40" in text and "segments" in text and "tokens" in text, text  # tqdm's bar, with the token count
    assert "2,560 tokens" in text and "40 segment(s)" in text, text
    if not with_size:
        return
    piped = await run_export("--store", url, "--out", str(tmp_path / "pipe.jsonl"))
    assert piped.returncode == 0 and piped.stderr == b"" and piped.stdout == b""
    assert (tmp_path / "tty.jsonl").read_bytes() == (tmp_path / "pipe.jsonl").read_bytes()
    assert json.loads((tmp_path / "pipe.jsonl").read_text().splitlines()[39]) == synthetic_segment(39)


async def test_a_missing_store_is_a_clear_error_without_a_traceback(tmp_path) -> None:
    missing = tmp_path / "nowhere.sqlite3"
    done = await run_export("--store", f"sqlite:///{missing}", "--out", str(tmp_path / "x.jsonl"))
    assert done.returncode == 2
    assert done.stderr.decode().startswith("dressage-proxy export: error: cannot open the store:")
    assert "no such store" in done.stderr.decode() and b"Traceback" not in done.stderr
    assert not missing.exists(), "an export never creates a store"
    assert leftovers(tmp_path, "x.jsonl") == []


def fails(argv: list[str], capsys) -> tuple[int, str]:
    code = export_main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return code, err


def test_usage_errors_exit_2_with_one_line(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    trio.run(fill_store, url, 2)
    cases = {
        "memory": (["--store", "memory", "--out", str(tmp_path / "m.jsonl")], "memory"),
        "bad url": (["--store", "mysql://x", "--out", str(tmp_path / "m.jsonl")], "expected memory, sqlite"),
        "no folder": (["--store", url, "--out", str(tmp_path / "no" / "m.jsonl")], "no such folder"),
        "a folder": (["--store", url, "--format", "jsonl", "--out", str(tmp_path)], "is a folder"),
        "not a store": (["--store", f"sqlite:///{tmp_path / 'junk.sqlite3'}", "--out", str(tmp_path / "m.jsonl")],
                        "not a trajectory store"),
    }
    (tmp_path / "junk.sqlite3").write_bytes(b"this is no database" * 100)
    for name, (argv, message) in cases.items():
        code, err = fails(argv, capsys)
        assert code == 2 and message in err, (name, err)
    assert not list(tmp_path.rglob("m.jsonl*")), "no output, not even a partial one"


def test_a_suffix_that_names_no_format_needs_format(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        export_main(["--store", "sqlite", "--out", str(tmp_path / "export.txt")])
    assert exited.value.code == 2 and "--format" in capsys.readouterr().err
