"""The recorded SGLang 0.5.23 parser results (``fixtures/sglang_0_5_23.jsonl.gz``; how they were made and the file
format: ``fixtures/generate_sglang_fixtures.py``)."""

from __future__ import annotations

import functools
import gzip
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from proxy.upstream.errors import UpstreamHTTPError
from proxy.upstream.events import FunctionCallParse, ReasoningParse

FIXTURES = Path(__file__).with_name("fixtures") / "sglang_0_5_23.jsonl.gz"


@attrs.frozen
class Output:
    """One generated model output."""

    index: int
    kind: str
    """``clean`` (written the way a Qwen model writes), or the tricky case it exercises."""
    text: str
    tool_set: str
    tools: Sequence[Mapping[str, Any]]
    open_at_start: bool
    """The prompt left reasoning open (the output starts inside it)."""
    tool_call_parser: str
    blocks: tuple[str, ...]
    """Clean outputs: the tool-call blocks, in order."""

    @property
    def clean(self) -> bool:
        return self.kind == "clean"


@attrs.frozen
class Case:
    """One request to a parser endpoint and SGLang 0.5.23's answer."""

    endpoint: str
    """``parse_function_call`` or ``separate_reasoning``."""
    output: Output
    text: str
    parser: str
    tool_set: str
    tools: Sequence[Mapping[str, Any]]
    expected: Mapping[str, Any]
    """The reply: ``{"normal_text", "calls"}`` / ``{"reasoning_text", "text"[, "blocks"]}``, or ``{"error": type}``
    when SGLang raised (its server answers 500)."""

    @property
    def crashes(self) -> bool:
        return "error" in self.expected

    def describe(self) -> str:
        return f"output {self.output.index} ({self.output.kind}), {self.endpoint} {self.parser!r}: {self.text!r}"


@attrs.frozen
class Fixtures:
    meta: Mapping[str, Any]
    outputs: tuple[Output, ...]
    cases: tuple[Case, ...]

    def of(self, endpoint: str) -> list[Case]:
        return [case for case in self.cases if case.endpoint == endpoint]


@functools.cache
def load() -> Fixtures:
    with gzip.open(FIXTURES, "rt", encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines]
    meta = records[0]["meta"]
    tool_sets = meta["tool_sets"]
    outputs: dict[int, Output] = {}
    cases: list[Case] = []
    for record in records[1:]:
        if "case" not in record:
            outputs[record["output"]] = Output(
                index=record["output"], kind=record["kind"], text=record["text"], tool_set=record["tools"],
                tools=tool_sets[record["tools"]], open_at_start=record["open_at_start"],
                tool_call_parser=record["tool_call_parser"], blocks=tuple(record.get("blocks", ())))
            continue
        output = outputs[record["output"]]
        if record["case"] == "fc":
            cases.append(Case("parse_function_call", output, record.get("text", output.text),
                              record["tool_call_parser"], record["tools"], tool_sets[record["tools"]],
                              record["expected"]))
        else:
            cases.append(Case("separate_reasoning", output, record.get("prefix", "") + output.text,
                              record["reasoning_parser"], "", (), record["expected"]))
    return Fixtures(meta=meta, outputs=tuple(outputs.values()), cases=tuple(cases))


# -- the per-family fixtures (``sglang_glm_0_5_23.jsonl.gz``, ``sglang_deepseek_0_5_23.jsonl.gz``) ------------------


def load_family(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """``(meta, outputs, cases)`` of a family's fixtures (``fixtures/generate_glm_fixtures.py`` wrote the format)."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle]
    meta = lines[0]["meta"]
    assert meta["sglang"] == "0.5.23"
    return meta, [line for line in lines if "kind" in line], [line for line in lines if "case" in line]


class RecordedFamily:
    """A parser client answering with SGLang 0.5.23's recorded answers of a family's fixtures; a request that was
    not recorded fails the test."""

    def __init__(self, tools: Sequence[Mapping[str, Any]], outputs: Sequence[Mapping[str, Any]],
                 cases: Sequence[Mapping[str, Any]]) -> None:
        self.tools = list(tools)
        self.fc = {(c["tool_call_parser"], c["text"]): c["expected"] for c in cases if c["case"] == "fc"}
        self.sr = {(c["reasoning_parser"], c["prefix"] + outputs[c["output"]]["text"]): c["expected"]
                   for c in cases if c["case"] == "sr"}

    async def parse_function_call(self, text: str, parser: str, tools: Iterable[Mapping[str, Any]]) -> Any:
        assert list(tools) == self.tools
        return recorded_reply(self.fc[parser, text], FunctionCallParse)

    async def separate_reasoning(self, text: str, parser: str) -> Any:
        return recorded_reply(self.sr[parser, text], ReasoningParse)


def recorded_reply(body: Mapping[str, Any], parse: Any) -> Any:
    """A recorded answer as the client returns it; a recorded crash as SGLang's 500."""
    if "error" in body:
        raise UpstreamHTTPError(500, "Internal Server Error")
    return parse.from_json(body)


def engine_answer(case: Mapping[str, Any], outputs: Sequence[Mapping[str, Any]],
                  tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the embedded engine's parsers answer to one recorded request of a family's fixtures, in the recorded
    shape (``{"error": "crash"}`` where SGLang would answer 500)."""
    from engine.parsers import ParserCrash, parse_function_call, separate_reasoning  # noqa: PLC0415

    if case["case"] != "fc":
        result = separate_reasoning(case["prefix"] + outputs[case["output"]]["text"], case["reasoning_parser"])
        return {"reasoning_text": result.reasoning_text, "text": result.text}
    try:
        normal_text, calls = parse_function_call(case["text"], case["tool_call_parser"], list(tools))
    except ParserCrash:
        return {"error": "crash"}
    return {"normal_text": normal_text, "calls": [c.to_json() for c in calls]}
