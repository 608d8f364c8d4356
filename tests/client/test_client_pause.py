"""ProxyClient's rollout-gate methods under trio against the real proxy (``run_proxy`` on its embedded engine):
``pause()``, ``resume(weight_version=)``, ``pause_state()``, a refused resume as ``ProxyError``, and a chat request
that waits through a pause and completes after the resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from engine import EngineConfig
from proxy.cli import run_proxy
from proxy.client import PauseState, ProxyClient, ProxyError
from proxy.config import ProxyConfig


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.02)


async def test_client_pause_resume_and_pause_state(nursery, qwen3_path: Path, mock_clock) -> None:
    handle = await nursery.start(
        run_proxy, ProxyConfig(port=0, tokenizer_path=qwen3_path, partial_rollout=True),
        EngineConfig(tokenizer_path=qwen3_path, token_rate=10.0,
                     script_lines=({"session": "c", "output": "one two three four five six seven eight"},)),
    )
    engine = handle.engine.engine
    async with ProxyClient(handle.url) as proxy:
        assert await proxy.pause_state() == PauseState("RUNNING", 0, None, 0, 0)
        answers: list[dict] = []

        async def chat() -> None:
            answers.append(await proxy.chat_completions(
                {"messages": [{"role": "user", "content": "go"}], "chat_template_kwargs": {"enable_thinking": False}},
                session_id="c"))

        async with trio.open_nursery() as requests:
            requests.start_soon(chat)
            await engine.wait_until(lambda: any(len(s.output_ids) >= 3 for s in engine.active_requests()))
            paused = await proxy.pause()
            assert (paused["state"], paused["aborted"], paused["waiting"]) == ("PAUSED", 1, 1)
            assert paused["tokens_kept"] >= 3
            again = await proxy.pause()
            assert again["already_paused"] is True and again["aborted"] == 0
            state = await proxy.pause_state()
            assert (state.state, state.epoch, state.in_flight, state.waiting) == ("PAUSED", 0, 0, 1)
            assert state.raw["pauses_total"] == 1
            # (The scripted engine resumes its entry only once the cut request has finished its last step.)
            await engine.wait_until(lambda: not engine.active_requests())
            resumed = await proxy.resume(weight_version="v1")
            assert resumed == {"state": "RUNNING", "epoch": 1, "weight_version": "v1", "admitted": 1,
                               "already_running": False}
        (answer,) = answers
        assert answer["choices"][0]["message"]["content"] == "one two three four five six seven eight"
        assert (await proxy.resume())["already_running"] is True
        with pytest.raises(ProxyError) as caught:
            await proxy.resume(weight_version="v2")
        assert (caught.value.status, caught.value.code, caught.value.type) == (
            409, "resume_refused", "invalid_request_error")
        assert await proxy.pause_state() == PauseState("RUNNING", 1, "v1", 0, 0)
