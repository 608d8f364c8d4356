"""npm packages the tests run (the blackbox agent CLIs of ``tests/e2e_cli/``), installed by the tests themselves.

:func:`ensure_npm_package` installs an exact version with npm into a cache folder of its own (never the repository,
never a global prefix), ``NPM_CACHE/<package>@<version>/``, and returns the path of one of its executables after
checking it runs (``--version`` names the version). The install is bounded in time, serialized across processes by
the same file lock as the Debian installs (:func:`tests.debian_packages.install_lock`), and atomic: npm installs
into a temporary folder that is renamed into place only once the executable runs, so a cut-short install is never
taken for a finished one.

The CLIs ship native binaries in per-platform packages (npm ``optionalDependencies``: ``@openai/codex``'s
``@openai/codex-linux-x64`` carries the Rust binary, ``@anthropic-ai/claude-code``'s ``...-linux-x64`` the native
``claude``), so nothing is downloaded outside the npm registry; the ``--version`` check catches a platform npm
found no binary for. A failure raises :class:`tests.debian_packages.PackageUnavailable` with the reason (no npm,
the registry unreachable, a timeout, a binary that does not run); callers skip loudly with it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.debian_packages import PackageUnavailable, Say, install_lock, runnable

#: npm install bound, in seconds (each CLI is ~400 MB unpacked: its native binary)
NPM_INSTALL_TIMEOUT = 600
#: where installed packages are kept between runs
NPM_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dressage-proxy" / "npm"


def ensure_npm_package(package: str, version: str, executable: str, say: Say) -> Path:
    """``executable`` (a name in ``node_modules/.bin``) of npm ``package@version``, installed on first use."""
    folder = NPM_CACHE / f"{package.replace('/', '+')}@{version}"
    target = folder / "node_modules" / ".bin" / executable
    if _runs(target, version):
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise PackageUnavailable(f"npm is not installed, so {package}@{version} cannot be installed "
                                 "(install Node.js and npm, e.g. Debian's nodejs and npm packages)")
    deadline = time.monotonic() + NPM_INSTALL_TIMEOUT
    with install_lock(f"npm-{package.replace('/', '+')}", deadline):
        if _runs(target, version):  # another process installed it while we waited for the lock
            return target
        NPM_CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".install-", dir=NPM_CACHE))
        try:
            _npm_install(npm, staging, f"{package}@{version}", say, deadline)
            staged = staging / "node_modules" / ".bin" / executable
            if not _runs(staged, version):
                raise PackageUnavailable(
                    f"npm installed {package}@{version} but `{executable} --version` does not run or does not say "
                    f"{version} (no native binary for this platform in its optional dependencies?)")
            shutil.rmtree(folder, ignore_errors=True)
            staging.rename(folder)  # whole or not at all
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    say(f"tests: installed npm {package}@{version} ({target})")
    return target


def _npm_install(npm: str, prefix: Path, spec: str, say: Say, deadline: float) -> None:
    # Scripts and optional dependencies on whatever the user's npm config says: Claude Code's postinstall puts its
    # native binary (an optional dependency) in place of a stub that only prints "native binary not installed".
    command = [npm, "install", "--prefix", str(prefix), "--no-save", "--no-audit", "--no-fund", "--loglevel=error",
               "--ignore-scripts=false", "--include=optional", spec]
    timeout = deadline - time.monotonic()
    say(f"tests: running `npm install {spec}` into {prefix} (up to {timeout:.0f} s)")
    started = time.monotonic()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PackageUnavailable(f"`npm install {spec}` did not finish within {timeout:.0f} s "
                                 "(the npm registry unreachable or slow?)") from None
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-8:])
        raise PackageUnavailable(f"`npm install {spec}` failed (exit {result.returncode}; the npm registry "
                                 f"unreachable?):\n{tail}")
    say(f"tests: `npm install {spec}` done in {time.monotonic() - started:.0f} s")


def _runs(executable: Path, version: str) -> bool:
    """Whether ``executable --version`` runs and names ``version`` (a half-installed package does not)."""
    if not runnable(executable):
        return False
    # a bare environment with a temporary HOME: no CLI writes into the user's
    with tempfile.TemporaryDirectory(prefix="dressage-npm-version-") as home:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "CODEX_HOME": home}
        try:
            result = subprocess.run([str(executable), "--version"], capture_output=True, text=True, timeout=120,
                                    stdin=subprocess.DEVNULL, env=env)
        except (OSError, subprocess.TimeoutExpired):
            return False
    return result.returncode == 0 and version in result.stdout
