"""The npm installer of the CLI tests fails with a reason a skip can print, never a hang or a half-installed CLI:
no npm on PATH, and a registry that does not answer (a closed port on 127.0.0.1 stands in for it)."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from tests import npm_packages
from tests.debian_packages import PackageUnavailable


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_without_npm_the_reason_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(npm_packages, "NPM_CACHE", tmp_path / "npm")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(PackageUnavailable, match="npm is not installed"):
        npm_packages.ensure_npm_package("@openai/codex", "0.169.0", "codex", lambda line: None)


def test_an_unreachable_registry_is_reported_and_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    if shutil.which("npm") is None:
        pytest.skip("SKIPPED LOUDLY: npm is not installed; the registry failure path is untested")
    cache = tmp_path / "npm"
    monkeypatch.setattr(npm_packages, "NPM_CACHE", cache)
    monkeypatch.setenv("npm_config_registry", f"http://127.0.0.1:{closed_port()}/")
    monkeypatch.setenv("npm_config_fetch_retries", "0")
    monkeypatch.setenv("npm_config_cache", str(tmp_path / "npm-own-cache"))  # no copy from an earlier download
    with pytest.raises(PackageUnavailable, match="npm install @openai/codex@0.169.0` failed"):
        npm_packages.ensure_npm_package("@openai/codex", "0.169.0", "codex", lambda line: None)
    assert list(cache.iterdir()) == []  # the staging folder is gone, and no package folder was made
