"""Server processes for the benchmarks: free ports, start, wait until listening, CPU time, teardown.

Every benchmark runs its servers in their own processes (so their CPU can be read from /proc and the load
generator does not share their event loop) and must leave nothing behind, whatever happens during the run.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds of each live thread of a process (``name:tid``), from the scheduler's own count
    (``/proc/<pid>/task/*/schedstat``, nanoseconds). A thread that ended takes its time with it."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            out[f"{name}:{task.name}"] = int((task / "schedstat").read_text().split()[0]) / 1e9
        except (FileNotFoundError, ProcessLookupError):
            pass  # the thread ended between the listing and the read
    return out


def cpu_since(pid: int, before: dict[str, float]) -> float:
    """CPU seconds the process's threads spent since ``before`` (:func:`thread_cpu_seconds`), from the scheduler's
    exact count, not the tick-sampled utime/stime of :func:`cpu_seconds` (those charge a whole 10 ms tick to whoever
    runs when it fires, so one request of a few ms reads as 0 or 10). Per thread: a thread born since counts from
    zero; one that ended since counts nothing (an idle worker thread trio retires after 10 s). Summing the live
    threads' totals instead, as this bench first did, lost an ended thread's whole lifetime (-41 ms in one turn)."""
    now = thread_cpu_seconds(pid)
    return sum(seconds - before.get(thread, 0.0) for thread, seconds in now.items())


def source_trees(text: str) -> list[tuple[str, str | None]]:
    """``--trees`` (``label=path,...``: source checkouts to compare in one run) as (label, path) pairs; an empty
    text is this checkout alone, ``[("this", None)]``."""
    return [(label, path) for label, _, path in (item.partition("=") for item in text.split(",") if item)] \
        or [("this", None)]


def start_server(argv: list[str], log: Path | None = None, *, source_tree: str | None = None) -> subprocess.Popen:
    """Start a server process; its stderr goes to ``log`` (or nowhere). ``source_tree``: a source checkout put first
    on its PYTHONPATH, so that the installed commands run that checkout's code (a before/after run)."""
    env = dict(os.environ, TRANSFORMERS_VERBOSITY="error")
    if source_tree:
        env["PYTHONPATH"] = source_tree
    stderr = log.open("w") if log is not None else subprocess.DEVNULL
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, env=env)


def wait_listening(port: int, proc: subprocess.Popen, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"server on port {port} did not start")


def stop_servers(procs: dict[str, subprocess.Popen], logs: Path | None = None, keep_logs: bool = False) -> None:
    """Terminate every server (kill after 30 s), then remove the logs folder unless asked to keep it."""
    for proc in procs.values():
        proc.terminate()
    for proc in procs.values():
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    if logs is None:
        return
    if keep_logs:
        print(f"\nlogs and script in {logs}")
    else:
        for f in logs.iterdir():
            f.unlink()
        logs.rmdir()
