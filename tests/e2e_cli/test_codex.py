"""Codex CLI (npm ``@openai/codex``, pinned in conftest.py) end to end through the proxy's ``POST /v1/responses``:
``codex exec`` with a custom model provider whose ``base_url`` is the proxy (docs/agents.md) runs the scripted task
(the engine calls Codex's own shell tool, ``exec_command``, to write a file, then answers), exits 0, and the session
exports as one segment; for Qwen3 (JSON tool calls) and Qwen3.5 (XML). On main, which has no ``/v1/responses``, the
tests skip, saying so; against the front end's first ready commit Codex got a 400 (its ``client_metadata``)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.e2e_cli.agents import PROOF_FILE, assert_one_segment, codex_task, follow_up, run_codex

CONTENT = "written by codex through dressage"
ANSWER = "I wrote proof.txt with the shell."
FOLLOW_UP = "Nothing else: the file is there."
PROMPT = "Write the proof file, then say so."


@pytest.mark.parametrize("model", ["qwen3", "qwen3_5"])
async def test_codex_exec_writes_the_file_and_exports_one_segment(
    codex_cli: Path, start_proxy, tmp_path: Path, model: str,
) -> None:
    session_id = f"codex-{uuid.uuid4().hex[:12]}"
    proxy = await start_proxy(model=model, script=codex_task(model, session_id, CONTENT, ANSWER))
    workdir = tmp_path / "work"
    workdir.mkdir()

    run = await run_codex(codex_cli, proxy.url, session_id, workdir, PROMPT)

    assert run.returncode == 0, run.describe()
    assert (workdir / PROOF_FILE).read_text() == CONTENT + "\n", run.describe()
    assert ANSWER in run.stdout, run.describe()
    await assert_one_segment(proxy, session_id)


@pytest.mark.full_cli  # runs Codex twice
async def test_codex_exec_resume_continues_the_same_segment(
    codex_cli: Path, start_proxy, tmp_path: Path,
) -> None:
    """``codex exec resume --last`` sends the whole recorded conversation again (store=false) plus the new prompt:
    it continues the first run's checkpoint, so the session is still one segment, now of three turns."""
    session_id = f"codex-{uuid.uuid4().hex[:12]}"
    script = [*codex_task("qwen3", session_id, CONTENT, ANSWER), follow_up("qwen3", session_id, FOLLOW_UP)]
    proxy = await start_proxy(script=script)
    workdir = tmp_path / "work"
    workdir.mkdir()

    first = await run_codex(codex_cli, proxy.url, session_id, workdir, PROMPT)
    assert first.returncode == 0, first.describe()
    second = await run_codex(codex_cli, proxy.url, session_id, workdir, "Anything else?", resume=True)

    assert second.returncode == 0, second.describe()
    assert FOLLOW_UP in second.stdout, second.describe()
    await assert_one_segment(proxy, session_id, turns=3)
