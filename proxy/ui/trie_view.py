"""A session's prefix trie as the viewer draws it: contexts, then one node per message, nested by the path.

Two builders give the same JSON shape:

- :func:`live_trie`: a live session's own trie (``proxy/trajectory/prefix_trie.py``): exact, with pending
  nodes (the prompts of generations in flight), checkpoints (the newest step committed on an assistant node) and the
  boundary reason of every step that began a segment;
- :func:`trie_from_segments`: a finalized session (whose trie was freed) or an exported file: the segments'
  message paths merged by equal messages. A segment's steps answered its *last* ``num_turns`` assistant messages
  (after its first step, a segment grows only by extending each step's answer), so those nodes are marked as
  checkpoints with their step ids; its ``boundary_reason`` goes on its first step's node.

A node::

    {"role", "preview", "text", "tool_calls", "reasoning", "depth", "pending", "checkpoint",
     "step": {"step_id", "finish_reason", "generation_id", "tokens", "commits"} | None,
     "boundary": {"reason", "detail"} | None, "children": [node, ...]}

Children are in creation order (the trie) or first-seen order (segments). Both builders walk with an explicit stack:
an agent's history can be deeper than Python's recursion limit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.trajectory.prefix_trie import NodeKind, PrefixTrie, TrieNode
from proxy.ui.segment_view import as_json_value, as_list

#: characters of a message's one-line preview, and of the full text the page shows on hover
PREVIEW_CHARS = 140
TEXT_CHARS = 4000


def _content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
        return "".join(part.get("text") or "" for part in content if isinstance(part, Mapping))
    return ""


def _tool_calls(message: Mapping[str, Any]) -> list[str]:
    """``name(arguments)`` of each tool call, arguments cut short."""
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            arguments = function.get("arguments")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False)
            calls.append(f"{function.get('name')}({arguments[:80]})")
    return calls


def message_summary(message: Any) -> dict[str, Any]:
    """Role, one-line preview, capped text, tool calls and whether it carries reasoning."""
    if not isinstance(message, Mapping):
        return {"role": "unknown", "preview": "", "text": "", "tool_calls": [], "reasoning": False}
    text = _content_text(message.get("content"))
    calls = _tool_calls(message)
    line = " ".join(text.split())
    if calls:
        line = (line + " " if line else "") + " ".join("→ " + call for call in calls)
    if len(line) > PREVIEW_CHARS:
        line = line[: PREVIEW_CHARS - 1] + "…"
    return {
        "role": str(message.get("role") or "unknown"),
        "preview": line,
        "text": text[:TEXT_CHARS],
        "tool_calls": calls,
        "reasoning": bool(message.get("reasoning_content") or message.get("reasoning")),
    }


def _context_json(tools: Any, template_kwargs: Any) -> dict[str, Any]:
    names = []
    for tool in tools or ():
        function = tool.get("function") if isinstance(tool, Mapping) else None
        names.append(str(function.get("name")) if isinstance(function, Mapping) else str(tool.get("name", "?")))
    return {"tools": names if tools is not None else None, "template_kwargs": template_kwargs or {}, "children": []}


def _node_json(message: Any, depth: int) -> dict[str, Any]:
    return {**message_summary(message), "depth": depth, "pending": False, "checkpoint": False, "step": None,
            "boundary": None, "children": []}


# -- a live session's trie -------------------------------------------------------------------------------------------


def _ordered(node: TrieNode) -> list[TrieNode]:
    """A node's children: by key in the order each key first came, and each key's variants as they were created."""
    return list(node.child_variants())


def live_trie(trie: PrefixTrie) -> dict[str, Any]:
    """The live trie (see the module docstring). Sync and read-only: call it without an await in between."""
    contexts = []
    stack: list[tuple[TrieNode, list[dict[str, Any]]]] = []
    for context in _ordered(trie.root):
        info = context.message
        drawn = _context_json(info.tools, dict(info.template_kwargs))
        contexts.append(drawn)
        stack += [(child, drawn["children"]) for child in reversed(_ordered(context))]
        while stack:
            node, siblings = stack.pop()
            drawn_node = _node_json(node.message, node.depth)
            drawn_node["pending"] = not node.committed_below
            step = node.checkpoint
            if step is not None and node.kind is NodeKind.MESSAGE:
                drawn_node["checkpoint"] = True
                drawn_node["step"] = {"step_id": step.step_id, "finish_reason": step.finish_reason,
                                      "generation_id": step.generation_id, "tokens": step.span_length,
                                      "commits": node.commits}
                if step.boundary_reason is not None:
                    drawn_node["boundary"] = {"reason": step.boundary_reason, "detail": step.boundary_detail}
            siblings.append(drawn_node)
            stack += [(child, drawn_node["children"]) for child in reversed(_ordered(node))]
    return {"source": "trie", "contexts": contexts}


# -- a trie rebuilt from segments ------------------------------------------------------------------------------------


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def trie_from_segments(segments: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The segments' message paths merged into one tree (see the module docstring)."""
    contexts: dict[str, dict[str, Any]] = {}
    # id(drawn node) -> its children by message key (kept beside the JSON, which must stay plain)
    index: dict[int, dict[str, dict[str, Any]]] = {}
    for segment in sorted(segments, key=lambda s: (s.get("segment_index") is None, s.get("segment_index") or 0)):
        tools = as_json_value(segment.get("tools"))
        kwargs = as_json_value(segment.get("chat_template_kwargs")) or {}
        context_key = _key([tools, kwargs])
        if context_key not in contexts:
            contexts[context_key] = _context_json(tools, kwargs)
        node = contexts[context_key]
        messages = as_list(as_json_value(segment.get("messages"))) or []
        step_ids = [int(step) for step in as_list(segment.get("step_ids")) or ()]
        records = {record.get("step_id"): record for record in as_list(as_json_value(segment.get("steps"))) or ()
                   if isinstance(record, Mapping)}
        answers = [i for i, message in enumerate(messages)
                   if isinstance(message, Mapping) and message.get("role") == "assistant"]
        paired = min(len(answers), len(step_ids))
        step_at = dict(zip(answers[len(answers) - paired:], step_ids[len(step_ids) - paired:]))
        first_step = step_ids[0] if step_ids else None
        for depth, message in enumerate(messages, start=1):
            children = index.setdefault(id(node), {})
            key = _key(message)
            child = children.get(key)
            if child is None:
                child = _node_json(message, depth)
                children[key] = child
                node["children"].append(child)
            node = child
            step_id = step_at.get(depth - 1)
            if step_id is None:
                continue
            record = records.get(step_id, {})
            node["checkpoint"] = True
            if node["step"] is None or node["step"]["step_id"] != step_id:
                node["step"] = {"step_id": step_id, "finish_reason": record.get("finish_reason"),
                                "generation_id": record.get("generation_id"), "tokens": None, "commits": None}
            if step_id == first_step and segment.get("boundary_reason") is not None:
                node["boundary"] = {"reason": segment.get("boundary_reason"),
                                    "detail": segment.get("boundary_detail")}
    return {"source": "segments", "contexts": list(contexts.values())}


__all__ = ["live_trie", "message_summary", "trie_from_segments"]
