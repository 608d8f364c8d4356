"""Headless Chromium for the viewer tests: Debian's ``/usr/bin/chromium``, installed on demand, driven by Playwright.

Finding the browser (:func:`ensure_chromium`). The tests use Debian's ``chromium`` package, never a browser that
``playwright install`` downloads (that needs the internet and an unpinned binary). When ``/usr/bin/chromium`` is
missing and the tests run as root on a machine with ``apt-get`` (CI's fresh machine), it is installed once:
``apt-get update`` first when apt knows no ``chromium`` candidate (a fresh image ships no package lists), then
``apt-get install -y --no-install-recommends chromium``, each under a time bound. A file lock serializes the
install across processes (two pytest runs on one machine, the README screenshot script), and the outcome is
remembered for the rest of the process (the apt part is ``tests/debian_packages.py``, shared with other tests that
need a Debian package). When it cannot be had (not root, no apt-get, apt failed or timed out) the
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
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import trio
from playwright.sync_api import Browser, sync_playwright

from tests.debian_packages import PackageUnavailable, ensure_installed, terminal_say

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
T = TypeVar("T")


# The outcome of the first ensure_chromium() of this process: the path, or the reason it failed.
_outcome: Path | PackageUnavailable | None = None


def ensure_chromium(say: Callable[[str], None] = log.warning) -> Path:
    """``/usr/bin/chromium``, installed with apt-get if missing (``tests/debian_packages.py``); raises
    :class:`PackageUnavailable` with the reason.

    ``say`` reports each step (the fixture passes the terminal reporter, so a long install is visible). Tried once
    per process: a failure is remembered, not retried by every test."""
    global _outcome
    if _outcome is None:
        try:
            _outcome = ensure_installed("chromium", CHROMIUM, say)
        except PackageUnavailable as error:
            _outcome = error
    if isinstance(_outcome, PackageUnavailable):
        raise _outcome
    return _outcome


@pytest.fixture(scope="session")
def chromium(pytestconfig: pytest.Config) -> Path:
    """The Chromium executable, installed on first use; skips every browser test, loudly, when it cannot be had."""
    try:
        return ensure_chromium(terminal_say(pytestconfig, log))
    except PackageUnavailable as error:
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
