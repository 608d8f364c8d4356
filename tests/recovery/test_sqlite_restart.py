"""Restarts on a real SQLite file: the store is closed and opened again (as a killed proxy's successor opens it),
first under a registry, then under a whole proxy on its embedded engine with the official openai SDK as the agent.

Each fails on a proxy that does not journal commits or load sessions on first use: after the restart the session
would start over (a full encode: other ids, another segment) and a finalized id would accept steps again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
import trio

from engine import EngineConfig
from proxy.cli import run_proxy
from proxy.config import ProxyConfig
from proxy.controllers.session_registry import SessionRegistry
from proxy.trajectory.encode_plan import EncodeKind
from proxy.trajectory.memory_store import InMemoryTrajectoryStore
from proxy.trajectory.session_config import SessionConfig
from proxy.trajectory.session_errors import SessionAbortedError, SessionFinalizedError
from proxy.trajectory.stores import open_store

from tests.controllers.driving import turn
from tests.controllers.fakes import FakeTokenizer
from tests.e2e.harness import SDK_OPTIONS

from .test_registry_restart import A1, A2, A3, SYS, T1, U1, U2, DriftedTokenizer, conversation, dumped


def registry(store, tokenizer=None) -> SessionRegistry:
    return SessionRegistry(tokenizer or FakeTokenizer(), store, SessionConfig(max_steps_per_session=None))


async def test_a_registry_on_a_reopened_sqlite_file_continues_live_sessions_and_keeps_finalized_and_aborted(tmp_path):
    url = f"sqlite:///{tmp_path / 'trajectories.sqlite3'}"
    reference = registry(InMemoryTrajectoryStore())
    async with open_store(url) as store:
        before = registry(store)
        _, second = await conversation(before, "s")
        await conversation(before, "f")
        await conversation(before, "a")
        finalized = await before.finalize("f")
        assert await before.abort("a")
    await conversation(reference, "s")

    async with open_store(url) as store:
        drifted = DriftedTokenizer()
        after = registry(store, drifted)
        third = await turn(after, "s", [SYS, U1, A1, T1, A2, U2], A3)
        assert third.prepared.encode is EncodeKind.INCREMENTAL and drifted.full_encodes == 0
        assert third.context[: len(second.checkpoint)] == second.checkpoint
        await turn(reference, "s", [SYS, U1, A1, T1, A2, U2], A3)
        assert await after.finalize("s") == await reference.finalize("s")
        assert dumped(await after.read(session_id="s")) == dumped(await reference.read(session_id="s"))
        with pytest.raises(SessionFinalizedError):
            await after.prepare("f", [SYS, U1, A1, T1, A2, U2])
        assert await after.finalize("f") == finalized
        with pytest.raises(SessionAbortedError):
            await after.finalize("a")


MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello 😀."}]
OUTPUTS = ["Hello there!", "Hello again, friend.", "Goodbye for now."]
FOLLOW_UPS = ["Once more.", "And farewell?"]


async def serve(store: str, qwen3_path: Path, session: str, outputs: list[str], work: Any) -> Any:
    """A proxy on ``store`` whose engine answers ``outputs`` in order, for ``work(proxy url, engine)``."""
    config = ProxyConfig(port=0, tokenizer_path=qwen3_path, trajectory_build_model="qwen3", store=store,
                         tool_call_parse_backend="local", reasoning_parse_backend="local")
    engine = EngineConfig(tokenizer_path=qwen3_path,
                          script_lines=tuple({"session": session, "output": output} for output in outputs))
    async with trio.open_nursery() as nursery:
        handle = await nursery.start(run_proxy, config, engine)
        result = await work(handle.url, handle.engine.engine)
        nursery.cancel_scope.cancel()
    return result


async def agent_turns(url: str, session: str, messages: list[dict[str, Any]], follow_ups: list[str]) -> None:
    """The agent: one chat turn per follow-up (the first on ``messages`` as they are), its answer appended."""
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", default_headers={"X-Session-Id": session}, **SDK_OPTIONS)
    async with client:
        for index in range(len(follow_ups) + 1):
            if index:
                messages.append({"role": "user", "content": follow_ups[index - 1]})
            answer = await client.chat.completions.create(model="m", messages=messages)
            messages.append({"role": "assistant", "content": answer.choices[0].message.content})


async def finalize_and_read(url: str, session: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        finalized = await client.post("/session/finalize", json={"session_id": session})
        assert finalized.status_code == 200, finalized.text
        read = await client.post("/trajectory/read", json={"session_id": session})
        assert read.status_code == 200, read.text
        return read.json()["data"]


async def test_an_agent_continues_its_conversation_through_a_proxy_restart_on_the_same_sqlite_file(
    tmp_path, qwen3_path
):
    session = "agent-1"
    url = f"sqlite:///{tmp_path / 'restarted.sqlite3'}"
    messages = list(MESSAGES)
    prompts: dict[str, list[list[int]]] = {}

    async def first_life(proxy_url, engine):
        await agent_turns(proxy_url, session, messages, FOLLOW_UPS[:1])

    async def second_life(proxy_url, engine):
        await agent_turns(proxy_url, session, messages, [])  # the same SDK client code, a new process's proxy
        prompts["restarted"] = [list(record.input_ids) for record in engine.request_log]
        return await finalize_and_read(proxy_url, session)

    # The restarted agent's next turn: the two turns so far, then a new user message.
    await serve(url, qwen3_path, session, OUTPUTS[:2], first_life)
    messages.append({"role": "user", "content": FOLLOW_UPS[1]})
    restarted = await serve(url, qwen3_path, session, OUTPUTS[2:], second_life)

    reference_messages = list(MESSAGES)

    async def uninterrupted(proxy_url, engine):
        await agent_turns(proxy_url, session, reference_messages, FOLLOW_UPS)
        prompts["uninterrupted"] = [list(record.input_ids) for record in engine.request_log]
        return await finalize_and_read(proxy_url, session)

    reference = await serve(f"sqlite:///{tmp_path / 'reference.sqlite3'}", qwen3_path, session, OUTPUTS, uninterrupted)
    assert reference_messages == messages
    # The third request's prompt is the recorded checkpoint plus the new turn, exactly as without the restart ...
    assert prompts["restarted"] == prompts["uninterrupted"][2:]
    # ... and the session is one segment of three steps, byte for byte the uninterrupted run's.
    assert len(restarted) == 1 and restarted[0]["num_turns"] == 3
    assert orjson.dumps(restarted) == orjson.dumps(reference)
