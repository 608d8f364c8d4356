"""Codex CLI (npm ``@openai/codex``, pinned in conftest.py) end to end through the proxy's ``POST /v1/responses``:
``codex exec`` with a custom model provider whose ``base_url`` is the proxy runs the scripted task (the engine calls
Codex's own shell tool, ``exec_command``, to write a file, then answers), exits 0, and the session exports as one
segment. Fails on main, which has no ``/v1/responses`` (the test then skips, saying so)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.e2e_cli.agents import FULL_TARGET, PROOF_FILE, assert_one_segment, codex_task, follow_up, run_codex

CONTENT = "written by codex through dressage"
FOLLOW_UP = "Nothing else: the file is there."
ANSWER = "I wrote proof.txt with the shell."


async def test_codex_exec_writes_the_file_and_exports_one_segment(
    responses_endpoint: None, codex_cli: Path, start_proxy, tmp_path: Path,
) -> None:
    session_id = f"codex-{uuid.uuid4().hex[:12]}"
    proxy = await start_proxy(script=codex_task(session_id, CONTENT, ANSWER))
    workdir = tmp_path / "work"
    workdir.mkdir()

    run = await run_codex(codex_cli, proxy.url, session_id, workdir, "Write the proof file, then say so.")

    assert run.returncode == 0, run.describe()
    assert (workdir / PROOF_FILE).read_text() == CONTENT + "\n", run.describe()
    assert ANSWER in run.stdout, run.describe()
    await assert_one_segment(proxy, session_id)


@pytest.mark.skipif(not FULL_TARGET, reason="full CLI target only (./dev e2e-cli): runs Codex twice")
async def test_codex_exec_resume_continues_the_same_segment(
    responses_endpoint: None, codex_cli: Path, start_proxy, tmp_path: Path,
) -> None:
    """``codex exec resume --last`` sends the whole recorded conversation again (store=false) plus the new prompt:
    it continues the first run's checkpoint, so the session is still one segment, now of three turns."""
    session_id = f"codex-{uuid.uuid4().hex[:12]}"
    proxy = await start_proxy(script=[*codex_task(session_id, CONTENT, ANSWER), follow_up(session_id, FOLLOW_UP)])
    workdir = tmp_path / "work"
    workdir.mkdir()

    first = await run_codex(codex_cli, proxy.url, session_id, workdir, "Write the proof file, then say so.")
    assert first.returncode == 0, first.describe()
    second = await run_codex(codex_cli, proxy.url, session_id, workdir, "Anything else?", resume=True)

    assert second.returncode == 0, second.describe()
    assert FOLLOW_UP in second.stdout, second.describe()
    await assert_one_segment(proxy, session_id, turns=3)
