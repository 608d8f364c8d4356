"""The registry restores a session's Idempotency-Keys from its journal (``session_replay.replay_journal``,
``IdempotencyKeys.restore``): a key whose step committed before the restart answers from that step; a step committed
without a key restores nothing; another body under the key is 422; the newest step of a key wins; an ``n > 1``
repeat (``from_step=False``) runs again.

On the registry over a real SQLite file, closed and opened again (a restart), with the fake tokenizer of the
controller tests (the rendering of the answer is covered end to end by ``test_idempotency_restart.py``).
"""

from __future__ import annotations

import pytest

from proxy.api import ApiError
from proxy.controllers import idempotency
from proxy.controllers.idempotency import Claim, IdempotencyKeys, RecordedResponse
from proxy.controllers.session_registry import SessionRegistry
from proxy.trajectory.session_config import SessionConfig
from proxy.trajectory.session_replay import KeyedStep
from proxy.trajectory.stores import open_store

from tests.controllers.driving import turn
from tests.controllers.fakes import FakeTokenizer

SYS = {"role": "system", "content": "You are terse."}
U1 = {"role": "user", "content": "Hi."}
A1 = {"role": "assistant", "content": "Hello."}
U2 = {"role": "user", "content": "Again?"}
A2 = {"role": "assistant", "content": "Hello again."}
FP1, FP2 = "1" * 64, "2" * 64


def registry(store) -> SessionRegistry:
    return SessionRegistry(FakeTokenizer(), store, SessionConfig(max_steps_per_session=None))


async def keyed_turn(reg: SessionRegistry, messages, answer, key: str | None, fingerprint: str = FP1):
    """One committed step, its request under ``key`` (as the chat route hands it to prepare)."""
    return await turn(reg, "s", messages, answer, idempotency=None if key is None else (key, fingerprint))


async def test_keys_come_back_with_their_committed_steps_after_a_restart(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'keys.sqlite3'}"
    async with open_store(url) as store:
        before = registry(store)
        first = await keyed_turn(before, [SYS, U1], A1, "k1")
        await keyed_turn(before, [SYS, U1, A1, U2], A2, None)
        # The same key again (a stream whose client left before its end: the repeat generated again): the newest
        # step is the one a repeat after the restart gets.
        again = await keyed_turn(before, [SYS, U1, A1, U2], A2, "k2", FP2)
        newest = await keyed_turn(before, [SYS, U1, A1, U2], A2, "k2", FP2)
    assert again.result.step_id != newest.result.step_id

    async with open_store(url) as store:
        after = registry(store)
        keys = await after.loaded_idempotency_keys("s")
        assert isinstance(keys, IdempotencyKeys) and len(keys) == 2
        step = await keys.claim("k1", FP1)
        assert isinstance(step, KeyedStep)
        assert (step.step_id, step.assistant_message, step.finish_reason) == (first.result.step_id, A1, "stop")
        assert step.tokens.prompt_length == len(first.prepared.input_ids())
        assert step.tokens.input_ids() == first.prepared.input_ids()
        assert (await keys.claim("k2", FP2)).step_id == newest.result.step_id
        # Another body under a restored key: 422, as before the restart.
        with pytest.raises(ApiError) as refused:
            await keys.claim("k1", FP2)
        assert refused.value.code == idempotency.KEY_REUSED
        # The rendered answer is remembered: later repeats get its bytes.
        answer = RecordedResponse(b"{}", "application/json", False, step.step_id)
        keys.remember("k1", answer)
        assert await keys.claim("k1", FP1) is answer
        # A repeat that cannot be answered from one step (n > 1) takes the key and runs.
        assert isinstance(await keys.claim("k2", FP2, from_step=False), Claim)
        # A key never journaled is new.
        assert isinstance(await keys.claim("k3", FP1), Claim)
