"""The scripted multi-branch session the viewer tests run through a real proxy on its embedded engine.

One session, four requests: a first turn (step 1, ``session_start``), two branches from its answer (step 2 extends
the chain, step 3 forks from step 1), and a sub-agent with its own system prompt (step 4, ``new_conversation``).
Finalized, it exports three segments: steps [1, 2], [1, 3] (forked from step 1) and [4].
"""

from __future__ import annotations

from typing import Any

SYSTEM = "You are a careful assistant."
QUESTION = "What is 2 + 3?"
FIRST = "It is 5."
BRANCHES = (("And times 2?", "That is 10."), ("And minus 1?", "That is 4."))
SUB_SYSTEM = "You are a sub-agent that adds."
SUB_QUESTION = "Add 1 and 1."
SUB_ANSWER = "1 + 1 = 2."
NO_THINKING = {"enable_thinking": False}


def script(session_id: str) -> list[dict[str, Any]]:
    outputs = [FIRST, *(answer for _, answer in BRANCHES), SUB_ANSWER]
    return [{"session": session_id, "output": output} for output in outputs]


def requests() -> list[list[dict[str, Any]]]:
    """The message lists, in order."""
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    answered = [*first, {"role": "assistant", "content": FIRST}]
    return [
        first,
        *([*answered, {"role": "user", "content": question}] for question, _ in BRANCHES),
        [{"role": "system", "content": SUB_SYSTEM}, {"role": "user", "content": SUB_QUESTION}],
    ]


async def run_session(proxy: Any, session_id: str) -> None:
    """Send the four requests, one after the other (each answer committed before the next)."""
    for messages in requests():
        response = await proxy.chat(session_id, {"model": "m", "messages": messages,
                                                 "chat_template_kwargs": NO_THINKING})
        assert response.status_code == 200, response.text


def expected_tree() -> list[tuple[int, str, str, bool, int]]:
    """(depth, role, text, checkpoint, children) of every message node, depth first, in creation order."""
    return [
        (1, "system", SYSTEM, False, 1),
        (2, "user", QUESTION, False, 1),
        (3, "assistant", FIRST, True, 2),
        (4, "user", BRANCHES[0][0], False, 1),
        (5, "assistant", BRANCHES[0][1], True, 0),
        (4, "user", BRANCHES[1][0], False, 1),
        (5, "assistant", BRANCHES[1][1], True, 0),
        (1, "system", SUB_SYSTEM, False, 1),
        (2, "user", SUB_QUESTION, False, 1),
        (3, "assistant", SUB_ANSWER, True, 0),
    ]


def flatten(trie: dict[str, Any]) -> list[dict[str, Any]]:
    """Every message node of a viewer trie, depth first."""
    found: list[dict[str, Any]] = []

    def walk(nodes: list[dict[str, Any]]) -> None:
        for node in nodes:
            found.append(node)
            walk(node["children"])

    for context in trie["contexts"]:
        walk(context["children"])
    return found


def tree_shape(trie: dict[str, Any]) -> list[tuple[int, str, str, bool, int]]:
    return [(node["depth"], node["role"], node["text"], node["checkpoint"], len(node["children"]))
            for node in flatten(trie)]
