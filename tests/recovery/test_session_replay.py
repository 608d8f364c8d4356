"""A session replayed from its step journal is the session that ran: same steps, chains, boundary reasons,
generation ids, byte-identical exports, whatever the interleaving of its generations (item 3 of issue 16).

The workloads run on the registry (which journals every commit into the store) with the fake tokenizer: branches,
retries of a prompt (refreshes), resamples, tool turns, TITO failures (``TITO-FAIL`` in a new message), truncated
answers (closed chains), failed generations (drops) and siblings prepared before either commits. The replay sees
only the store's journal.
"""

from __future__ import annotations

from typing import Any

import orjson
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.controllers.session_registry import SessionRegistry
from proxy.trajectory import step_journal
from proxy.trajectory.export import ExportOptions, export_segments
from proxy.trajectory.memory_store import InMemoryTrajectoryStore
from proxy.trajectory.session import Session
from proxy.trajectory.session_config import SessionConfig
from proxy.trajectory.session_replay import replay_session
from proxy.trajectory.tokens import path

from tests.controllers.driving import answer_ids, logprobs_for
from tests.controllers.fakes import FakeTokenizer

SYS = {"role": "system", "content": "You are terse."}
USERS = [{"role": "user", "content": text} for text in ("add 5 and 3", "and 2?", "thanks", "TITO-FAIL again")]
TOOL = {"role": "tool", "tool_call_id": "call_0", "content": "8"}
ANSWERS = [
    {"role": "assistant", "content": "It is 8."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": '{"a": 5, "b": 3}'}}]},
    {"role": "assistant", "content": "You are welcome."},
]
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
OPTIONS = [ExportOptions(), ExportOptions(export_all_checkpoints=True, record_token_versions=True)]

operation = st.one_of(
    # prepare: kind (0 new conversation, 1 continue a committed one, 2 a prompt seen before, 3 continue with a tool
    # result), which one, which user message, with tools
    st.tuples(st.just("prepare"), st.integers(0, 3), st.integers(0, 20), st.integers(0, 3), st.booleans()),
    # commit: which pending generation, which answer, truncated (no end-of-turn: the chain closes)
    st.tuples(st.just("commit"), st.integers(0, 20), st.integers(0, 2), st.integers(0, 5)),
    st.tuples(st.just("drop"), st.integers(0, 20)),
)


async def run_workload(registry: SessionRegistry, operations: list[tuple[Any, ...]]) -> None:
    pending: list[tuple[Any, list[dict[str, Any]], list | None]] = []
    conversations: list[tuple[list[dict[str, Any]], list | None]] = []
    prompts: list[tuple[list[dict[str, Any]], list | None]] = []
    for op in operations:
        if op[0] == "prepare":
            _, kind, which, user, with_tools = op
            tools = TOOLS if with_tools else None
            if kind in (1, 3) and conversations:
                history, tools = conversations[which % len(conversations)]
                messages = history + [TOOL if kind == 3 else USERS[user]]
            elif kind == 2 and prompts:
                messages, tools = prompts[which % len(prompts)]
            else:
                messages = [SYS, USERS[user]]
            prompts.append((messages, tools))
            prepared = await registry.prepare("s", messages, tools=tools)
            pending.append((prepared, messages, tools))
        elif op[0] == "commit" and pending:
            _, which, answer, truncate = op
            prepared, messages, tools = pending.pop(which % len(pending))
            message = ANSWERS[answer]
            ids = answer_ids(registry.tokenizer, message)
            finish = "stop"
            if truncate == 0:
                ids, finish = ids[:2], "length"
            await registry.commit(prepared.handle, ids, logprobs_for(ids, which) if truncate != 1 else None,
                                  [f"v{which % 2}"] * len(ids), None, finish, message)
            conversations.append((messages + [message], tools))
        elif op[0] == "drop" and pending:
            prepared, _, _ = pending.pop(op[1] % len(pending))
            await registry.drop(prepared.handle)


def structure(session: Session) -> list[tuple[Any, ...]]:
    """Every exported chain's steps as the replay must rebuild them."""
    export = session.preview_export()
    rows = []
    for tip in export.tips:
        rows.append(tuple(
            (step.step_id, step.chain_id, step.position, step.generation_id, step.boundary_reason,
             step.boundary_detail, step.tito_failed, step.finish_reason, step.extendable)
            for step in path(tip)
        ))
    return rows


async def replayed(store: InMemoryTrajectoryStore, config: SessionConfig, tokenizer: FakeTokenizer) -> Session:
    stored = await store.load_session("s")
    records = [step_journal.decode(data) for data in stored.steps] if stored is not None else []
    return replay_session("s", config, tokenizer.end_of_turn_id, records)


def assert_same_session(live: Session, replay: Session, tokenizer: FakeTokenizer) -> None:
    assert structure(replay) == structure(live)
    for options in OPTIONS:
        expected = export_segments(live.preview_export(), options, tokenizer)
        got = export_segments(replay.preview_export(), options, tokenizer)
        assert orjson.dumps(got) == orjson.dumps(expected)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, min_size=1, max_size=24))
def test_a_replayed_session_exports_byte_for_byte_what_the_live_one_does(operations) -> None:
    async def main() -> None:
        config = SessionConfig(max_steps_per_session=None)
        tokenizer = FakeTokenizer()
        store = InMemoryTrajectoryStore()
        registry = SessionRegistry(tokenizer, store, config)
        await run_workload(registry, operations)
        live = registry.peek("s")
        if live is None:
            return
        assert_same_session(live, await replayed(store, config, tokenizer), tokenizer)

    trio.run(main)


async def test_siblings_prepared_before_either_commits_replay_in_their_live_order():
    # Two first turns prepared together both start the session (session_start); a replay in commit order would
    # prepare the second after the first committed (a resample). A retry of that prompt prepared before the first
    # commit extends nothing either.
    config = SessionConfig(max_steps_per_session=None)
    tokenizer = FakeTokenizer()
    store = InMemoryTrajectoryStore()
    registry = SessionRegistry(tokenizer, store, config)
    messages = [SYS, USERS[0]]
    first = await registry.prepare("s", messages)
    second = await registry.prepare("s", messages)
    dropped = await registry.prepare("s", [SYS, USERS[1]])
    await registry.drop(dropped.handle)
    for prepared, answer in ((second, ANSWERS[0]), (first, ANSWERS[1])):
        ids = answer_ids(tokenizer, answer)
        await registry.commit(prepared.handle, ids, logprobs_for(ids), ["v0"] * len(ids), None, "stop", answer)
    live = registry.peek("s")
    assert [row[0][4] for row in structure(live)] == ["session_start", "session_start"]
    replay = await replayed(store, config, tokenizer)
    assert_same_session(live, replay, tokenizer)
    # In chain order (created at prepare): g1, g2; the dropped g3 left a gap nobody fills.
    assert [row[0][3] for row in structure(replay)] == ["s#g1", "s#g2"]
