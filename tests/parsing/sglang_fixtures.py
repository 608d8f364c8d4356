"""The recorded SGLang 0.5.23 parser results (``fixtures/sglang_0_5_23.jsonl.gz``; how they were made and the file
format: ``fixtures/generate_sglang_fixtures.py``)."""

from __future__ import annotations

import functools
import gzip
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

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
