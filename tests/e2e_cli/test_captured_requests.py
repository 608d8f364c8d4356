"""The requests Codex CLI 0.169.0 and Claude Code 2.1.332 really sent (``tests/frontends/codex_requests/`` and
``captured/``, recorded offline with ``capture_server.py``; docs/agents.md describes them), replayed byte for byte at the proxy: each is accepted and
answered with a complete stream. No npm needed, so these run wherever the suite runs, and they keep the front ends
honest about the fields real agents send that the SDK-driven tests never do (Codex's ``client_metadata`` and
``include: ["reasoning.encrypted_content"]``, Claude Code's ``?beta=true``, mid-conversation ``system`` turn,
``thinking: adaptive``, ``context_management``, ``output_config``, ``defer_loading`` tools, ``max_tokens`` 128000).
On main (no ``/v1/responses``, ``/v1/messages``) they skip, saying so; against the front ends as first committed,
``client_metadata`` and the ``system`` turn were 400s."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

#: Claude Code's requests; Codex's are the Responses front end's fixtures (the same capture)
CAPTURED = Path(__file__).parent / "captured"
CODEX_CAPTURED = Path(__file__).parent.parent / "frontends" / "codex_requests"


def captured(name: str) -> dict[str, Any]:
    folder = CODEX_CAPTURED if name.startswith("codex-") else CAPTURED
    return json.loads((folder / f"{name}.json").read_text())


def sse_events(text: str) -> list[str]:
    return [line[len("event: "):] for line in text.splitlines() if line.startswith("event: ")]


async def replay(start_proxy: Any, name: str) -> tuple[Any, Any]:
    request = captured(name)
    session_id = f"replay-{uuid.uuid4().hex[:12]}"
    proxy = await start_proxy(script=[{"session": session_id, "output": "<think>\nOk.\n</think>\n\nReplayed."}])
    headers = {name: value for name, value in request["headers"].items() if name.lower() != "x-session-id"}
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


async def test_codex_default_tools_are_refused_by_name(responses_endpoint: None, start_proxy: Any) -> None:
    """Without ``web_search = "disabled"`` and ``[agents] enabled = false`` Codex offers a ``namespace`` tool and a
    hosted ``web_search`` tool, which the proxy cannot serve: a 400 naming the tool, which is why docs/agents.md's
    config turns them off."""
    _, response = await replay(start_proxy, "codex-default-config-turn1")
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"].startswith("tools["), error
    assert "function tools only" in error["message"], error


@pytest.mark.parametrize("name", ["claude-turn1", "claude-turn2-after-tool-use", "claude-default-model-turn1"])
async def test_claude_code_requests_are_answered(messages_endpoint: None, start_proxy: Any, name: str) -> None:
    _, response = await replay(start_proxy, name)
    assert response.status_code == 200, response.text
    events = sse_events(response.text)
    assert events[0] == "message_start" and events[-1] == "message_stop", events
    text = "".join(
        json.loads(line[len("data: "):])["delta"].get("text", "")
        for line in response.text.splitlines()
        if line.startswith("data: ") and '"text_delta"' in line
    )
    assert text == "Replayed."
