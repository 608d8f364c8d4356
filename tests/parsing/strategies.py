"""Hypothesis strategies: model outputs in the Qwen formats, well-formed and not, and ways to cut them."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from proxy.parsing.formats import THINK_END, THINK_START, TOOL_CALL_END, TOOL_CALL_START, ToolCallFormat

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"type": "string", "enum": ["c", "f"]}}}}},
    {"type": "function", "function": {"name": "calc", "parameters": {"type": "object", "properties": {
        "x": {"type": "number"}, "exact": {"type": "boolean"}, "opts": {"type": "object"},
        "items": {"type": "array"}, "maybe": {"type": ["null", "integer"]}}}}},
    {"type": "function", "function": {"name": "файл_🔧", "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}}}}},
]
TOOL_NAMES = [t["function"]["name"] for t in TOOLS]
MARKERS = (THINK_START, THINK_END, TOOL_CALL_START, TOOL_CALL_END)
XML_MARKUP = ("<function=", "</function>", "<parameter=", "</parameter>")

# Pieces that stress the hold-back logic: proper prefixes of every marker, and the characters markup is made of.
FRAGMENTS = ["<", "</", "<t", "<tool", "<tool_call", "</tool_cal", "<th", "<think", "</think", "</th", ">", "\n",
             " ", "\n\n", "_call>", "ink>", "🦜", "é", "\u200b", "{", "}", '"']
_ALPHABET = st.characters(codec="utf-8", exclude_categories=("Cs",))


def _no_markers(text: str, extra: tuple[str, ...] = ()) -> bool:
    return not any(m in text for m in MARKERS + extra)


def plain_text(max_size: int = 40, extra_excluded: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    """Text with unicode, emoji, whitespace and marker prefixes, but no complete marker."""
    pieces = st.lists(st.sampled_from(FRAGMENTS) | st.text(_ALPHABET, max_size=6), max_size=max_size // 3)
    return pieces.map("".join).filter(lambda s: _no_markers(s, extra_excluded))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(_ALPHABET, max_size=8),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(_ALPHABET, max_size=5), children, max_size=3),
    max_leaves=8,
)


@st.composite
def json_block(draw: st.DrawFn, names: list[str] = TOOL_NAMES) -> tuple[str, str]:
    """A well-formed ``qwen25`` block and its tool name."""
    name = draw(st.sampled_from(names))
    arguments = draw(st.dictionaries(st.text(_ALPHABET, max_size=6), json_values, max_size=4))
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=draw(st.booleans()))
    assume(_no_markers(body))
    return f"{TOOL_CALL_START}\n{body}\n{TOOL_CALL_END}", name


def _xml_value(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), "string") if isinstance(kind, list) else kind
    if kind == "integer":
        return st.integers(-(10**9), 10**9).map(str)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False).map(repr) | st.integers(-999, 999).map(str)
    if kind == "boolean":
        return st.sampled_from(["true", "false", "True"])
    if kind in ("object", "array"):
        inner = st.dictionaries(st.text(_ALPHABET, max_size=4), json_values, max_size=3) if kind == "object" else \
            st.lists(json_values, max_size=3)
        return inner.map(lambda v: json.dumps(v, ensure_ascii=False)).filter(
            lambda s: _no_markers(s, XML_MARKUP))
    return plain_text(20, XML_MARKUP)


@st.composite
def xml_block(draw: st.DrawFn, names: list[str] = TOOL_NAMES) -> tuple[str, str]:
    """A well-formed ``qwen3_coder`` block and its tool name."""
    name = draw(st.sampled_from(names))
    tool = next((t for t in TOOLS if t["function"]["name"] == name), None)
    properties = tool["function"]["parameters"]["properties"] if tool else {"a": {"type": "string"}}
    keys = draw(st.lists(st.sampled_from(sorted(properties)), unique=True, max_size=len(properties)))
    params = "".join(f"<parameter={k}>\n{draw(_xml_value(properties[k]))}\n</parameter>\n" for k in keys)
    return f"{TOOL_CALL_START}\n<function={name}>\n{params}</function>\n{TOOL_CALL_END}", name


def block_for(fmt: ToolCallFormat, names: list[str] = TOOL_NAMES) -> st.SearchStrategy[tuple[str, str]]:
    return json_block(names) if fmt is ToolCallFormat.JSON else xml_block(names)


@st.composite
def well_formed_output(draw: st.DrawFn, fmt: ToolCallFormat) -> tuple[str, bool, int]:
    """``(text, reasoning_open_at_start, number of calls)``: what a Qwen model writes, in the shape both SGLang's
    parsers and ours must read identically: optional reasoning, text, then calls separated by newlines."""
    blocks = [b for b, _ in draw(st.lists(block_for(fmt), max_size=3))]
    reasoning = draw(plain_text(30))
    content = draw(plain_text(30))
    style = draw(st.sampled_from(["none", "closed", "open_at_start", "implicit_close"]))
    calls = "\n".join(blocks)
    if style == "implicit_close" and blocks:
        # Qwen3.5 quirk: <tool_call> closes the reasoning, no </think>, no text between.
        return f"{THINK_START}\n{reasoning}\n{calls}", False, len(blocks)
    answer = content + ("\n" + calls if blocks else "") + draw(st.sampled_from(["", "\n", " \n"]))
    if style == "closed":
        return f"{THINK_START}\n{reasoning}\n{THINK_END}\n\n{answer}", False, len(blocks)
    if style == "open_at_start":
        return f"{reasoning}\n{THINK_END}\n\n{answer}", True, len(blocks)
    return answer, False, len(blocks)


def _malformed_blocks(fmt: ToolCallFormat) -> st.SearchStrategy[str]:
    common = [
        f"{TOOL_CALL_START}\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": }}\n{TOOL_CALL_END}",
        f"{TOOL_CALL_START}\n{{\"name\": \"\", \"arguments\": {{}}}}\n{TOOL_CALL_END}",
        f"{TOOL_CALL_START}\n{{\"arguments\": {{}}}}\n{TOOL_CALL_END}",
        f"{TOOL_CALL_START}\n<function=>\n</function>\n{TOOL_CALL_END}",
        f"{TOOL_CALL_START}\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n{TOOL_CALL_END}",
        f"{TOOL_CALL_START}{TOOL_CALL_END}",
        f"{TOOL_CALL_START}\nnot a call\n{TOOL_CALL_END}",
        TOOL_CALL_END,  # stray
    ]
    unknown = block_for(fmt, ["no_such_tool"]).map(lambda b: b[0])
    return st.sampled_from(common) | unknown | block_for(ToolCallFormat.JSON if fmt is ToolCallFormat.XML else
                                                         ToolCallFormat.XML).map(lambda b: b[0])


@st.composite
def mixed_output(draw: st.DrawFn, fmt: ToolCallFormat) -> str:
    """Anything a model might write: text, markers, well-formed and malformed blocks in any order, possibly
    ending inside a block or inside reasoning."""
    piece = (
        plain_text(20)
        | block_for(fmt).map(lambda b: b[0])
        | _malformed_blocks(fmt)
        | st.sampled_from(MARKERS)
        | st.sampled_from([" ", "\n", "\n\n", "\t "])
    )
    return "".join(draw(st.lists(piece, max_size=8)))


@st.composite
def cuts(draw: st.DrawFn, text: str) -> list[str]:
    """``text`` cut into deltas at arbitrary points (single characters and empty deltas included)."""
    points = sorted(draw(st.lists(st.integers(0, len(text)), max_size=min(len(text) + 2, 40))))
    if draw(st.booleans()) and len(text) <= 200:
        points = list(range(len(text) + 1))  # one character at a time
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]
