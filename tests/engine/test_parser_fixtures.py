"""The engine's parsers answer exactly as SGLang 0.5.23's own parser classes did on the recorded outputs
(``tests/parsing/fixtures/sglang_0_5_23.jsonl.gz``: about 4,000 generated outputs, clean and tricky, with
``qwen25``/``qwen``/``qwen3_coder``/``step3p5`` and ``qwen3``/``qwen3-thinking``/``deepseek-r1``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
import pytest

from engine.parsers import ParserCrash, parse_function_call, separate_reasoning
from tests.parsing.sglang_fixtures import Case, load


def _function_call_reply(case: Case) -> dict[str, Any]:
    try:
        normal_text, calls = parse_function_call(case.text, case.parser, list(case.tools))
    except ParserCrash:
        return {"error": "500"}
    return {"normal_text": normal_text, "calls": [call.to_json() for call in calls]}


def _reasoning_reply(case: Case) -> dict[str, Any]:
    result = separate_reasoning(case.text, case.parser)
    reply: dict[str, Any] = {"reasoning_text": result.reasoning_text, "text": result.text}
    if "blocks" in case.expected:
        reply["blocks"] = result.to_json(return_blocks=True)["blocks"]
    return reply


def _expected(case: Case) -> dict[str, Any]:
    return {"error": "500"} if case.crashes else dict(case.expected)


def _failures(cases: list[Case], reply) -> list[str]:
    return [f"{case.describe()}\n  expected {_expected(case)!r}\n  got      {got!r}"
            for case in cases if (got := reply(case)) != _expected(case)]


def test_the_fixtures_cover_the_parsers_and_the_tricky_cases() -> None:
    fixtures = load()
    assert fixtures.meta["sglang"] == "0.5.23"
    assert len(fixtures.outputs) >= 4000
    parsers = Counter((case.endpoint, case.parser) for case in fixtures.cases)
    for parser in ("qwen25", "qwen", "qwen3_coder", "step3p5"):
        assert parsers["parse_function_call", parser] >= 50, parser
    for parser in ("qwen3", "qwen3-thinking", "deepseek-r1"):
        assert parsers["separate_reasoning", parser] >= 500, parser
    kinds = Counter(output.kind for output in fixtures.outputs)
    assert kinds["clean"] >= 1000 and len(kinds) >= 15, kinds
    assert any(case.crashes for case in fixtures.cases)
    assert sum("blocks" in case.expected for case in fixtures.cases) >= 500


@pytest.mark.parametrize("parser", ["qwen25", "qwen", "qwen3_coder", "step3p5"])
def test_parse_function_call_equals_sglang_0_5_23_on_every_fixture(parser: str) -> None:
    cases = [case for case in load().of("parse_function_call") if case.parser == parser]
    failures = _failures(cases, _function_call_reply)
    assert not failures, f"{len(failures)} of {len(cases)} differ; first:\n" + "\n".join(failures[:5])


@pytest.mark.parametrize("parser", ["qwen3", "qwen3-thinking", "deepseek-r1"])
def test_separate_reasoning_equals_sglang_0_5_23_on_every_fixture(parser: str) -> None:
    cases = [case for case in load().of("separate_reasoning") if case.parser == parser]
    failures = _failures(cases, _reasoning_reply)
    assert not failures, f"{len(failures)} of {len(cases)} differ; first:\n" + "\n".join(failures[:5])


async def test_the_http_endpoints_answer_as_sglang_0_5_23(client: httpx.AsyncClient) -> None:
    """Over the socket, for a sample of the cases and every case where SGLang raised: the same JSON, or a 500."""
    cases = [case for index, case in enumerate(load().cases) if case.crashes or index % 40 == 0]
    assert sum(case.crashes for case in cases) >= 3
    for case in cases:
        if case.endpoint == "parse_function_call":
            body = {"text": case.text, "tool_call_parser": case.parser, "tools": list(case.tools)}
        else:
            body = {"text": case.text, "reasoning_parser": case.parser, "return_blocks": "blocks" in case.expected}
        response = await client.post("/" + case.endpoint, json=body)
        if case.crashes:
            assert response.status_code == 500, case.describe()
            continue
        assert response.status_code == 200, case.describe()
        reply = response.json()
        if "blocks" in case.expected:
            blocks = case.expected["blocks"]
            assert reply.pop("blocks") == blocks, case.describe()
            assert reply.pop("reasoning_blocks") == [b["text"] for b in blocks if b["type"] == "reasoning"]
            assert reply.pop("text_blocks") == [b["text"] for b in blocks if b["type"] == "text"]
        assert reply == {k: v for k, v in case.expected.items() if k != "blocks"}, case.describe()
