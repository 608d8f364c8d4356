"""The README's screenshot of the viewer (``docs/images/viewer.png``), from the scripted session of the browser test.

Run it (it is not part of the suite: pytest collects only ``test_*.py`` files unless one is named explicitly)::

    ./dev test tests/ui/screenshot.py -s

It uses the same fixtures as ``test_viewer_browser.py``: the proxy on its embedded engine with an admin key, the
scripted two-branch session of ``viewer_session.py``, Debian's Chromium (installed when missing). The page is shot
at a 1280 x 840 viewport with a generated token hovered, so its tooltip shows. ``DRESSAGE_SCREENSHOT`` overrides
the output path.
"""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import Browser

from tests.e2e.conftest import start_proxy  # noqa: F401  (the e2e fixture: a proxy on its embedded engine)
from tests.ui.browser import chromium, run_in_browser  # noqa: F401  (the fixture: Chromium, installed on demand)
from tests.ui.viewer_session import PROXY_CONFIG, SCRIPT, SESSION, credentials, open_session, record_session

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = Path(os.environ.get("DRESSAGE_SCREENSHOT", ROOT / "docs" / "images" / "viewer.png"))


def shoot(browser: Browser, url: str, output: Path) -> None:
    context = browser.new_context(http_credentials=credentials(), viewport={"width": 1280, "height": 840})
    page = context.new_page()
    open_session(page, url + "/ui/", SESSION)
    # The first segment scrolled to its end, so both of its answers' heat colours are in view (the page itself
    # back at its top), and a token of the first answer under the pointer: its tooltip is part of the picture.
    generated = page.locator("#segments .segment").first.locator('span.tok[data-mask="1"]')
    generated.last.scroll_into_view_if_needed()
    page.evaluate("window.scrollTo(0, 0)")
    generated.nth(4).hover()
    page.locator("#token-tooltip").wait_for(state="visible", timeout=5000)
    output.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(output))
    context.close()


async def test_readme_screenshot(start_proxy, chromium) -> None:
    proxy = await start_proxy(script=SCRIPT, **PROXY_CONFIG)
    await record_session(proxy)
    await run_in_browser(chromium, lambda browser: shoot(browser, proxy.url, OUTPUT))
    print(f"wrote {OUTPUT} ({OUTPUT.stat().st_size} bytes)")
