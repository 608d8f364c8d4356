"""The requests Codex CLI 0.169.0 really sent (``tests/frontends/codex_requests/``, recorded offline with
``capture_server.py``; docs/agents.md describes them), replayed byte for byte over HTTP at the proxy: each is accepted
and answered with a complete stream. No npm needed, so these run wherever the suite runs, and they keep the front end
honest about what a real agent sends that the SDK-driven tests never do (``client_metadata``, ``prompt_cache_key``,
``include: ["reasoning.encrypted_content"]``, ``developer`` messages, item ids, the echoed reasoning item). Claude
Code's captured requests are replayed the same way by ``tests/e2e/test_anthropic_sdk.py``. On main (no
``/v1/responses``) these skip, saying so; against the front end as first committed, ``client_metadata`` was a 400."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

#: the Responses front end's fixtures (this suite's capture)
CAPTURED = Path(__file__).parent.parent / "frontends" / "codex_requests"
#: the captured headers a replay sends again (not the connection's own: host, length, encoding)
REPLAYED_HEADERS = {"accept", "content-type", "authorization", "originator"}


def captured(name: str) -> dict[str, Any]:
    return json.loads((CAPTURED / f"{name}.json").read_text())


def sse_events(text: str) -> list[str]:
    return [line[len("event: "):] for line in text.splitlines() if line.startswith("event: ")]


async def replay(start_proxy: Any, name: str) -> tuple[Any, Any]:
    request = captured(name)
    session_id = f"replay-{uuid.uuid4().hex[:12]}"
    proxy = await start_proxy(script=[{"session": session_id, "output": "<think>\nOk.\n</think>\n\nReplayed."}])
    headers = {name: value for name, value in request["headers"].items() if name.lower() in REPLAYED_HEADERS}
    headers["X-Session-Id"] = session_id
    response = await proxy.post(request["path"], request["body"], headers)
    return proxy, response


@pytest.mark.parametrize("name", ["codex-turn1", "codex-turn2"])
async def test_codex_requests_are_answered(responses_endpoint: None, start_proxy: Any, name: str) -> None:
    _, response = await replay(start_proxy, name)
    assert response.status_code == 200, response.text
    events = sse_events(response.text)
    assert events[0] == "response.created" and events[-1] == "response.completed", events
    completed = json.loads(response.text.split("event: response.completed\ndata: ")[1].split("\n")[0])
    message = [item for item in completed["response"]["output"] if item["type"] == "message"]
    assert message[0]["content"][0]["text"] == "Replayed."


async def test_codex_default_web_search_is_refused_by_name(responses_endpoint: None, start_proxy: Any) -> None:
    """Without ``web_search = "disabled"`` Codex offers the hosted ``web_search`` tool, which the proxy cannot run: a
    400 naming it, which is why docs/agents.md's config turns it off."""
    _, response = await replay(start_proxy, "codex-default-config-turn1")
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "tools[8].type", error
    assert "'web_search'" in error["message"], error
