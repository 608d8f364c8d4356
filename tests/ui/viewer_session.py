"""The scripted session the viewer is looked at with (``test_viewer_browser.py`` and the README screenshot).

One session, ``calc-episode``, through the official openai SDK against the proxy on its embedded engine::

    system ─ user "What is 2 + 3?" ─ assistant A1 (tool call)     step 1, starts a segment: session_start
                                       ├─ tool "5" ─ A2               step 2, continues A1's chain
                                       └─ user "Use multiply." ─ A3   step 3, a branch from A1 (new weights)
    system "checker" ─ user ─ assistant A4                         step 4, starts a segment: new_conversation

So the trie has 10 message nodes (2 system, 3 user, 1 tool, 4 assistant), 4 checkpoints (the assistants), one
branch point (A1, two children) and two segment boundaries; the export has 3 segments. Between steps 2 and 3 the
trainer pauses, loads weight version ``v2`` into the engine and resumes, so A3's tokens carry another version than
A1's and A2's (``--record-token-versions``). A second session, ``live-episode``, has one step and stays live.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import httpx

from playwright.sync_api import Page

from proxy.client import ProxyClient
from tests.e2e.harness import CALCULATOR_TOOLS, Proxy, assistant_echo

ADMIN_KEY = "sk-admin-viewer-4c1d"
SESSION = "calc-episode"
LIVE_SESSION = "live-episode"
SYSTEM = "You are a careful calculator assistant."


def _call(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


#: the engine's replies, in the order the steps ask
SCRIPT = [
    {"session": SESSION, "output": "I will add them.\n" + _call("add", a=2, b=3)},
    {"session": SESSION, "output": "2 + 3 = 5."},
    {"session": SESSION, "output": "Then 2 × 3 = 6."},
    {"session": SESSION, "output": "Correct: 2 + 3 is 5."},
    {"session": LIVE_SESSION, "output": "Hello, still working."},
]

#: the proxy's configuration for the viewer tests (admin key: /ui/ asks for HTTP Basic)
PROXY_CONFIG: dict[str, Any] = {"admin_key": ADMIN_KEY, "record_token_versions": True, "partial_rollout": True}

#: what the scenario (the module docstring) makes of the trie
EXPECTED_ROLES = {"system": 2, "user": 3, "tool": 1, "assistant": 4}
EXPECTED_CHECKPOINTS = 4
EXPECTED_BOUNDARY_REASONS = {"session_start", "new_conversation"}


@attrs.frozen
class Recorded:
    """What the scripted session left: its finalized segments as ``/trajectory/read`` returns them."""

    segments: list[dict[str, Any]]


def admin(proxy: Proxy) -> ProxyClient:
    return ProxyClient(proxy.url, admin_key=ADMIN_KEY)


async def record_session(proxy: Proxy) -> Recorded:
    """Run the scenario of the module docstring, finalize ``calc-episode``, leave ``live-episode`` live."""

    async def ask(client: Any, session: str, messages: list[dict[str, Any]]) -> Any:
        return await client.chat.completions.create(
            model="m", messages=messages, tools=CALCULATOR_TOOLS, extra_headers={"X-Session-Id": session},
        )

    prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2 + 3?"}]
    async with proxy.async_client() as client, admin(proxy) as trainer:
        first = (await ask(client, SESSION, prompt)).choices[0].message
        assert first.tool_calls, "the scripted first step is a tool call"
        after_call = prompt + [assistant_echo(first)]
        await ask(client, SESSION, after_call + [
            {"role": "tool", "content": "5", "tool_call_id": first.tool_calls[0].id},
        ])
        # New weights between the branches (a session spans versions only with partial rollout on).
        await trainer.pause()
        async with httpx.AsyncClient(timeout=None) as engine:
            update = await engine.post(proxy.engine_handle.url + "/update_weights_from_disk",
                                       json={"model_path": "/ckpt/v2", "weight_version": "v2"})
        assert update.status_code == 200, update.text
        await trainer.resume("v2")
        await ask(client, SESSION, after_call + [{"role": "user", "content": "Use multiply instead."}])
        await ask(client, SESSION, [
            {"role": "system", "content": "You check arithmetic."}, {"role": "user", "content": "Is 2 + 3 = 5?"},
        ])
        await ask(client, LIVE_SESSION, [{"role": "user", "content": "Start the long task."}])
        await trainer.finalize_session(SESSION, reward_info={"reward": 1.0})
        segments = await trainer.read_trajectory(SESSION)
    return Recorded(segments)


def credentials() -> dict[str, str]:
    """Playwright's ``http_credentials``: HTTP Basic, any user name, the admin key as the password."""
    return {"username": "trainer", "password": ADMIN_KEY}


def open_session(page: Page, ui_url: str, session_id: str, read_rows: str = "() => null") -> Any:
    """The viewer's list at ``ui_url``, then a click on the session's row, until its trie and tokens are drawn;
    returns what ``read_rows`` (a function of the ``.session-row`` elements) reads on the list before the click."""
    response = page.goto(ui_url)
    assert response is not None and response.status == 200, response and response.status
    page.wait_for_selector(f'#sessions .session-row[data-session-id="{session_id}"]')
    rows = page.eval_on_selector_all("#sessions .session-row", read_rows)
    page.click(f'#sessions .session-row[data-session-id="{session_id}"]')
    page.wait_for_selector("#trie .trie-node")
    page.wait_for_selector("#segments .segment span.tok")
    return rows
