"""Hypothesis strategies for the API layer: JSON junk, valid chat bodies, headers, rendered answers."""

from __future__ import annotations

import json
import re
import string
from typing import Any

from hypothesis import strategies as st

from proxy.api.render import AssistantTurn, TokenLogprob, ToolCall, TopLogprob, Usage

# -- JSON values, valid or not -----------------------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "none", "auto", "required", "function", "text", "image_url", "user", "assistant", "tool",
                     "developer", "system", "function", "0", "1"]),
)

json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=16,
)

# Python values a JSON parser never makes: the parsers must refuse them cleanly too.
non_json_values = st.one_of(
    st.tuples(json_scalars, json_scalars),
    st.binary(max_size=8),
    st.frozensets(st.integers(), max_size=3),
    st.builds(object),
    st.dictionaries(st.integers(), json_scalars, min_size=1, max_size=2),
)

any_value = st.one_of(json_values, non_json_values)

# -- strings UTF-8 cannot encode (issue 13) ----------------------------------------------------------------------------

# Any text, lone surrogates included; a bad text always holds at least one lone surrogate (an "x" on each side, so
# no neighbour can pair with it into a valid character once JSON escapes are decoded).
any_text = st.text(alphabet=st.characters(codec=None), max_size=8)
bad_text = st.builds(lambda a, s, b: f"{a}x{chr(s)}x{b}", any_text, st.integers(0xD800, 0xDFFF), any_text)
json_with_any_text = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | any_text | bad_text,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(any_text | bad_text, kids, max_size=3),
    max_leaves=8,
)


def wire(body: Any) -> bytes:
    """A body as a client sends it: ``json.dumps`` writes a lone surrogate as a ``\\uXXXX`` escape."""
    return json.dumps(body).encode("ascii")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _key_path(path: str, key: str) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def first_bad_path(value: Any, path: str = "") -> str | None:
    """The oracle for ``param``: the path of the first string (or key) UTF-8 cannot encode, in document order
    (a key before its value), written ``a.b[0]["not plain"]``; ``""`` for the body itself; None if there is none."""
    if isinstance(value, str):
        return None if _encodable(value) else path
    if isinstance(value, list):
        for index, child in enumerate(value):
            found = first_bad_path(child, f"{path}[{index}]")
            if found is not None:
                return found
    if isinstance(value, dict):
        for key, child in value.items():
            if not _encodable(key):
                return _key_path(path, key)
            found = first_bad_path(child, _key_path(path, key))
            if found is not None:
                return found
    return None


bad_json = json_with_any_text.filter(lambda value: first_bad_path(json.loads(wire(value))) is not None)

# -- headers -----------------------------------------------------------------------------------------------------------

ascii_ids = st.text(alphabet=string.ascii_letters + string.digits + "-_.:/", min_size=1, max_size=40)
HEADER_NAMES = ("X-Session-Id", "X-SMG-Routing-Key", "X-Instance-Id", "X-Turn-Id")


@st.composite
def random_case(draw: st.DrawFn, name: str) -> str:
    return "".join(draw(st.sampled_from([c.lower(), c.upper()])) for c in name)


@st.composite
def headers(draw: st.DrawFn, junk: bool = False) -> dict[str, str]:
    """Some of the identity headers, in random letter case; with ``junk``, values may be blank or non-ASCII."""
    out = {}
    for name in HEADER_NAMES:
        if draw(st.booleans()):
            value = draw(st.one_of(ascii_ids, st.text(max_size=8)) if junk else ascii_ids)
            out[draw(random_case(name))] = value
    if draw(st.booleans()):
        out["Content-Type"] = "application/json"
    return out


@st.composite
def session_headers(draw: st.DrawFn) -> dict[str, str]:
    """Valid identity headers that always include a session id."""
    out = draw(headers())
    if not any(name.lower() == "x-session-id" for name in out):
        out[draw(random_case("X-Session-Id"))] = draw(ascii_ids)
    return out


# -- valid chat bodies -------------------------------------------------------------------------------------------------

texts = st.text(max_size=30)
tool_names = st.sampled_from(["add", "multiply", "read_file", "bash", "search_web"])


@st.composite
def content(draw: st.DrawFn) -> Any:
    if draw(st.booleans()):
        return draw(texts)
    parts = draw(st.lists(texts, max_size=3))
    return [{"type": "text", "text": text} if draw(st.booleans()) else {"text": text} for text in parts]


@st.composite
def tool_call_json(draw: st.DrawFn) -> dict[str, Any]:
    arguments = draw(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3))
    function = {"name": draw(tool_names), "arguments": json.dumps(arguments) if draw(st.booleans()) else arguments}
    call: dict[str, Any] = {"function": function}
    if draw(st.booleans()):
        call["id"] = "call_" + draw(ascii_ids)
    if draw(st.booleans()):
        call["type"] = "function"
    return call


@st.composite
def message(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["system", "developer", "user", "assistant", "tool"]))
    out: dict[str, Any] = {"role": role}
    if role == "assistant":
        if draw(st.booleans()):
            out["content"] = draw(st.none() | content())
        if draw(st.booleans()):
            out[draw(st.sampled_from(["reasoning_content", "reasoning", "thinking"]))] = draw(texts)
        if draw(st.booleans()):
            out["tool_calls"] = draw(st.lists(tool_call_json(), max_size=3))
    else:
        out["content"] = draw(content())
    if role == "tool" and draw(st.booleans()):
        out["tool_call_id"] = "call_" + draw(ascii_ids)
    if draw(st.integers(0, 4)) == 0:
        out["name"] = draw(texts)
    return out


@st.composite
def tools(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(tool_names, unique=True, max_size=4))
    out = []
    for name in names:
        function: dict[str, Any] = {"name": name}
        if draw(st.booleans()):
            function["description"] = draw(texts)
        if draw(st.booleans()):
            function["parameters"] = {"type": "object", "properties": {"a": {"type": "integer"}}}
        out.append({"type": "function", "function": function})
    return out


OPTIONAL_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": st.text(min_size=1, max_size=12),
    "temperature": st.floats(0, 2) | st.integers(0, 2),
    "top_p": st.floats(0.01, 1),
    "top_k": st.sampled_from([-1, 1, 20, 50]),
    "min_p": st.floats(0, 1),
    "presence_penalty": st.floats(-2, 2),
    "frequency_penalty": st.floats(-2, 2),
    "repetition_penalty": st.floats(0.1, 2),
    "max_tokens": st.integers(1, 2**31 - 1),
    "max_completion_tokens": st.integers(1, 2**31 - 1),
    "stop": st.text(min_size=1, max_size=5) | st.lists(st.text(min_size=1, max_size=5), max_size=4),
    "seed": st.integers(0, 2**63 - 1),
    "n": st.integers(1, 16),
    "logit_bias": st.dictionaries(st.integers(0, 10**6), st.floats(-100, 100) | st.integers(-100, 100), max_size=4).map(
        lambda biases: {str(token): bias for token, bias in biases.items()}
    ),
    "reasoning_effort": st.sampled_from(["none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max"])
    | st.floats(0, 0.99),
    "store": st.just(False),
    "modalities": st.just(["text"]),
    "service_tier": st.sampled_from(["auto", "default"]),
    "metadata": st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans()}),
    "logprobs": st.booleans(),
    "chat_template_kwargs": st.dictionaries(
        st.text(max_size=8), st.none() | st.booleans() | st.integers() | st.text(max_size=5), max_size=3
    ),
    "return_token_ids": st.booleans(),
    "response_mask": st.lists(st.sampled_from([0, 1]), max_size=20),
    "session_id": ascii_ids,
    "instance_id": ascii_ids,
    "turn_id": ascii_ids | st.integers(0, 1000),
    "user": st.text(max_size=5),
    "parallel_tool_calls": st.booleans(),
    "response_format": st.sampled_from([
        {"type": "text"},
        {"type": "json_object"},
        {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": {
            "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}},
    ]),
    "some_future_field": json_values,
}


@st.composite
def valid_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": draw(st.lists(message(), min_size=1, max_size=5))}
    for key, strategy in OPTIONAL_FIELDS.items():
        if draw(st.integers(0, 2)) == 0:
            body[key] = draw(strategy)
    if body.get("logprobs") and draw(st.booleans()):
        body["top_logprobs"] = draw(st.integers(0, 20))
    if draw(st.booleans()):
        body["tools"] = draw(tools())
        names = [tool["function"]["name"] for tool in body["tools"]]
        choices = ["none", "auto"] + (["required"] if names else [])
        choice = draw(st.sampled_from(choices + names))
        if draw(st.booleans()):
            body["tool_choice"] = choice if choice in choices else {"type": "function", "function": {"name": choice}}
    if body.get("tool_choice") not in (None, "none", "auto") and body.get("response_format", {}).get("type") != "text":
        # A forced call and an output constraint cannot both hold (SGLang refuses the pair): keep the call.
        body.pop("response_format", None)
    return body


# -- mutations of valid bodies -----------------------------------------------------------------------------------------

FIELDS = [*OPTIONAL_FIELDS, "messages", "tools", "tool_choice", "top_logprobs", "functions", "function_call"]


@st.composite
def mutated_bodies(draw: st.DrawFn) -> Any:
    """A valid body with a few fields (top-level or inside a message) replaced by random values or removed."""
    body = draw(valid_bodies())
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["top", "message", "deep"]))
        if where == "top":
            key = draw(st.sampled_from(FIELDS))
            if draw(st.integers(0, 4)) == 0:
                body.pop(key, None)
            else:
                body[key] = draw(any_value)
        else:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                continue
            index = draw(st.integers(0, len(messages) - 1))
            if where == "message":
                messages[index] = draw(any_value)
            elif isinstance(messages[index], dict):
                key = draw(st.sampled_from(["role", "content", "tool_calls", "tool_call_id", "name",
                                            "reasoning_content"]))
                messages[index][key] = draw(any_value)
    return body


# -- rendered answers --------------------------------------------------------------------------------------------------

call_ids = st.builds(lambda s: "call_" + s, ascii_ids)


@st.composite
def tool_calls(draw: st.DrawFn) -> tuple[ToolCall, ...]:
    calls = []
    for _ in range(draw(st.integers(0, 3))):
        arguments = draw(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=8), max_size=3))
        calls.append(ToolCall(draw(call_ids), draw(tool_names), json.dumps(arguments, ensure_ascii=False)))
    return tuple(calls)


turns = st.builds(
    AssistantTurn,
    content=st.none() | st.text(max_size=40),
    reasoning_content=st.none() | st.text(max_size=40),
    tool_calls=tool_calls(),
    truncated=st.booleans(),
)

usages = st.builds(
    Usage,
    prompt_tokens=st.integers(0, 10**6),
    completion_tokens=st.integers(0, 10**5),
    reasoning_tokens=st.none() | st.integers(0, 100),
    cached_tokens=st.none() | st.integers(0, 100),
)

logprob_values = st.floats(max_value=0.0, allow_nan=False) | st.just(float("-inf"))

top_logprobs = st.builds(TopLogprob, token=st.text(max_size=4), logprob=logprob_values)
token_logprobs = st.builds(
    TokenLogprob, token=st.text(max_size=4), logprob=logprob_values,
    top_logprobs=st.lists(top_logprobs, max_size=3).map(tuple),
)
