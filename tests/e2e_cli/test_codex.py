"""Codex CLI (npm ``@openai/codex``, pinned in conftest.py) end to end through the proxy's ``POST /v1/responses``:
``codex exec`` with a custom model provider whose ``base_url`` is the proxy runs the scripted task (the engine calls
Codex's own shell tool, ``exec_command``, to write a file, then answers), exits 0, and the session exports as one
segment. Fails on main, which has no ``/v1/responses`` (the test then skips, saying so)."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.e2e_cli.agents import PROOF_FILE, assert_one_segment, codex_task, run_codex

CONTENT = "written by codex through dressage"
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
