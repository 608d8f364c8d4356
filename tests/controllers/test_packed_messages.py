"""Sessions whose messages are long: their text is held packed (issue 21 item 5, ``packed_text.py``), and nothing a
client or a trainer sees changes. What is sent upstream, what is exported, how an edited earlier message is
detected and what a restart replays are the same as with every text held whole."""

from __future__ import annotations

import json

import pytest

from proxy.controllers.session_registry import SessionRegistry
from proxy.trajectory import packed_text
from proxy.trajectory.memory_store import InMemoryTrajectoryStore
from proxy.trajectory.packed_text import PACK_AT, PackedText
from proxy.trajectory.session_config import SessionConfig

from .driving import finalize_and_read, turn

PARAMETERS = {"type": "object", "properties": {"path": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "read", "description": "Read a file", "parameters": PARAMETERS}}]
SYS = {"role": "system", "content": "You are a coding agent. " + "Keep every change small and tested. " * 40}


def body(salt: int, lines: int = 40) -> str:
    return "".join(f"def step_{salt}_{i}(x):  # é 中文\n    return x * {i} + {salt}\n" for i in range(lines))


def user(salt: int) -> dict:
    return {"role": "user", "content": f"Review part {salt}:\n" + body(salt)}


def read(call_id: str, path: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "read", "arguments": json.dumps({"path": path})}}]}


def result(call_id: str, salt: int) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": body(salt, 60)}


def say(salt: int, reasoning: bool) -> dict:
    answer = {"role": "assistant", "content": f"Part {salt} looks right.\n" + body(salt + 100, 30)}
    if reasoning:
        answer = {"role": "assistant", "reasoning_content": "Checking each line. " * 60, **answer}
    return answer


def conversation(reasoning: bool) -> list[tuple[list[dict], dict]]:
    """(messages, answer) for each turn: long user turns, a tool call with a long result, long answers."""
    turns, messages = [], [SYS, user(1)]
    for salt in range(1, 4):
        call = read(f"call_{salt}", f"part_{salt}.py")
        turns.append((list(messages), call))
        messages += [call, result(f"call_{salt}", salt)]
        answer = say(salt, reasoning)
        turns.append((list(messages), answer))
        messages += [answer, user(salt + 1)]
    return turns


async def run(tokenizer, store, turns, kwargs=None):
    reg = SessionRegistry(tokenizer, store=store, config=SessionConfig(max_steps_per_session=None))
    done = [await turn(reg, "s", messages, answer, tools=TOOLS, kwargs=kwargs) for messages, answer in turns]
    return reg, done


def trie_nodes(reg: SessionRegistry):
    stack = [reg._sessions["s"].session.trie.root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.child_variants())


@pytest.mark.parametrize("reasoning", [False, True], ids=["plain", "reasoning"])
async def test_long_messages_are_held_packed_and_everything_seen_is_unchanged(real_tokenizer, reasoning,
                                                                            monkeypatch):
    turns = conversation(reasoning)
    reg, done = await run(real_tokenizer, InMemoryTrajectoryStore(), turns)
    # Every long content is held packed, once: the key holds it, the node holds the key (or a copy of its message
    # whose content is that same packed object), and the node's message reads back what the client sent.
    long_nodes = [node for node in trie_nodes(reg) if node.depth and len(str(node.message.get("content"))) >= PACK_AT]
    assert len(long_nodes) == 1 + 3 + 3 + 3  # the system prompt, user turns, tool results, answers
    for node in long_nodes:
        assert type(node.key.content) is PackedText
        assert node.plain or node._message["content"] is node._key.content
    segments = await finalize_and_read(reg)
    assert segments[-1]["messages"] == [*turns[-1][0], turns[-1][1]]

    # The same session with every text held whole: the same ids upstream, the same export field for field.
    monkeypatch.setattr(packed_text, "PACK_AT", 10**9)
    whole, whole_done = await run(real_tokenizer, InMemoryTrajectoryStore(), turns)
    assert not any(type(node.key.content) is PackedText for node in trie_nodes(whole) if node.depth)
    assert [t.context for t in whole_done] == [t.context for t in done]
    assert [t.prepared.encode for t in whole_done] == [t.prepared.encode for t in done]
    assert all(t.prepared.encode.value == "incremental" for t in done[1:])  # every echo matched its packed node
    assert await finalize_and_read(whole) == segments


@pytest.mark.parametrize("where", ["user", "tool", "answer", "system"])
async def test_one_character_changed_in_an_earlier_long_message_is_seen_as_without_packing(real_tokenizer, where,
                                                                                          monkeypatch):
    turns = conversation(reasoning=False)
    history, answer = turns[-1]
    index = {"system": 0, "user": 1, "tool": 3, "answer": 5}[where]
    content = history[index]["content"]
    assert len(content) >= PACK_AT
    at = len(content) // 2
    edited = [*history[:index], {**history[index], "content": content[:at] + "#" + content[at + 1:]},
              *history[index + 1:]]

    async def boundary() -> tuple:
        reg, _ = await run(real_tokenizer, InMemoryTrajectoryStore(), turns)
        again = await turn(reg, "s", edited, answer, tools=TOOLS)
        return again.prepared.encode, again.prepared.boundary_reason, again.result.forked, again.context

    packed = await boundary()
    monkeypatch.setattr(packed_text, "PACK_AT", 10**9)
    assert packed == await boundary()
    assert packed[0].value == "full" or packed[2]  # not taken for the stored message: a new segment or a fork


async def test_a_restart_replays_packed_messages_to_the_same_export(real_tokenizer):
    turns = conversation(reasoning=True)
    live, _ = await run(real_tokenizer, InMemoryTrajectoryStore(), turns)
    store = InMemoryTrajectoryStore()
    await run(real_tokenizer, store, turns)
    restarted = SessionRegistry(real_tokenizer, store=store, config=SessionConfig(max_steps_per_session=None))
    (await restarted._use("s"))  # rebuilt from the journal
    assert any(type(node.key.content) is PackedText for node in trie_nodes(restarted) if node.depth)
    assert await finalize_and_read(restarted) == await finalize_and_read(live)
