"""Debian packages the tests need, installed by the tests themselves on a fresh machine (CI's ``.ci/run``).

Two ways, both bounded in time, serialized across processes by a file lock, and reported as they happen:

- :func:`ensure_installed`: ``apt-get install -y --no-install-recommends PACKAGE`` as root (Chromium for
  ``tests/ui/``: it needs its libraries installed system-wide).
- :func:`ensure_extracted`: ``apt-get download PACKAGE`` and ``dpkg-deb -x`` into a cache folder, for a
  self-contained binary the tests only run (``promtool`` from ``prometheus``: a static Go binary; installing the
  package would also install and try to start a Prometheus server).

``apt-get update`` runs first only when apt knows no candidate for the package (a fresh image ships no package
lists), and once more if an install fails on stale lists. A failure raises :class:`PackageUnavailable` with the
reason; callers skip their tests with it, loudly (the suite runs with ``-ra``).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: apt-get bounds, in seconds: a fresh machine may download ~100 MB (Chromium with its libraries). Their sum bounds
#: one whole install, the retry after stale package lists included.
APT_UPDATE_TIMEOUT = 300
APT_INSTALL_TIMEOUT = 900
#: where extracted packages are kept between runs
EXTRACT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dressage-proxy" / "debian"

Say = Callable[[str], None]


class PackageUnavailable(Exception):
    """A package the tests need is missing and could not be had; the message says why."""


def terminal_say(pytestconfig: Any, log: logging.Logger) -> Say:
    """A ``say`` for a session fixture: each line on the terminal as it happens (an install takes minutes), past
    pytest's capture, and in the log."""
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")

    def say(line: str) -> None:
        log.warning("%s", line)
        if reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(line, yellow=True)

    return say


def runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def ensure_installed(package: str, executable: Path, say: Say) -> Path:
    """``executable``, installing Debian's ``package`` (as root) when it is missing."""
    if runnable(executable):
        return executable
    if os.geteuid() != 0:
        raise PackageUnavailable(
            f"{executable} is missing and the tests do not run as root, so they cannot install Debian's {package} "
            f"package (run `apt-get install {package}` as root, or run the suite as root)"
        )
    if shutil.which("apt-get") is None:
        raise PackageUnavailable(f"{executable} is missing and there is no apt-get to install Debian's {package}")
    deadline = time.monotonic() + APT_UPDATE_TIMEOUT + APT_INSTALL_TIMEOUT
    with install_lock(package, deadline):
        if runnable(executable):  # another process installed it while we waited for the lock
            say(f"tests: {executable} was installed by another process")
            return executable
        _with_fresh_lists(package, say, deadline,
                          lambda: run_apt(say, ["apt-get", "install", "-y", "--no-install-recommends", package],
                                          APT_INSTALL_TIMEOUT, deadline))
    if not runnable(executable):
        raise PackageUnavailable(f"apt-get installed the {package} package but {executable} is not an executable")
    say(f"tests: installed Debian's {package} ({executable})")
    return executable


def ensure_extracted(package: str, member: str, say: Say) -> Path:
    """``member`` (a path inside the package, e.g. ``usr/bin/promtool``) of Debian's ``package``, downloaded and
    unpacked into :data:`EXTRACT_CACHE` on first use (no root needed once apt has package lists)."""
    folder = EXTRACT_CACHE / package
    target = folder / member
    if runnable(target):
        return target
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise PackageUnavailable(f"no apt-get/dpkg-deb to fetch Debian's {package} package")
    deadline = time.monotonic() + APT_UPDATE_TIMEOUT + APT_INSTALL_TIMEOUT
    with install_lock(package, deadline):
        if runnable(target):
            return target
        with tempfile.TemporaryDirectory() as download:
            _with_fresh_lists(package, say, deadline,
                              lambda: run_apt(say, ["apt-get", "download", package], APT_INSTALL_TIMEOUT, deadline,
                                              cwd=download))
            debs = sorted(Path(download).glob(f"{package}_*.deb"))
            if not debs:
                raise PackageUnavailable(f"`apt-get download {package}` left no .deb file")
            unpacked = Path(tempfile.mkdtemp(prefix=f"{package}-", dir=_made(EXTRACT_CACHE)))
            subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], check=True, timeout=300)
            shutil.rmtree(folder, ignore_errors=True)
            unpacked.rename(folder)  # whole or not at all: a half-unpacked folder is never under the final name
    if not runnable(target):
        raise PackageUnavailable(f"Debian's {package} package has no executable {member}")
    say(f"tests: unpacked Debian's {package} ({target})")
    return target


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _with_fresh_lists(package: str, say: Say, deadline: float, action: Callable[[], None]) -> None:
    """``action`` (an install or download of ``package``), with ``apt-get update`` first when apt knows no candidate,
    and once more (then a retry) when the action fails on lists that may be stale."""
    updated = False
    if not apt_has_candidate(package):
        run_apt(say, ["apt-get", "update"], APT_UPDATE_TIMEOUT, deadline)
        updated = True
    try:
        action()
    except PackageUnavailable:
        if updated:
            raise
        # Stale package lists name versions the mirror no longer has: refresh them once and retry.
        run_apt(say, ["apt-get", "update"], APT_UPDATE_TIMEOUT, deadline)
        action()


@contextlib.contextmanager
def install_lock(package: str, deadline: float) -> Iterator[None]:
    """An exclusive machine-wide lock for fetching ``package``, waited for until ``deadline``."""
    path = Path(tempfile.gettempdir()) / f"dressage-proxy-{package}-install.lock"
    with open(path, "a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise PackageUnavailable(f"waited too long for another process's {package} install ({path})") \
                        from None
                time.sleep(1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def apt_has_candidate(package: str) -> bool:
    """Whether apt's package lists name a version of ``package`` to install."""
    try:
        result = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False  # then apt-get update runs, and fails with a reason if apt is broken
    return any(
        line.strip().startswith("Candidate:") and line.split(":", 1)[1].strip() not in ("", "(none)")
        for line in result.stdout.splitlines()
    )


def run_apt(say: Say, command: list[str], timeout: float, deadline: float, cwd: str | None = None) -> None:
    """Run an apt-get command within ``timeout`` seconds and before ``deadline``; PackageUnavailable if not."""
    timeout = min(timeout, deadline - time.monotonic())
    # DPkg::Lock::Timeout: wait for another apt (a concurrent install, unattended upgrades) instead of failing.
    command = [command[0], "-o", "DPkg::Lock::Timeout=120", *command[1:]]
    if timeout <= 0:
        raise PackageUnavailable(f"no time left for `{' '.join(command)}` (the install is bounded)")
    say(f"tests: running `{' '.join(command)}` (up to {timeout:.0f} s)")
    started = time.monotonic()
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, cwd=cwd,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    except subprocess.TimeoutExpired:
        raise PackageUnavailable(f"`{' '.join(command)}` did not finish within {timeout:.0f} s") from None
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-8:])
        raise PackageUnavailable(f"`{' '.join(command)}` failed (exit {result.returncode}):\n{tail}")
    say(f"tests: `{' '.join(command)}` done in {time.monotonic() - started:.0f} s")
