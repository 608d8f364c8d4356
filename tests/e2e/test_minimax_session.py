"""A multi-turn, tool-using MiniMax-M2 session through the proxy on its embedded engine, which speaks MiniMax itself
(its default policy writes MiniMax markup after ``]~b]ai\\n<think>\\n`` and ends turns with ``[e~[``): the official
openai SDK as the agent, the proxy's parsers (local, or SGLang's through the engine's endpoints), and one token-exact
segment equal to the official template's render of the conversation the model had."""

from __future__ import annotations

import pytest
import trio

from serving.tokenizer_files import model_tokenizer_path
from tests.e2e.family_session import official_ids, run_calculator_session


def call(name: str, a: int, b: int) -> str:
    return (f'\n<minimax:tool_call>\n<invoke name="{name}">\n<parameter name="a">{a}</parameter>\n'
            f'<parameter name="b">{b}</parameter>\n</invoke>\n</minimax:tool_call>')


#: what a MiniMax-M2 model writes after the prompt's "]~b]ai\n<think>\n" (the engine adds "[e~[")
SCRIPTED = [
    "First add 5 and 3.\n</think>\n\nI'll calculate that." + call("add", 5, 3),
    "Now multiply 8 by 2.\n</think>\n\n" + call("multiply", 8, 2),
    "Done.\n</think>\n\n5 plus 3 is 8, times 2 is 16.",
]


@pytest.mark.parametrize("scripted", [True, False], ids=["scripted-3-turns-local", "engine-policy-2-turns-sglang"])
async def test_minimax_tool_session_is_one_token_exact_segment(
    nursery: trio.Nursery, tokenizer_root, scripted: bool
) -> None:
    run = await run_calculator_session(
        nursery, family="minimax_m2", path=model_tokenizer_path("minimax", tokenizer_root), session="minimax-calc",
        script=SCRIPTED if scripted else (), turns=len(SCRIPTED) if scripted else 2,
        backend="local" if scripted else "sglang_api",  # sglang_api: the engine's minimax-m2 / minimax endpoints
        ends=("[e~[", "[e~["))
    # Token-exact: the segment is the official template's render of the conversation the model had, closed by
    # [e~[. The parsers (SGLang's too) keep the newline the template puts before </think> in the reasoning, so the
    # echoed reasoning ends with "\n"; the model's own reasoning is that text without it.
    had = [dict(m, reasoning_content=m["reasoning_content"].removesuffix("\n")) if m.get("reasoning_content") else m
           for m in run.messages]
    run.assert_one_segment_equal_to(official_ids(run, had, cut=1))
