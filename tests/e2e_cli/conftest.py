"""Fixtures of the blackbox CLI suite: the pinned CLIs from npm, and a check that the proxy serves their endpoint.

Each CLI is installed once per machine into the npm cache folder (``tests/npm_packages.py``); a test whose CLI cannot
be had, or whose endpoint the proxy does not serve, is skipped with the reason (the suite runs with ``-ra``, so the
reason is printed in the summary).
"""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
import trio

from engine import EngineConfig
from proxy.cli import run_proxy
from proxy.config import ProxyConfig
from tests.debian_packages import PackageUnavailable, terminal_say
from tests.e2e.conftest import start_proxy  # noqa: F401 - the fixture, shared with tests/e2e
from tests.e2e_cli.agents import FULL_TARGET
from tests.npm_packages import ensure_npm_package

#: the CLI versions the suite runs (exact pins: a new release changes what the CLI sends; re-capture with
#: ``python -m tests.e2e_cli.capture_server`` and docs/agents.md before moving a pin)
CODEX = ("@openai/codex", "0.169.0", "codex")
CLAUDE_CODE = ("@anthropic-ai/claude-code", "2.1.332", "claude")

log = logging.getLogger(__name__)


def _cli(pytestconfig: pytest.Config, package: tuple[str, str, str]) -> Path:
    name, version, executable = package
    try:
        return ensure_npm_package(name, version, executable, terminal_say(pytestconfig, log))
    except PackageUnavailable as error:
        pytest.skip(f"SKIPPED LOUDLY: npm {name}@{version} is not available: {error}")


# Each CLI needs its endpoint: checked first, so a branch without it skips before ~400 MB are installed.
@pytest.fixture(scope="session")
def codex_cli(pytestconfig: pytest.Config, missing_endpoints: dict[str, int]) -> Path:
    require_endpoint(missing_endpoints, "/v1/responses")
    return _cli(pytestconfig, CODEX)


@pytest.fixture(scope="session")
def claude_cli(pytestconfig: pytest.Config, missing_endpoints: dict[str, int]) -> Path:
    require_endpoint(missing_endpoints, "/v1/messages")
    return _cli(pytestconfig, CLAUDE_CODE)


#: the endpoints the CLIs speak
CLI_ENDPOINTS = ("/v1/responses", "/v1/messages")


@pytest.fixture(scope="session")
def missing_endpoints(qwen3_path: Path) -> dict[str, int]:
    """``{path: HTTP status}`` of each CLI endpoint this branch's proxy does not serve (404/405 to a POST).

    Probed once, on a proxy of its own, in a sync fixture: a skip raised inside an async test loses its reason
    under pytest-trio, so the tests skip from a sync fixture (:func:`require_endpoint`)."""

    async def probe() -> dict[str, int]:
        async with trio.open_nursery() as nursery:
            config = ProxyConfig(port=0, tokenizer_path=qwen3_path, trajectory_build_model="qwen3")
            handle = await nursery.start(run_proxy, config, EngineConfig(tokenizer_path=qwen3_path))
            missing = {}
            async with httpx.AsyncClient(timeout=60) as client:
                for path in CLI_ENDPOINTS:
                    response = await client.post(handle.url + path, json={}, headers={"X-Session-Id": "probe"})
                    if response.status_code in (404, 405):
                        missing[path] = response.status_code
            nursery.cancel_scope.cancel()
        return missing

    return trio.run(probe)


def require_endpoint(missing: dict[str, int], path: str) -> None:
    """Skip (loudly) when the proxy has no route for ``POST path``: the endpoint is built on another branch."""
    if path in missing:
        pytest.skip(f"SKIPPED LOUDLY: the proxy does not serve POST {path} on this branch "
                    f"(HTTP {missing[path]}); the CLI test needs it")


@pytest.fixture
def responses_endpoint(missing_endpoints: dict[str, int]) -> None:
    require_endpoint(missing_endpoints, "/v1/responses")


@pytest.fixture
def messages_endpoint(missing_endpoints: dict[str, int]) -> None:
    require_endpoint(missing_endpoints, "/v1/messages")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``full_cli`` belong to the long target (``./dev e2e-cli``): outside it they are deselected, not
    skipped, so the suite's summary keeps "skipped" for components that could not be had."""
    if FULL_TARGET:
        return
    long_runs = [item for item in items if item.get_closest_marker("full_cli")]
    if long_runs:
        config.hook.pytest_deselected(items=long_runs)
        items[:] = [item for item in items if not item.get_closest_marker("full_cli")]
