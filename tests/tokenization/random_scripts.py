"""A seeded, hypothesis-free twin of ``strategies.scripts``: the same episode shapes and text alphabet, drawn with
``random.Random`` so a battery of thousands of episodes spends its time in the templates, not in hypothesis's draw
machinery (about 0.4 s per episode on the shared test machine). A failing episode is named by its seed.
"""

from __future__ import annotations

import json
import random
from typing import Any

from .strategies import EDGE_TEXTS, TOOLS, Script, _clean

_KEYS = ("a", "path", "query", "b_c", "ключ", "名前")
_PLANES = ((0x20, 0x7F), (0xA0, 0x3000), (0x4E00, 0x9FFF), (0x1F300, 0x1FAFF), (0x10000, 0x10FFFF))


def random_text(rng: random.Random, max_size: int = 30) -> str:
    """Edge-case text half the time, else random code points (no surrogates) from a few planes."""
    while True:
        if rng.random() < 0.5:
            text = rng.choice(EDGE_TEXTS)
        else:
            chars = []
            for _ in range(rng.randint(0, max_size)):
                low, high = rng.choice(_PLANES)
                chars.append(chr(rng.randint(low, high)))
            text = "".join(chars)
        if _clean(text):
            return text


def random_content(rng: random.Random) -> Any:
    if rng.random() < 0.33:
        return [{"type": "text", "text": random_text(rng, 12)} for _ in range(rng.randint(1, 3))]
    return random_text(rng)


def _key(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(_KEYS)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(1, 8)))


def random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randint(0, 6 if depth < 2 else 4)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.randint(-(10**6), 10**6)
    if kind == 3:
        return rng.uniform(-1e6, 1e6)
    if kind == 4:
        return random_text(rng, 15)
    if kind == 5:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {_key(rng): random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def random_tool_call(rng: random.Random, call_id: str) -> dict[str, Any]:
    arguments: Any = {_key(rng): random_json(rng) for _ in range(rng.randint(0, 3))}
    form = rng.choice(["object", "json", "json_ascii"])
    if form != "object":
        arguments = json.dumps(arguments, ensure_ascii=form == "json_ascii")
    name = rng.choice(["search", "read_file", "run_shell"])
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def random_assistant(rng: random.Random, step: int, thinking_off: bool, needs_calls: bool, always_reasons: bool):
    n_calls = rng.choice([1, 1, 2, 3] if needs_calls else [0, 0, 1, 1, 2, 3])
    calls = [random_tool_call(rng, f"call_{step}_{i}") for i in range(n_calls)]
    content = (None if rng.random() < 0.5 else random_text(rng, 40)) if calls else random_text(rng, 40)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if not thinking_off:
        if always_reasons:
            reasoning = random_text(rng, 40)
            while not reasoning.strip():
                reasoning = random_text(rng, 40)
        else:
            reasoning = None if rng.random() < 0.33 else random_text(rng, 40)
        if reasoning is not None:
            message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return message


def random_script(family: str, rng: random.Random, max_steps: int = 12) -> Script:
    """An episode shaped as ``strategies.scripts`` draws them (half agentic tool loops, half mixed chat)."""
    thinking = rng.choice([None, True, False])
    tools = rng.choice([None, TOOLS])
    tool_loop = rng.random() < 0.5
    always_reasons = tool_loop and rng.randint(0, 2) > 0
    opening: list[dict[str, Any]] = []
    if rng.random() < 0.5:
        opening.append({"role": "system", "content": random_text(rng)})
    opening.append({"role": "user", "content": random_content(rng)})
    n_steps = rng.randint(1, max_steps)
    steps = []
    for step in range(n_steps):
        last = step == n_steps - 1
        assistant = random_assistant(rng, step, thinking is False, tool_loop and not last, always_reasons)
        follow_up: list[dict[str, Any]] = []
        if not last:
            calls = assistant.get("tool_calls", [])
            for i in range(rng.randint(1, 3) if calls else 0):
                call_id = calls[i]["id"] if i < len(calls) else f"call_{step}_extra{i}"
                follow_up.append({"role": "tool", "tool_call_id": call_id, "content": random_content(rng)})
            if not calls or (not tool_loop and rng.random() < 0.5):
                follow_up.append({"role": "user", "content": random_content(rng)})
        steps.append((assistant, tuple(follow_up)))
    return Script(family, thinking, tools, tuple(opening), tuple(steps))
