"""Sessions whose messages are long: their text is held packed (issue 21 item 5, ``packed_text.py``), and nothing a
client or a trainer sees changes. What is sent upstream, what is exported, how an edited earlier message is
detected and what a restart replays are the same as with every text held whole."""

from __future__ import annotations

import json

import pytest

from proxy.canonical_json import canonical_json
from proxy.controllers.session_registry import SessionRegistry
from proxy.trajectory import message_keys, packed_text
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
    # A long reasoning is held packed in the answer's node too, and reads back as sent.
    thought = [node for node in long_nodes if node.message.get("reasoning_content")]
    assert len(thought) == (3 if reasoning else 0)
    for node in thought:
        assert type(node._message["reasoning_content"]) is PackedText and type(node.variant) is PackedText
        assert node.message["reasoning_content"] == "Checking each line. " * 60
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


@pytest.mark.parametrize("where", ["user", "tool", "answer", "system", "reasoning"])
async def test_one_character_changed_in_an_earlier_long_message_is_seen_as_without_packing(real_tokenizer, where,
                                                                                          monkeypatch):
    turns = conversation(reasoning=where == "reasoning")
    history, answer = turns[-1]
    index = {"system": 0, "user": 1, "tool": 3, "answer": 4, "reasoning": 4}[where]  # 2: the call, 5: user(2)
    field = "reasoning_content" if where == "reasoning" else "content"
    content = history[index][field]
    assert len(content) >= PACK_AT
    assert history[index]["role"] == {"answer": "assistant", "reasoning": "assistant"}.get(where, where)
    at = len(content) // 2
    edited = [*history[:index], {**history[index], field: content[:at] + "#" + content[at + 1:]},
              *history[index + 1:]]

    async def boundary() -> tuple:
        reg, _ = await run(real_tokenizer, InMemoryTrajectoryStore(), turns)
        again = await turn(reg, "s", edited, answer, tools=TOOLS)
        return again.prepared.encode, again.prepared.boundary_reason, again.result.forked, again.context

    packed = await boundary()
    monkeypatch.setattr(packed_text, "PACK_AT", 10**9)
    assert packed == await boundary()
    if where == "reasoning":  # no key holds reasoning: the echo follows the committed answer (prefix_trie.py's rule)
        assert packed[0].value == "incremental" and not packed[2]
    else:  # not taken for the stored message: a new segment or a fork
        assert packed[0].value == "full" or packed[2]


async def test_a_restart_replays_packed_messages_to_the_same_export(real_tokenizer):
    turns = conversation(reasoning=True)
    live, _ = await run(real_tokenizer, InMemoryTrajectoryStore(), turns)
    store = InMemoryTrajectoryStore()
    await run(real_tokenizer, store, turns)
    restarted = SessionRegistry(real_tokenizer, store=store, config=SessionConfig(max_steps_per_session=None))
    (await restarted._use("s"))  # rebuilt from the journal
    assert any(type(node.key.content) is PackedText for node in trie_nodes(restarted) if node.depth)
    assert await finalize_and_read(restarted) == await finalize_and_read(live)


async def test_answers_told_apart_only_by_a_long_reasoning_stay_variants_as_without_packing(real_tokenizer,
                                                                                           monkeypatch):
    # Two samples of one prompt with the same answer text and different long reasoning are two variants; a later
    # turn that echoes the second follows it (its own segment), whichever way the reasoning is held.
    prompt = [SYS, user(1)]
    first, second = say(1, reasoning=True), {**say(1, reasoning=True), "reasoning_content": "Reading again. " * 80}

    async def samples() -> tuple:
        reg = SessionRegistry(real_tokenizer, store=InMemoryTrajectoryStore(),
                              config=SessionConfig(max_steps_per_session=None))
        one = await turn(reg, "s", prompt, first, tools=TOOLS)
        two = await turn(reg, "s", prompt, second, tools=TOOLS)
        later = await turn(reg, "s", [*prompt, second, user(2)], say(2, reasoning=False), tools=TOOLS)
        prompt_node = [node for node in trie_nodes(reg) if node.depth == 2][0]
        variants = list(prompt_node.child_variants())
        return (len(variants), two.result.forked, later.prepared.encode, later.context,
                [t.result.step_id for t in (one, two, later)], await finalize_and_read(reg))

    packed = await samples()
    assert packed[0] == 2
    monkeypatch.setattr(packed_text, "PACK_AT", 10**9)
    assert packed == await samples()


def write(call_id: str, salt: int, canonical: bool) -> dict:
    """A call whose arguments carry a file's contents: as a model spells them, or already in canonical form."""
    arguments = {"path": f"part_{salt}.py", "content": body(salt + 200, 50)}
    spelled = canonical_json(arguments) if canonical else json.dumps(arguments, indent=1)
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "write", "arguments": spelled}}]}


def writing(canonical: bool) -> list[tuple[list[dict], dict]]:
    """Two turns of an agent that writes long files through tool calls."""
    turns, messages = [], [SYS, user(1)]
    for salt in (1, 2):
        call = write(f"call_{salt}", salt, canonical)
        turns.append((list(messages), call))
        messages += [call, {"role": "tool", "tool_call_id": f"call_{salt}", "content": "written"}]
        answer = {"role": "assistant", "content": f"Wrote part {salt}."}
        turns.append((list(messages), answer))
        messages += [answer, user(salt + 1)]
    return turns


@pytest.mark.parametrize("canonical", [False, True], ids=["as-spelled", "canonical"])
async def test_long_tool_call_arguments_are_held_packed_once_and_everything_seen_is_unchanged(real_tokenizer,
                                                                                            canonical, monkeypatch):
    turns = writing(canonical)
    cached = message_keys._cached_arguments.cache_info().currsize
    reg, done = await run(real_tokenizer, InMemoryTrajectoryStore(), turns)
    assert message_keys._cached_arguments.cache_info().currsize == cached  # long arguments are not kept there
    calls = [node for node in trie_nodes(reg) if node.depth and type(node._message) is dict
             and node._message.get("tool_calls")]
    assert len(calls) == 2
    for node, (_, sent) in zip(sorted(calls, key=lambda n: n.depth), turns[0::2]):
        held = node._message["tool_calls"][0]["function"]["arguments"]
        assert type(held) is PackedText and type(node.key.tool_calls[0].arguments) is PackedText
        assert (held is node.key.tool_calls[0].arguments) == canonical  # one packed text when the spelling is canonical
        assert node.message == sent
    segments = await finalize_and_read(reg)

    monkeypatch.setattr(packed_text, "PACK_AT", 10**9)
    whole, whole_done = await run(real_tokenizer, InMemoryTrajectoryStore(), turns)
    assert [t.context for t in whole_done] == [t.context for t in done]
    assert [t.prepared.encode for t in whole_done] == [t.prepared.encode for t in done]
    assert all(t.prepared.encode.value == "incremental" for t in done[1:])
    assert await finalize_and_read(whole) == segments


async def test_one_character_changed_in_earlier_long_arguments_is_seen_as_without_packing(real_tokenizer,
                                                                                         monkeypatch):
    turns = writing(canonical=False)
    history, answer = turns[-1]
    call = history[2]
    spelled = call["tool_calls"][0]["function"]["arguments"]
    at = spelled.index("return x * 7")  # inside the written file's text
    changed = {**call, "tool_calls": [{**call["tool_calls"][0], "function": {
        "name": "write", "arguments": spelled[:at] + "return x * 8" + spelled[at + 12:]}}]}
    edited = [*history[:2], changed, *history[3:]]

    async def boundary() -> tuple:
        reg, _ = await run(real_tokenizer, InMemoryTrajectoryStore(), turns)
        again = await turn(reg, "s", edited, answer, tools=TOOLS)
        return again.prepared.encode, again.prepared.boundary_reason, again.result.forked, again.context

    packed = await boundary()
    assert packed[0].value == "full" or packed[2]  # not taken for the stored call: a new segment or a fork
    monkeypatch.setattr(packed_text, "PACK_AT", 10**9)
    assert packed == await boundary()
