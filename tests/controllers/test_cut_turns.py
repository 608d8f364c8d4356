"""A session whose answers keep hitting ``max_tokens``: every turn starts a new segment with a full encode (spec
5.4), and that encode is stored as a PrefixedContext naming the path the session holds (issue 21 item 5), not as a
second copy of it. What the model saw, what is exported and what a restart replays stay exactly the same."""

from __future__ import annotations

import pytest

from proxy.controllers.session_registry import SessionRegistry
from proxy.trajectory import prefix_share
from proxy.trajectory.memory_store import InMemoryTrajectoryStore
from proxy.trajectory.session_config import SessionConfig
from proxy.trajectory.tokens import PrefixedContext, path

from .driving import answer_ids, finalize_and_read, logprobs_for

SYS = {"role": "system", "content": "You are a patient storyteller. " * 12}
TURNS = 6
CUT = 12  # generated tokens a turn keeps: every answer is cut short


def user(index: int) -> dict:
    return {"role": "user", "content": f"Part {index}: tell me more about the lighthouse keeper and the storm. " * 4}


def answer(index: int) -> dict:
    return {"role": "assistant", "content": f"In part {index} the keeper climbed the stairs while the sea rose, "
                                            "and the lamp kept turning through the night until dawn came."}


def cut_answer(tokenizer, index: int, thinking: bool) -> tuple[list[int], dict]:
    """What the model generates for turn ``index``, cut short, and the message the agent echoes for it. Thinking:
    the model reasons first; the template renders that reasoning only after the last user turn, so a later full
    encode differs from the path at each earlier answer's reasoning."""
    if not thinking:
        ids = answer_ids(tokenizer, answer(index))[:CUT]
        return ids, {"role": "assistant", "content": tokenizer.decode(ids)}
    reasoning = f"The user wants part {index}; the storm should reach the lighthouse. " * 3
    head = tokenizer.encode_text(f"<think>\n{reasoning}\n</think>\n\n")
    ids = head + tokenizer.encode_text(answer(index)["content"])[:CUT]
    return ids, {"role": "assistant", "reasoning_content": reasoning, "content": tokenizer.decode(ids[len(head):])}


async def run_session(tokenizer, store, thinking: bool = False) -> tuple[SessionRegistry, list, list]:
    """Drive TURNS cut turns; the ids each prepare sent upstream, and the full encodes of its messages."""
    reg = SessionRegistry(tokenizer, store=store, config=SessionConfig(max_steps_per_session=None))
    messages = [SYS, user(1)]
    sent, expected = [], []
    for index in range(1, TURNS + 1):
        prepared = await reg.prepare("s", messages)
        ids, cut = cut_answer(tokenizer, index, thinking)
        sent.append(prepared.input_ids())
        expected.append(list(tokenizer.encode_full(messages)))
        result = await reg.commit(prepared.handle, ids, logprobs_for(ids, index), ["v1"] * len(ids), None, "length",
                                  cut)
        assert not result.extendable
        messages = [*messages, cut, user(index + 1)]
    return reg, sent, expected


@pytest.mark.parametrize("thinking", [False, True], ids=["plain", "thinking"])
async def test_cut_turns_store_the_path_once_and_send_and_export_what_a_full_encode_gives(real_tokenizer, thinking,
                                                                                          monkeypatch):
    reg, sent, expected = await run_session(real_tokenizer, InMemoryTrajectoryStore(), thinking)
    # What the model saw: each turn's whole prompt, encoded from its messages.
    assert sent == expected
    steps = sorted((step for tip in reg._sessions["s"].session.preview_export().tips for step in path(tip)),
                   key=lambda step: step.step_id)
    assert len(steps) == TURNS and all(step.base is None for step in steps)  # one full-encode segment a turn
    # From the second turn on, each encode names the previous turn's path and stores only what follows it.
    for earlier, later in zip(steps, steps[1:]):
        stored = later.stored_context
        assert type(stored) is PrefixedContext and stored.step is earlier
        assert stored.length > prefix_share.MIN_SHARED_IDS and len(stored.tail) >> 2 < later.context_count // 2
    stored_ids = sum(step.nbytes() for step in steps)
    assert stored_ids < 2 * 8 * steps[-1].length  # O(context): each id once (8 bytes for generated ones)
    shared = await finalize_and_read(reg)

    # The same session with nothing shared exports the same segments, field for field.
    monkeypatch.setattr(prefix_share, "MIN_SHARED_IDS", 10**9)
    plain, plain_sent, _ = await run_session(real_tokenizer, InMemoryTrajectoryStore(), thinking)
    assert plain_sent == sent
    assert all(type(tip.stored_context) is bytes for tip in plain._sessions["s"].session.preview_export().tips)
    assert await finalize_and_read(plain) == shared
    assert [segment["token_ids"][:len(context)] for segment, context in zip(shared, sent)] == sent


async def test_a_restart_replays_cut_turns_to_the_same_steps_and_export(real_tokenizer):
    # Two identical sessions: one finalized by the proxy that ran it, one by a proxy restarted on its store.
    live, _, _ = await run_session(real_tokenizer, InMemoryTrajectoryStore())
    store = InMemoryTrajectoryStore()
    await run_session(real_tokenizer, store)
    restarted = SessionRegistry(real_tokenizer, store=store, config=SessionConfig(max_steps_per_session=None))
    replayed = (await restarted._use("s")).session  # rebuilt from the journal
    steps = sorted((step for tip in replayed.preview_export().tips for step in path(tip)), key=lambda s: s.step_id)
    assert [type(step.stored_context) for step in steps] == [bytes] + [PrefixedContext] * (TURNS - 1)
    assert await finalize_and_read(restarted) == await finalize_and_read(live)

