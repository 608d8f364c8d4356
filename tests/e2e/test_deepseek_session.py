"""Multi-turn, tool-using DeepSeek sessions (V3.1, V3.2, V4) through the proxy on its embedded engine, which speaks
DeepSeek itself (``engine/deepseek_markup.py``: each version's markup, turns ended by ``<｜end▁of▁sentence｜>``): the
official openai SDK as the agent, the proxy's DeepSeek parsers (local, or SGLang's through the engine's endpoints),
and one token-exact segment equal to the official rendering of the conversation.

These need the DeepSeek TITO families (``deepseek_v3_1``, ``deepseek_v3_2``, ``deepseek_v4`` in
``proxy.families.registry``), built on another branch: until both are merged each test skips LOUDLY naming the
missing family.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from proxy.families import get_family
from serving.tokenizer_files import model_tokenizer_path
from tests.e2e.family_session import official_ids, run_calculator_session

EOS = "<｜end▁of▁sentence｜>"


def v31_call(name: str, a: int, b: int) -> str:
    return (f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{json.dumps({'a': a, 'b': b})}"
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")


#: what DeepSeek-V3.1 writes with thinking off (the prompt ends "<｜Assistant｜></think>"; after a tool output the
#: template adds no header and the model answers straight away); the engine adds <｜end▁of▁sentence｜>
V31_SCRIPTED = [
    "I'll calculate that." + v31_call("add", 5, 3),
    v31_call("multiply", 8, 2),
    "5 plus 3 is 8, times 2 is 16.",
]
#: family -> (tokenizer folder, SGLang tool-call parser and reasoning parser names the family should carry)
FAMILIES = {"deepseek_v3_1": ("deepseek-v3.1", "deepseekv31", "deepseek-v3"),
            "deepseek_v3_2": ("deepseek-v3.2", "deepseekv32", "deepseek-v3"),
            "deepseek_v4": ("deepseek-v4", "deepseekv4", "deepseek-v4")}


@pytest.fixture(params=list(FAMILIES))
def family(request: pytest.FixtureRequest) -> Any:
    """The family record; a LOUD skip when it does not exist yet (a sync fixture: a skip raised inside the trio run
    loses its reason)."""
    name = request.param
    try:
        return get_family(name)
    except ValueError:
        pytest.skip(f"MISSING FAMILY {name!r}: proxy.families.registry has no DeepSeek TITO family {name!r} (built on "
                    "branch ds-tito); this end-to-end session runs once that branch is merged")


async def test_deepseek_tool_session_is_one_token_exact_segment(nursery: trio.Nursery, tokenizer_root: Any,
                                                                family: Any) -> None:
    """V3.1: three scripted turns (two calls, then the answer), local parsers. V3.2 and V4: the engine's own policy
    (a call for a tool the prompt lists, then the answer), V4 through SGLang's parsers (the engine's stand-ins).
    Either way: the calls parse, every turn ends with <｜end▁of▁sentence｜>, and the session is one segment whose
    ids are the official rendering of the whole conversation."""
    name = family.name
    folder, tool_parser, reasoning_parser = FAMILIES[name]
    assert (family.tool_call_parser, family.reasoning_parser) == (tool_parser, reasoning_parser)
    session = f"{name}-calc"
    scripted = name == "deepseek_v3_1"  # V3.1's template does not render the tools: its policy would not call one
    run = await run_calculator_session(
        nursery, family=name, path=model_tokenizer_path(folder, tokenizer_root), session=session,
        script=V31_SCRIPTED if scripted else (), turns=len(V31_SCRIPTED) if scripted else 2,
        backend="sglang_api" if name == "deepseek_v4" else "local", ends=(EOS, EOS))
    run.assert_one_segment_equal_to(official_ids(run, run.messages))
