"""The viewer behind ``--admin-key`` over real sockets: a browser is asked to sign in (401 with a ``Basic``
challenge on every ``/ui/`` path), and gets in with the key as the Basic password (any user name) or as a Bearer
token; a wrong key is asked again. Other admin paths keep their ``Bearer`` challenge."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.conftest import start_proxy  # noqa: F401 - the e2e suite's fixture: a proxy on its embedded engine

ADMIN_KEY = "sk-admin-7d1c"
BASIC_CHALLENGE = 'Basic realm="dressage-proxy"'
VIEWER_PATHS = ("/ui/", "/ui/static/viewer.js", "/ui/api/sessions", "/ui/api/sessions/nobody")


@pytest.mark.parametrize("path", VIEWER_PATHS)
async def test_viewer_paths_ask_a_browser_for_the_admin_key(start_proxy, path) -> None:
    proxy = await start_proxy(admin_key=ADMIN_KEY)
    async with httpx.AsyncClient(base_url=proxy.url) as client:
        missing = await client.get(path)
        wrong = await client.get(path, auth=("trainer", "sk-wrong"))
        basic = await client.get(path, auth=("anyone", ADMIN_KEY))
        bearer = await client.get(path, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    for refused in (missing, wrong):
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
        assert refused.headers["www-authenticate"] == BASIC_CHALLENGE
        assert ADMIN_KEY not in refused.text and "sk-wrong" not in refused.text
    expected = 404 if path.endswith("/nobody") else 200
    assert (basic.status_code, bearer.status_code) == (expected, expected)
    assert basic.content == bearer.content or path == "/ui/api/sessions/nobody"


async def test_other_admin_paths_keep_the_bearer_challenge_and_take_basic_too(start_proxy) -> None:
    proxy = await start_proxy(admin_key=ADMIN_KEY)
    async with httpx.AsyncClient(base_url=proxy.url) as client:
        missing = await client.get("/trajectory/stats")
        basic = await client.get("/trajectory/stats", auth=("", ADMIN_KEY))
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == 'Bearer realm="dressage-proxy"'
    assert basic.status_code == 200
