"""The other ways to map a CLI run to one session (docs/agents.md, "One CLI run, one session"): the CLI sends no
``X-Session-Id`` and the proxy files every request of the run under the CLI's own id. Codex: out of the box, its
conversation id (the ``prompt_cache_key`` of every request, the uuid it prints as ``session id:``). Claude Code: with
``--session-id-header X-Claude-Code-Session-Id``, the uuid ``claude --session-id`` chooses. Full CLI target only."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from tests.e2e_cli.agents import (
    PROOF_FILE, assert_one_segment, claude_task, codex_task, run_claude, run_codex,
)

pytestmark = pytest.mark.full_cli

CONTENT = "filed under the id the CLI sends anyway"
ANSWER = "Done."
PROMPT = "Write the proof file, then say so."


async def test_codex_without_a_session_header_runs_under_its_conversation_id(
    codex_cli: Path, start_proxy, tmp_path: Path,
) -> None:
    # Codex's conversation id is known only once it runs: the script entries are for any session ("*").
    script = [{**entry, "session": "*"} for entry in codex_task("qwen3", "unknown", CONTENT, ANSWER)]
    proxy = await start_proxy(script=script)
    workdir = tmp_path / "work"
    workdir.mkdir()

    run = await run_codex(codex_cli, proxy.url, None, workdir, PROMPT)

    assert run.returncode == 0, run.describe()
    assert (workdir / PROOF_FILE).read_text() == CONTENT + "\n", run.describe()
    thread = re.search(r"session id: ([0-9a-f-]{36})", run.stderr)
    assert thread is not None, run.describe()
    await assert_one_segment(proxy, thread.group(1))


async def test_claude_code_runs_under_its_own_session_header(claude_cli: Path, start_proxy, tmp_path: Path) -> None:
    session_id = str(uuid.uuid4())
    workdir = tmp_path / "work"
    workdir.mkdir()
    proxy = await start_proxy(script=claude_task("qwen3", session_id, workdir / PROOF_FILE, CONTENT, ANSWER),
                              session_id_headers=("X-Claude-Code-Session-Id",))

    run = await run_claude(claude_cli, proxy.url, session_id, workdir, PROMPT, own_session_id=True)

    assert run.returncode == 0, run.describe()
    assert (workdir / PROOF_FILE).read_text() == CONTENT + "\n", run.describe()
    await assert_one_segment(proxy, session_id)
