"""The trajectory viewer in a real headless Chromium (issue 19 item 4; the DOM contract is docs/observability.md's).

The proxy runs on its embedded engine with an admin key; the scripted session of ``viewer_session.py`` (a shared
prefix, a tool call, two branches, new weights, a sub-agent, finalize) is recorded through the openai SDK; then
Chromium opens ``/ui/`` with HTTP Basic credentials, clicks through to the session and reads the page back: the
trie's nodes, the segments' tokens and their computed colours, the tooltip. What the page shows is checked against
what ``/trajectory/read`` returns for the same session. A full-page screenshot lands in the test's ``tmp_path``.
"""

from __future__ import annotations

import collections
import colorsys
import functools
import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import attrs
import trio
from playwright.sync_api import Browser, Page
from playwright.sync_api import Error as PlaywrightError

from tests.e2e.conftest import start_proxy  # noqa: F401  (the e2e fixture: a proxy on its embedded engine)
from tests.ui.browser import chromium, run_in_browser  # noqa: F401  (the fixture: Chromium, installed on demand)
from tests.ui.viewer_session import (
    EXPECTED_BOUNDARY_REASONS, EXPECTED_CHECKPOINTS, EXPECTED_ROLES, LIVE_SESSION, PROXY_CONFIG, SCRIPT,
    SESSION, credentials, open_session, record_session,
)

#: the contract's background of a masked (context) token
MASKED_BACKGROUND = (229, 231, 235)

# Everything the checks need from the page, read in one round trip per part (JSON-ready values only).
READ_ROWS = "rows => rows.map(row => [row.dataset.sessionId, row.dataset.state])"
READ_TRIE = """nodes => nodes.map(node => ({
    role: node.dataset.role, checkpoint: node.dataset.checkpoint, children: node.dataset.children,
    depth: node.dataset.depth,
    childRoles: [...node.querySelectorAll('.trie-node')]
        .filter(child => child.parentElement.closest('.trie-node') === node).map(child => child.dataset.role),
}))"""
READ_BOUNDARIES = "boundaries => boundaries.map(boundary => boundary.dataset.reason)"
READ_SEGMENTS = """segments => segments.map(segment => ({
    id: segment.dataset.trajectoryId,
    stepBoundaries: segment.querySelectorAll('.step-boundary').length,
    tokens: [...segment.querySelectorAll('span.tok')].map(tok => {
        const style = getComputedStyle(tok);
        return {id: tok.dataset.tokenId, mask: tok.dataset.mask, logprob: tok.dataset.logprob,
                version: tok.dataset.version, background: style.backgroundColor, border: style.borderBottomColor};
    }),
}))"""


@attrs.frozen
class Seen:
    """What the page showed."""

    rows: dict[str, str]
    route: str
    trie: list[dict[str, Any]]
    boundaries: list[str]
    segments: list[dict[str, Any]]
    hovered_id: int
    tooltip: str
    tooltip_visible: bool
    page_errors: list[str]
    screenshot: Path


def heat(logprob: float) -> tuple[int, int, int]:
    """The contract's heat colour: hsl(120, 70%, 80%) at logprob 0 to hsl(0, 70%, 80%) at <= -5, linear."""
    hue = 120 * (1 - min(max(-logprob / 5, 0.0), 1.0))
    red, green, blue = colorsys.hls_to_rgb(hue / 360, 0.80, 0.70)
    return round(red * 255), round(green * 255), round(blue * 255)


def rgb(css: str) -> tuple[int, int, int]:
    """``rgb(r, g, b)`` / ``rgba(r, g, b, a)`` (a computed colour) as integers."""
    numbers = re.findall(r"[\d.]+", css)
    assert len(numbers) >= 3, f"not a computed colour: {css!r}"
    return tuple(round(float(number)) for number in numbers[:3])  # type: ignore[return-value]


def close(actual: tuple[int, int, int], expected: tuple[int, int, int]) -> bool:
    """Equal up to the browser's rounding of fractional hues and percentages."""
    return all(abs(a - e) <= 2 for a, e in zip(actual, expected, strict=True))


def collect_errors(page: Page) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


def look_at_session(browser: Browser, url: str, screenshot: Path) -> Seen:
    """Open the list, click the session, read the trie and the tokens, hover a generated token, screenshot."""
    context = browser.new_context(http_credentials=credentials(), viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors = collect_errors(page)
    rows = dict(open_session(page, url + "/ui/", SESSION, READ_ROWS))
    route = page.url
    trie = page.eval_on_selector_all("#trie .trie-node", READ_TRIE)
    boundaries = page.eval_on_selector_all("#trie .boundary", READ_BOUNDARIES)
    segments = page.eval_on_selector_all("#segments .segment", READ_SEGMENTS)
    generated = page.locator("#segments .segment").first.locator('span.tok[data-mask="1"]').nth(2)
    hovered_id = int(generated.get_attribute("data-token-id") or -1)
    generated.scroll_into_view_if_needed()
    generated.hover()
    tooltip = page.locator("#token-tooltip")
    try:
        tooltip.wait_for(state="visible", timeout=5000)
    except Exception:  # noqa: BLE001  (reported by the assertion below, after the screenshot)
        pass
    tooltip_visible = tooltip.is_visible()
    tooltip_text = tooltip.inner_text() if tooltip.count() else ""
    page.screenshot(path=str(screenshot), full_page=True)
    context.close()
    return Seen(rows, route, trie, boundaries, segments, hovered_id, tooltip_text, tooltip_visible, errors, screenshot)


async def test_viewer_draws_the_trie_and_colours_the_tokens_in_chromium(start_proxy, chromium, tmp_path) -> None:
    proxy = await start_proxy(script=SCRIPT, **PROXY_CONFIG)
    recorded = await record_session(proxy)
    segments = recorded.segments
    assert len(segments) == 3 and {s["boundary_reason"] for s in segments} == EXPECTED_BOUNDARY_REASONS
    assert all(s["logprobs"] is not None and s["weight_versions"] is not None for s in segments)

    seen = await run_in_browser(chromium, lambda browser: look_at_session(browser, proxy.url, tmp_path / "viewer.png"))
    print(f"viewer screenshot: {seen.screenshot}")
    assert seen.screenshot.stat().st_size > 0
    assert seen.page_errors == []

    # The list: the finalized session and the live one; the click went to the session's route.
    assert (seen.rows.get(SESSION), seen.rows.get(LIVE_SESSION)) == ("finalized", "live"), seen.rows
    assert seen.route == f"{proxy.url}/ui/#/session/{quote(SESSION, safe='')}"

    # The trie: one node per message, roles, checkpoints on the assistants, one branch point (A1: tool | user).
    assert collections.Counter(node["role"] for node in seen.trie) == EXPECTED_ROLES, seen.trie
    checkpoints = [node for node in seen.trie if node["checkpoint"] == "true"]
    assert len(checkpoints) == EXPECTED_CHECKPOINTS and {node["role"] for node in checkpoints} == {"assistant"}
    assert all(node["checkpoint"] in ("true", "false") for node in seen.trie)
    for node in seen.trie:  # data-children counts the nested child nodes
        assert int(node["children"]) == len(node["childRoles"]), node
    branch_points = [node for node in seen.trie if int(node["children"]) > 1]
    assert len(branch_points) == 1, branch_points
    branch = branch_points[0]
    assert (branch["role"], branch["children"], sorted(branch["childRoles"])) == ("assistant", "2", ["tool", "user"])
    # Depths: system messages at the top, A1 two below its system message.
    depths = {int(node["depth"]) for node in seen.trie if node["role"] == "system"}
    assert len(depths) == 1 and int(branch["depth"]) == depths.pop() + 2
    assert set(seen.boundaries) == EXPECTED_BOUNDARY_REASONS, seen.boundaries

    # The segments: the same as /trajectory/read, token for token.
    assert [segment["id"] for segment in seen.segments] == [s["trajectory_id"] for s in segments]
    border_by_version: dict[str, set[str]] = collections.defaultdict(set)
    for shown, exported in zip(seen.segments, segments, strict=True):
        tokens = shown["tokens"]
        assert [int(token["id"]) for token in tokens] == exported["token_ids"], shown["id"]
        assert [int(token["mask"]) for token in tokens] == exported["loss_mask"], shown["id"]
        assert shown["stepBoundaries"] == exported["num_turns"], shown["id"]
        for index, token in enumerate(tokens):
            if token["mask"] == "0":
                assert rgb(token["background"]) == MASKED_BACKGROUND, (shown["id"], index, token)
                continue
            logprob = exported["logprobs"][index]
            assert abs(float(token["logprob"]) - logprob) < 1e-6, (shown["id"], index, token)
            assert close(rgb(token["background"]), heat(logprob)), (shown["id"], index, token, heat(logprob))
            assert token["version"] == exported["weight_versions"][index]
            border_by_version[token["version"]].add(token["border"])
    # The weight version is the bottom border's colour: one colour per version, two versions, two colours.
    assert set(border_by_version) == {"default", "v2"}
    assert all(len(colours) == 1 for colours in border_by_version.values()), border_by_version
    assert border_by_version["default"] != border_by_version["v2"]
    # Hover: the tooltip names the token's id.
    assert seen.tooltip_visible and str(seen.hovered_id) in seen.tooltip, (seen.hovered_id, seen.tooltip)


def open_without_key(browser: Browser, url: str, password: str | None) -> tuple[list[tuple[int, str | None]], str]:
    """Navigate to ``/ui/`` (no credentials, or a wrong password): the answers the browser saw, and how it ended.

    Without credentials Chromium gives up on the page (Playwright: ``net::ERR_INVALID_AUTH_CREDENTIALS``); with
    refused ones it shows the 401 answer. Either way every answer it got is seen as a response."""
    options = {} if password is None else {"http_credentials": {"username": "trainer", "password": password}}
    context = browser.new_context(**options)
    page = context.new_page()
    answers: list[tuple[int, str | None]] = []
    page.on("response", lambda response: answers.append((response.status, response.headers.get("www-authenticate"))))
    try:
        response = page.goto(url + "/ui/")
        failure = "" if response is None else f"loaded with status {response.status}"
    except PlaywrightError as error:
        failure = str(error)
    context.close()
    return answers, failure


async def test_viewer_without_the_admin_key_is_401_with_a_basic_challenge(start_proxy, chromium) -> None:
    proxy = await start_proxy(**PROXY_CONFIG)
    for password in (None, "sk-wrong"):
        answers, failure = await run_in_browser(
            chromium, lambda browser, password=password: open_without_key(browser, proxy.url, password))
        assert answers and set(answers) == {(401, 'Basic realm="dressage-proxy"')}, (password, answers)
        assert "ERR_INVALID_AUTH_CREDENTIALS" in failure or failure == "loaded with status 401", (password, failure)


READ_TOKENS = """segments => segments.map(segment => ({
    id: segment.dataset.trajectoryId,
    tokens: [...segment.querySelectorAll('span.tok')]
        .map(tok => [Number(tok.dataset.tokenId), Number(tok.dataset.mask)]),
}))"""


def read_export_view(browser: Browser, ui_url: str, screenshot: Path) -> Any:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = collect_errors(page)
    rows = open_session(page, ui_url, SESSION, READ_ROWS)
    segments = page.eval_on_selector_all("#segments .segment", READ_TOKENS)
    page.screenshot(path=str(screenshot), full_page=True)
    page.close()
    return dict(rows), segments, errors


async def test_view_command_shows_an_exported_jsonl_file_in_chromium(
    start_proxy, chromium, qwen3_path, tmp_path
) -> None:
    proxy = await start_proxy(script=SCRIPT, **PROXY_CONFIG)
    segments = (await record_session(proxy)).segments
    export = tmp_path / "export.jsonl"
    export.write_text("".join(json.dumps(segment) + "\n" for segment in segments), encoding="utf-8")
    # The real program, as a user runs it: it prints the page's URL on stdout and serves until stopped.
    command = [str(Path(sys.executable).with_name("dressage-proxy")), "view", str(export), "--no-open",
               "--model", "qwen3", "--tokenizer-path", str(qwen3_path)]
    # trio.run_process stops it when its nursery is cancelled: SIGTERM, then SIGKILL after 5 s.
    with open(tmp_path / "view.stderr", "wb") as stderr:
        async with trio.open_nursery() as nursery:
            process = await nursery.start(functools.partial(
                trio.run_process, command, stdout=subprocess.PIPE, stderr=stderr, check=False))
            first_line = b""
            with trio.fail_after(60):
                while not first_line.endswith(b"\n"):
                    chunk = await process.stdout.receive_some(1)
                    assert chunk, f"view exited without a URL: {(tmp_path / 'view.stderr').read_text()}"
                    first_line += chunk
            ui_url = first_line.decode().strip()
            assert ui_url.startswith("http://127.0.0.1:") and ui_url.endswith("/ui/"), ui_url
            screenshot = tmp_path / "view.png"
            rows, shown, errors = await run_in_browser(
                chromium, lambda browser: read_export_view(browser, ui_url, screenshot))
            print(f"view screenshot: {screenshot}")
            nursery.cancel_scope.cancel()
    # It stopped on SIGTERM (a kill would be -SIGKILL).
    assert process.returncode in (0, -signal.SIGTERM), process.returncode
    assert errors == []
    assert set(rows) == {SESSION}
    assert [segment["id"] for segment in shown] == [s["trajectory_id"] for s in segments]
    for segment, exported in zip(shown, segments, strict=True):
        assert segment["tokens"] == [list(pair) for pair in zip(exported["token_ids"], exported["loss_mask"])]
