"""Claude Code (npm ``@anthropic-ai/claude-code``, pinned in conftest.py) end to end through the proxy's
``POST /v1/messages``: ``claude -p`` with ``ANTHROPIC_BASE_URL`` at the proxy (docs/agents.md) runs the scripted task
(the engine calls Claude Code's own ``Write`` tool to create a file, then answers), exits 0, and the session exports
as one segment: on Qwen3 and Qwen3.5 with Claude Code's default request shape (its mid-conversation ``system`` turn
included: a system turn in place on Qwen3, a user turn on Qwen3.5, whose template takes a system message only
first), and with that turn switched off (docs/agents.md). On main, which has no ``/v1/messages``, the tests skip,
saying so; against the front end's first ready commit Claude Code got a 400 (the ``system`` turn)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.e2e_cli.agents import (
    NO_MID_CONVERSATION_SYSTEM, PROOF_FILE, assert_one_segment, claude_task, follow_up, run_claude,
)

CONTENT = "written by claude code through dressage"
ANSWER = "I wrote proof.txt with the Write tool."
FOLLOW_UP = "Nothing else: the file is there."
PROMPT = "Write the proof file, then say so."


@pytest.mark.parametrize(("model", "more_env"), [
    ("qwen3", {}), ("qwen3_5", {}), ("qwen3_5", NO_MID_CONVERSATION_SYSTEM),
], ids=["qwen3", "qwen3_5", "qwen3_5-no-mid-conversation-system"])
async def test_claude_print_mode_writes_the_file_and_exports_one_segment(
    claude_cli: Path, start_proxy, tmp_path: Path, model: str, more_env: dict[str, str],
) -> None:
    session_id = f"claude-{uuid.uuid4().hex[:12]}"
    workdir = tmp_path / "work"
    workdir.mkdir()
    proxy = await start_proxy(model=model, script=claude_task(model, session_id, workdir / PROOF_FILE, CONTENT, ANSWER))

    run = await run_claude(claude_cli, proxy.url, session_id, workdir, PROMPT, more_env=more_env)

    assert run.returncode == 0, run.describe()
    result = json.loads(run.stdout)
    assert result["is_error"] is False and result["result"] == ANSWER, run.describe()
    assert (workdir / PROOF_FILE).read_text() == CONTENT + "\n", run.describe()
    await assert_one_segment(proxy, session_id)


@pytest.mark.full_cli  # runs Claude Code twice
async def test_claude_continue_continues_the_same_segment(
    claude_cli: Path, start_proxy, tmp_path: Path,
) -> None:
    """``claude -p --continue`` sends the recorded conversation again plus the new prompt: it continues the first
    run's checkpoint, so the session is still one segment, now of three turns."""
    session_id = f"claude-{uuid.uuid4().hex[:12]}"
    workdir = tmp_path / "work"
    workdir.mkdir()
    script = [*claude_task("qwen3", session_id, workdir / PROOF_FILE, CONTENT, ANSWER),
              follow_up("qwen3", session_id, FOLLOW_UP)]
    proxy = await start_proxy(script=script)

    first = await run_claude(claude_cli, proxy.url, session_id, workdir, PROMPT)
    assert first.returncode == 0, first.describe()
    second = await run_claude(claude_cli, proxy.url, session_id, workdir, "Anything else?", resume=True)

    assert second.returncode == 0, second.describe()
    assert json.loads(second.stdout)["result"] == FOLLOW_UP, second.describe()
    await assert_one_segment(proxy, session_id, turns=3)
