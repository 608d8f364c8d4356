"""A multi-turn, tool-using MiniMax-M3 session through the proxy on its embedded engine, which speaks M3 itself (its
default policy writes ``<mm:think>`` reasoning and namespaced ``]<]minimax[>[`` tool calls after the prompt's
``thinking_mode`` prefix, and ends turns with ``[e~[``): the official openai SDK as the agent, the proxy's parsers
(local, or SGLang's ``minimax-m3`` through the engine's endpoints), and one token-exact segment equal to the official
template's render of the conversation."""

from __future__ import annotations

import pytest
import trio

from serving.tokenizer_files import model_tokenizer_path
from tests.e2e.family_session import official_ids, run_calculator_session

NS = "]<]minimax[>["


def call(name: str, a: int, b: int) -> str:
    return (f'{NS}<tool_call>\n{NS}<invoke name="{name}">{NS}<a>{a}{NS}</a>{NS}<b>{b}{NS}</b>{NS}</invoke>\n'
            f"{NS}</tool_call>")


#: what a MiniMax-M3 model writes after the thinking_mode=enabled prompt "]~b]ai\n<mm:think>" (the engine adds "[e~[")
SCRIPTED = [
    "First add 5 and 3.</mm:think>I'll calculate that." + call("add", 5, 3),
    "Now multiply 8 by 2.</mm:think>" + call("multiply", 8, 2),
    "Done.</mm:think>5 plus 3 is 8, times 2 is 16.",
]


@pytest.mark.parametrize(
    "mode, scripted, backend",
    [("enabled", True, "local"), ("adaptive", False, "sglang_api"), ("disabled", False, "local")],
    ids=["enabled-scripted-3-turns-local", "adaptive-engine-policy-sglang", "disabled-engine-policy-local"],
)
async def test_minimax_m3_tool_session_is_one_token_exact_segment(
    nursery: trio.Nursery, tokenizer_root, mode: str, scripted: bool, backend: str
) -> None:
    """Each ``thinking_mode``: the tool calls parse, the reasoning (none when disabled) comes back as
    ``reasoning_content``, and echoing the answers keeps one segment equal to the official render."""
    kwargs = {"thinking_mode": mode}
    run = await run_calculator_session(
        nursery, family="minimax_m3", path=model_tokenizer_path("minimax-m3", tokenizer_root),
        session=f"m3-{mode}", script=SCRIPTED if scripted else (), turns=len(SCRIPTED) if scripted else 2,
        backend=backend, ends=("[e~[", "[e~["), chat_template_kwargs=kwargs)
    answers = [m for m in run.messages if m["role"] == "assistant"]
    if mode == "disabled":
        assert not any(m.get("reasoning_content") for m in answers)
    else:
        assert all(m.get("reasoning_content") for m in answers)
        assert not any("mm:think" in (m.get("content") or "") + m["reasoning_content"] for m in answers)
    # The template renders each turn "]~b]ai\n" + "<mm:think>R</mm:think>" (or "</mm:think>") + content + calls,
    # closed "[e~[\n": the conversation's render without the last newline.
    run.assert_one_segment_equal_to(official_ids(run, run.messages, cut=1, chat_template_kwargs=kwargs))
