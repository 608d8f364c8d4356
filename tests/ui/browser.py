"""Headless Chromium for the viewer tests: Debian's ``/usr/bin/chromium``, installed on demand, driven by Playwright.

Finding the browser (:func:`ensure_chromium`). The tests use Debian's ``chromium`` package, never a browser that
``playwright install`` downloads (that needs the internet and an unpinned binary). When ``/usr/bin/chromium`` is
missing and the tests run as root on a machine with ``apt-get`` (CI's fresh machine), it is installed once:
``apt-get update`` first when apt knows no ``chromium`` candidate (a fresh image ships no package lists), then
``apt-get install -y --no-install-recommends chromium``, each under a time bound. A file lock serializes the
install across processes (two pytest runs on one machine, the README screenshot script), and the outcome is
remembered for the rest of the process. When it cannot be had (not root, no apt-get, apt failed or timed out) the
tests skip with the reason, which ``-ra`` (the suite's ``addopts``) prints in the summary.

Why the install is here and not in ``./dev setup``: only the browser tests need Chromium (~250 MB with its
libraries). ``./dev setup`` also runs before ``./dev serve`` on a developer's machine, where it must not start apt as
root; here it runs only when a browser test is collected and selected, and CI (``.ci/run`` = ``./dev test``) gets
it without a step of its own.

Driving it (:func:`run_in_browser`). The tests run under trio; Playwright's sync API runs its own event loop, so a
whole browser session (launch, pages, close) runs in one worker thread (``trio.to_thread.run_sync``) while the proxy
under test keeps serving on the trio loop. Playwright objects stay in the thread that made them.
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
from typing import TypeVar

import pytest
import trio
from playwright.sync_api import Browser, sync_playwright

log = logging.getLogger("tests.ui.browser")

#: Debian's chromium package installs the browser here.
CHROMIUM = Path("/usr/bin/chromium")
#: Headless flags. The closed network of CI and this machine refuses Chromium's background connections (update
#: checks, sync, component downloads, QUIC probes), which would otherwise stall or spam the log; no sandbox because
#: the tests run as root in a container, where Chromium's sandbox cannot start.
CHROMIUM_ARGS = (
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
)
#: apt-get bounds, in seconds: a fresh machine downloads ~100 MB of packages. Their sum bounds the whole install,
#: the retry after stale package lists included.
APT_UPDATE_TIMEOUT = 300
APT_INSTALL_TIMEOUT = 900
#: One install at a time on a machine (the lock file is shared by every checkout).
INSTALL_LOCK = Path(tempfile.gettempdir()) / "dressage-proxy-chromium-install.lock"

T = TypeVar("T")


class ChromiumUnavailable(Exception):
    """Chromium is not installed and could not be installed; the message says why."""


# The outcome of the first ensure_chromium() of this process: the path, or the reason it failed.
_outcome: Path | ChromiumUnavailable | None = None


def ensure_chromium(say: Callable[[str], None] = log.warning) -> Path:
    """``/usr/bin/chromium``, installed with apt-get if missing; raises :class:`ChromiumUnavailable` with the reason.

    ``say`` reports each step (the fixture passes the terminal reporter, so a long install is visible). Tried once
    per process: a failure is remembered, not retried by every test."""
    global _outcome
    if _outcome is None:
        try:
            _outcome = _find_or_install(say)
        except ChromiumUnavailable as error:
            _outcome = error
    if isinstance(_outcome, ChromiumUnavailable):
        raise _outcome
    return _outcome


def _find_or_install(say: Callable[[str], None]) -> Path:
    if _runnable(CHROMIUM):
        return CHROMIUM
    if os.geteuid() != 0:
        raise ChromiumUnavailable(
            f"{CHROMIUM} is missing and the tests do not run as root, so they cannot install Debian's chromium "
            "package (run `apt-get install chromium` as root, or run the suite as root)"
        )
    if shutil.which("apt-get") is None:
        raise ChromiumUnavailable(f"{CHROMIUM} is missing and there is no apt-get to install Debian's chromium")
    deadline = time.monotonic() + APT_UPDATE_TIMEOUT + APT_INSTALL_TIMEOUT
    with _install_lock(deadline):
        if _runnable(CHROMIUM):  # another process installed it while we waited for the lock
            say(f"tests/ui: {CHROMIUM} was installed by another process")
            return CHROMIUM
        updated = False
        if not _apt_has_candidate():
            _apt(say, ["apt-get", "update"], APT_UPDATE_TIMEOUT, deadline)
            updated = True
        install = ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]
        try:
            _apt(say, install, APT_INSTALL_TIMEOUT, deadline)
        except ChromiumUnavailable:
            if updated:
                raise
            # Stale package lists name versions the mirror no longer has: refresh them once and retry.
            _apt(say, ["apt-get", "update"], APT_UPDATE_TIMEOUT, deadline)
            _apt(say, install, APT_INSTALL_TIMEOUT, deadline)
    if not _runnable(CHROMIUM):
        raise ChromiumUnavailable(f"apt-get installed the chromium package but {CHROMIUM} is not an executable")
    say(f"tests/ui: installed Debian's chromium at {CHROMIUM}")
    return CHROMIUM


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


@contextlib.contextmanager
def _install_lock(deadline: float) -> Iterator[None]:
    """An exclusive lock on :data:`INSTALL_LOCK`, waited for until ``deadline``."""
    with open(INSTALL_LOCK, "a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ChromiumUnavailable(
                        f"waited too long for another process's chromium install (lock {INSTALL_LOCK})"
                    ) from None
                time.sleep(1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _apt_has_candidate() -> bool:
    """Whether apt's package lists name a ``chromium`` version to install."""
    try:
        result = subprocess.run(["apt-cache", "policy", "chromium"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False  # then apt-get update runs, and fails with a reason if apt is broken
    return any(
        line.strip().startswith("Candidate:") and line.split(":", 1)[1].strip() not in ("", "(none)")
        for line in result.stdout.splitlines()
    )


def _apt(say: Callable[[str], None], command: list[str], timeout: float, deadline: float) -> None:
    """Run an apt-get command within ``timeout`` seconds and before ``deadline``; raise ChromiumUnavailable if not."""
    timeout = min(timeout, deadline - time.monotonic())
    # DPkg::Lock::Timeout: wait for another apt (a concurrent install, unattended upgrades) instead of failing.
    command = [command[0], "-o", "DPkg::Lock::Timeout=120", *command[1:]]
    if timeout <= 0:
        raise ChromiumUnavailable(f"no time left for `{' '.join(command)}` (the install is bounded)")
    say(f"tests/ui: {CHROMIUM} is missing; running `{' '.join(command)}` (up to {timeout:.0f} s)")
    started = time.monotonic()
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    except subprocess.TimeoutExpired:
        raise ChromiumUnavailable(f"`{' '.join(command)}` did not finish within {timeout:.0f} s") from None
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-8:])
        raise ChromiumUnavailable(f"`{' '.join(command)}` failed (exit {result.returncode}):\n{tail}")
    say(f"tests/ui: `{' '.join(command)}` done in {time.monotonic() - started:.0f} s")


@pytest.fixture(scope="session")
def chromium(pytestconfig: pytest.Config) -> Path:
    """The Chromium executable, installed on first use; skips every browser test, loudly, when it cannot be had."""
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")

    def say(line: str) -> None:
        # On the terminal as it happens (an install takes minutes), past pytest's capture, and in the log.
        log.warning("%s", line)
        if reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(line, yellow=True)

    try:
        return ensure_chromium(say)
    except ChromiumUnavailable as error:
        pytest.skip(f"NO BROWSER, the viewer is untested in Chromium: {error}")


@contextlib.contextmanager
def launched(executable: Path) -> Iterator[Browser]:
    """A headless Chromium on ``executable``, closed on exit. Call from one thread."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(executable), headless=True, args=list(CHROMIUM_ARGS))
        try:
            yield browser
        finally:
            browser.close()


async def run_in_browser(executable: Path, session: Callable[[Browser], T]) -> T:
    """``session(browser)`` with a fresh headless Chromium, in a worker thread (see the module docstring)."""

    def run() -> T:
        with launched(executable) as browser:
            return session(browser)

    return await trio.to_thread.run_sync(run)
