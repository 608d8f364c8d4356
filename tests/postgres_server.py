"""A real PostgreSQL server for the tests and benches: Debian's ``postgresql`` package, one throwaway cluster.

What it does (:func:`running_postgres`):

- finds the server binaries under ``/usr/lib/postgresql/<version>/bin/`` (the newest version there); when there are
  none, installs Debian's ``postgresql`` package as root through ``tests/debian_packages.py`` (a fresh CI machine
  has none; the package also creates the ``postgres`` system user);
- ``initdb`` into a temporary folder and runs ``postgres`` as a non-root user (PostgreSQL refuses to run as root:
  when the tests run as root the server runs as ``postgres``), listening on 127.0.0.1 only, on a free port, with
  its unix socket in the temporary folder (``-k``), never in a system folder;
- password authentication over TCP (a random password in :attr:`PostgresServer.dsn`), so a test can check that a
  password never reaches a log line or an error;
- ``fsync=False`` (the pytest fixture's choice) trades the server's own crash safety for speed: a test that kills
  the *proxy* loses nothing either way, because the server keeps running. A test of the server's durability (or a
  bench that wants real figures) passes ``fsync=True``.

The session-scoped pytest fixture :func:`postgres_server` starts one server for the whole test process and stops it
at the end; :meth:`PostgresServer.fresh_database` gives each test a database of its own. A test module that wants
it imports the fixture (``from tests.postgres_server import postgres_server  # noqa: F401``) or gets it from a
``conftest.py`` that does. When the server cannot be had (not root and not installed, no apt-get, apt failed), the
fixture skips LOUDLY with the reason (``-ra`` prints it in the summary); outside pytest, :func:`running_postgres`
raises :class:`~tests.debian_packages.PackageUnavailable`.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest

from tests.debian_packages import PackageUnavailable, ensure_installed, runnable, terminal_say

log = logging.getLogger("tests.postgres_server")

#: where Debian's postgresql-NN packages put the server binaries
POSTGRES_LIB = Path("/usr/lib/postgresql")
#: a file of postgresql-common, which only the server packages pull in: present once ``postgresql`` is installed
POSTGRES_COMMON = Path("/usr/bin/pg_ctlcluster")
#: the user the server runs as when the tests run as root (Debian's package creates it)
SERVER_USER = "postgres"
#: seconds to wait for a started server to accept connections
START_TIMEOUT = 60.0

Say = Callable[[str], None]


def server_binaries() -> Path | None:
    """The ``bin`` folder of the newest PostgreSQL server installed, or None."""
    found = [p.parent for p in POSTGRES_LIB.glob("*/bin/postgres") if runnable(p) and runnable(p.parent / "initdb")]
    versions = [(int(m.group()), folder) for folder in found if (m := re.match(r"\d+", folder.parent.name))]
    return max(versions)[1] if versions else None


def ensure_postgres_binaries(say: Say = log.warning) -> Path:
    """The server binaries, installing Debian's ``postgresql`` package when there are none (PackageUnavailable
    with the reason when that cannot be done)."""
    folder = server_binaries()
    if folder is not None:
        return folder
    # The version the package brings differs between Debian releases, so ask for postgresql-common's file and look
    # for the server binaries afterwards.
    ensure_installed("postgresql", POSTGRES_COMMON, say)
    folder = server_binaries()
    if folder is None:
        raise PackageUnavailable(f"Debian's postgresql package is installed but {POSTGRES_LIB}/*/bin/postgres is not")
    return folder


@attrs.define
class PostgresServer:
    """A running throwaway server (see the module docstring)."""

    bin_dir: Path
    root: Path
    port: int
    password: str
    process: subprocess.Popen[bytes]
    user: str = "postgres"
    host: str = "127.0.0.1"
    _names: Iterator[int] = attrs.field(factory=itertools.count, init=False)

    @property
    def dsn(self) -> str:
        """The administrative database's URL (libpq form, with the password)."""
        return self.url("postgres")

    def url(self, database: str) -> str:
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{database}"

    def fresh_database(self, prefix: str = "test") -> str:
        """CREATE a new, empty database and return its URL."""
        import psycopg

        name = f"{prefix}_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log_tail(self, lines: int = 20) -> str:
        path = self.root / "server.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        """Fast shutdown (SIGINT: roll back open transactions, checkpoint, exit), then remove the cluster."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _run_as() -> dict[str, object]:
    """Popen arguments that drop root to the ``postgres`` user (nothing when not root)."""
    if os.geteuid() != 0:
        return {}
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise PackageUnavailable(
            f"the tests run as root and PostgreSQL refuses root, but there is no {SERVER_USER!r} user to run it as "
            "(Debian's postgresql package creates it)"
        ) from None
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _owned(path: Path) -> Path:
    """``path`` made the server user's (when the tests run as root)."""
    if os.geteuid() == 0:
        entry = pwd.getpwnam(SERVER_USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


def _owned_file(path: Path, text: str = "") -> Path:
    path.write_text(text)
    return _owned(path)


def start_postgres(*, fsync: bool = True, say: Say = log.warning, attempts: int = 3) -> PostgresServer:
    """Install if needed, ``initdb`` and start a server (stop it with :meth:`PostgresServer.stop`)."""
    bin_dir = ensure_postgres_binaries(say)
    drop = _run_as()
    root = _owned(Path(tempfile.mkdtemp(prefix="dressage-postgres-")))
    data = root / "data"
    password = secrets.token_hex(12)
    pwfile = _owned_file(root / "pwfile", password + "\n")
    initdb = subprocess.run(
        [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", f"--pwfile={pwfile}", "--auth-local=trust",
         "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C", "--no-sync"],
        # cwd: the server user may not enter the suite's working directory (root's home on CI)
        capture_output=True, text=True, timeout=120, cwd=root, **drop,  # type: ignore[arg-type]
    )
    pwfile.unlink()
    if initdb.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise PackageUnavailable(f"initdb failed (exit {initdb.returncode}): {initdb.stderr.strip()[-800:]}")
    settings = {
        "listen_addresses": "127.0.0.1", "unix_socket_directories": str(root), "max_connections": "200",
        "shared_buffers": "32MB", "fsync": "on" if fsync else "off",
        "synchronous_commit": "on" if fsync else "off", "full_page_writes": "on" if fsync else "off",
        "logging_collector": "off", "log_min_messages": "warning",
    }
    log_path = _owned_file(root / "server.log")
    last_error = ""
    for _ in range(attempts):
        port = _free_port()
        command = [str(bin_dir / "postgres"), "-D", str(data), "-p", str(port)]
        command += [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]
        with open(log_path, "ab") as log_file:
            process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
                                       cwd=root, **drop)  # type: ignore[arg-type]
        server = PostgresServer(bin_dir, root, port, password, process)
        if _wait_ready(server):
            # Stopped at interpreter exit too, whatever path ended the run (stop() is idempotent).
            atexit.register(server.stop)
            say(f"tests: PostgreSQL {bin_dir.parent.name} on 127.0.0.1:{port} (fsync {'on' if fsync else 'off'})")
            return server
        last_error = server.log_tail()
        if process.poll() is None:
            process.kill()
            process.wait()
    shutil.rmtree(root, ignore_errors=True)
    raise PackageUnavailable(f"PostgreSQL did not start ({attempts} attempts); its log ends:\n{last_error}")


def _wait_ready(server: PostgresServer) -> bool:
    """Whether the server accepts connections within START_TIMEOUT (False when it exited: a port taken meanwhile)."""
    import psycopg

    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return False
        try:
            with psycopg.connect(server.dsn, connect_timeout=2):
                return True
        except psycopg.OperationalError:
            time.sleep(0.1)
    return False


@contextlib.contextmanager
def running_postgres(*, fsync: bool = True, say: Say = log.warning) -> Iterator[PostgresServer]:
    """A server for the block (benches and helpers outside pytest); stopped and removed after it."""
    server = start_postgres(fsync=fsync, say=say)
    try:
        yield server
    finally:
        server.stop()


# The outcome of this process's first start: the server, or why there is none (tried once, not by every test).
_outcome: PostgresServer | PackageUnavailable | None = None


@pytest.fixture(scope="session")
def postgres_server(pytestconfig: pytest.Config) -> Iterator[PostgresServer]:
    """One server for the test session (fsync off: see the module docstring); skips loudly when there is none."""
    global _outcome
    if _outcome is None:
        try:
            _outcome = start_postgres(fsync=False, say=terminal_say(pytestconfig, log))
        except PackageUnavailable as error:
            _outcome = error
    if isinstance(_outcome, PackageUnavailable):
        pytest.skip(f"NO POSTGRESQL, the postgresql store is untested: {_outcome}")
    server = _outcome
    try:
        yield server
    finally:
        server.stop()
        _outcome = None


__all__ = [
    "PostgresServer", "ensure_postgres_binaries", "postgres_server", "running_postgres", "server_binaries",
    "start_postgres",
]
