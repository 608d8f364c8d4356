"""A real ``dressage-proxy`` process that the durability tests kill with SIGKILL and start again on the same store.

:class:`ProxyProcess` runs ``python -m proxy.cli`` (the installed ``dressage-proxy``) on its embedded engine, on
``--port 0``, and learns its URL from the process's own ``listening on <url>`` log line. A supervisor task keeps
it running: whenever the process dies (killed by the test with :meth:`ProxyProcess.kill`, or by itself at an armed
``DRESSAGE_CRASH_POINT``, ``proxy/trajectory/stores/crash_points.py``) it records the death and starts a new process
on the same ``--store``. The crash point is armed in the FIRST process only: the restarted one completes the work.

Agents never hold a URL for long: they ask :meth:`ProxyProcess.current` for (generation, url) and, after a
connection error or a 5xx, wait with :meth:`ProxyProcess.wait_past` until a later generation is up (or a moment
passed, for a 5xx from a live process).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import attrs
import trio

from proxy.trajectory.stores.crash_points import CRASH_POINT_ENV

#: seconds a start may take (imports, tokenizer, engine) before the test fails; never asserted on otherwise
START_BOUND = 120.0
#: the log line that carries the proxy's URL (proxy/cli.py:run_proxy)
LISTENING = "listening on "


@attrs.frozen
class Death:
    """One end of a proxy process the test did not ask for with :meth:`ProxyProcess.stop`."""

    generation: int
    returncode: int | None
    #: True when the test sent the SIGKILL (a random kill), False when the process died by itself (a crash point)
    killed_by_test: bool


@attrs.define(eq=False)
class ProxyProcess:
    """A supervised proxy process on one store (see the module docstring)."""

    store: str
    tokenizer_path: Path
    logs: Path
    #: extra command-line flags of every start
    flags: Sequence[str] = ()
    #: ``NAME[:N]`` armed in the first process only (None: no crash point)
    crash_point: str | None = None
    deaths: list[Death] = attrs.field(factory=list)
    generation: int = 0
    url: str | None = None
    _process: trio.Process | None = None
    _changed: trio.Event = attrs.field(factory=trio.Event)
    _stopping: bool = False
    _killing: bool = False

    # -- for agents -----------------------------------------------------------------------------------------------

    async def current(self) -> tuple[int, str]:
        """The generation and URL of the proxy that is up now (waits while none is)."""
        while self.url is None:
            await self._wait_change()
        return self.generation, self.url

    async def wait_past(self, generation: int, *, seconds: float = 0.2) -> None:
        """After a failed request to ``generation``: return once a later generation is up, or after ``seconds`` if
        this one is still up (a 5xx from a live proxy: try it again)."""
        with trio.move_on_after(seconds):
            while self.generation == generation and self.url is not None:
                await self._wait_change()
        while self.url is None:
            await self._wait_change()

    async def _wait_change(self) -> None:
        event = self._changed
        await event.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # -- for the test -------------------------------------------------------------------------------------------

    def kill(self) -> bool:
        """SIGKILL the process that is up (the supervisor starts the next one); False if none is up."""
        if self._process is None or self._process.returncode is not None or self._killing or self.url is None:
            return False
        self._killing = True
        self._process.send_signal(signal.SIGKILL)
        return True

    async def kill_and_restart(self) -> bool:
        """:meth:`kill`, then wait until the next process is up; False if none was up to kill."""
        generation = self.generation
        if not self.kill():
            return False
        while self.generation == generation or self.url is None:
            await self._wait_change()
        return True

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    async def supervise(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the proxy, report once it is up, and start it again whenever it dies, until cancelled (which kills
        the running process: the tests end every process they start)."""
        started = False
        try:
            while True:
                await self._start()
                if not started:
                    started = True
                    task_status.started()
                assert self._process is not None
                await self._process.wait()
                self.deaths.append(Death(self.generation, self._process.returncode, self._killing))
                self.url = None
                self._killing = False
                self._notify()
        finally:
            if self._process is not None and self._process.returncode is None:
                self._process.kill()
                with trio.CancelScope(shield=True):
                    await self._process.wait()

    async def _start(self) -> None:
        generation = self.generation + 1
        stderr = self.logs / f"proxy-{generation}.log"
        env = dict(os.environ, TRANSFORMERS_VERBOSITY="error")
        env.pop(CRASH_POINT_ENV, None)
        if self.crash_point is not None and generation == 1:
            env[CRASH_POINT_ENV] = self.crash_point
        command = [
            sys.executable, "-m", "proxy.cli", "--port", "0", "--tokenizer-path", str(self.tokenizer_path),
            "--store", self.store, "--log-format", "text", "--tool-call-parse-backend", "local",
            "--reasoning-parse-backend", "local", *self.flags,
        ]
        with stderr.open("w") as sink:
            process = await trio.lowlevel.open_process(command, stderr=sink, stdout=subprocess.DEVNULL, env=env)
        self._process = process
        with trio.fail_after(START_BOUND):
            while LISTENING not in (text := stderr.read_text()):
                if process.poll() is not None:
                    raise RuntimeError(f"proxy generation {generation} exited at start-up "
                                       f"(code {process.returncode}):\n{text[-4000:]}")
                await trio.sleep(0.05)
        self.generation = generation
        self.url = text.split(LISTENING, 1)[1].split()[0]
        self._notify()

    def log_text(self) -> str:
        """Every process's stderr so far, for a failure message."""
        return "\n".join(f"--- {path.name}\n{path.read_text()[-3000:]}" for path in sorted(self.logs.glob("proxy-*.log")))


__all__ = ["Death", "ProxyProcess"]
