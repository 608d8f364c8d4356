"""The request bodies Claude Code 2.1.332 really sends (captured offline by the i18-clis helper, ``claude -p`` against
a logging server: ``claude_code_requests/``; every string longer than 160 characters -- Claude Code's own prompt
and tool texts, which are not ours to redistribute -- is cut to its first line and a note), translated into the chat model and rendered with both served
templates: every one is accepted, and what Claude Code does differently from the SDK (a system message inside
``messages``, adaptive thinking with ``display: "omitted"``, a foreign thinking signature echoed back,
``context_management``, ``cache_control`` everywhere, a ``defer_loading`` tool) lands where the docs say."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.api import ChatCompletionRequest
from proxy.api.session_identity import SessionIdSources
from proxy.frontends.messages_request import chat_body, shows_thinking
from proxy.frontends.template_probe import system_role_inside
from proxy.families import load_tito_tokenizer

CAPTURES = Path(__file__).parent / "claude_code_requests"
SESSION_IDS = SessionIdSources(("X-Session-Id", "X-Claude-Code-Session-Id"))
FILES = ("claude-turn1.json", "claude-turn2-after-tool-use.json", "claude-default-model-turn1.json")


def capture(name: str) -> dict[str, Any]:
    return json.loads((CAPTURES / name).read_text())


@pytest.mark.parametrize("model", ["qwen3", "qwen3_5"])
@pytest.mark.parametrize("name", FILES)
def test_claude_code_bodies_are_accepted_and_render(
    name: str, model: str, qwen3_path: Path, qwen3_5_path: Path
) -> None:
    tito = load_tito_tokenizer(model, qwen3_path if model == "qwen3" else qwen3_5_path)
    role = system_role_inside(tito)
    assert role == ("system" if model == "qwen3" else "user")
    exchange = capture(name)
    body = exchange["body"]
    # Claude Code's own session header works as the session id too (--session-id-header X-Claude-Code-Session-Id).
    chat = ChatCompletionRequest.from_http(chat_body(body, inner_system_role=role), exchange["headers"], SESSION_IDS)
    headers = exchange["headers"]
    assert chat.session_id == headers.get("X-Session-Id", headers["X-Claude-Code-Session-Id"])
    assert chat.stream and chat.include_usage
    assert chat.chat_template_kwargs == {"enable_thinking": True}  # thinking: adaptive
    assert not shows_thinking(body)  # display: omitted
    assert chat.max_tokens == body["max_tokens"]
    assert [tool["function"]["name"] for tool in chat.tools or ()] == [tool["name"] for tool in body["tools"]]
    roles = [message["role"] for message in chat.messages]
    assert roles[:3] == ["system", "user", role]
    assert chat.messages[0]["content"].startswith("x-anthropic-billing-header: ")
    assert chat.messages[2]["content"].startswith("# Environment")
    if "turn2" in name:
        assert roles[3:] == ["assistant", "tool"]
        assistant = chat.messages[3]
        # The capture server's thinking was signed "capture-signature": not this proxy's, so not read.
        assert "reasoning_content" not in assistant
        assert assistant["tool_calls"][0]["id"] == chat.messages[4]["tool_call_id"] == "toolu_capture"
        assert assistant["tool_calls"][0]["function"]["name"] == "Write"
    ids = tito.encode_full(list(chat.messages), list(chat.template_tools or ()), chat.chat_template_kwargs)
    assert len(ids) > 2_000  # twelve tools and Claude Code's prompts (their long texts redacted in the captures)
