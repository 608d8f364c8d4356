"""MiniMax-M2 (``proxy/tokenization/minimax.py``: ChatML's turn shape with ``]~b]``/``[e~[``; think tags; XML
``<minimax:tool_call><invoke name=...><parameter name=...>`` tool calls).

The official template (the wheel's ``minimax`` folder, its default identity "MiniMax-M2.7") has no thinking switch:
the generation prompt always opens ``<think>\\n``, and history keeps reasoning only after the last user message.
SGLang names (the proxy's local parser reads both): tool calls ``minimax-m2``, reasoning ``minimax``. MiniMax-M3
changed its markup and thinking rules and is its own family (``proxy/families/minimax_m3.py``). Detection: the
template hash, else structurally (M2's pinned generation prompt and user-turn junction).
"""

from __future__ import annotations

from proxy.families.model_family import ModelFamily
from proxy.tokenization.minimax import MiniMaxM2TitoTokenizer

MINIMAX_M2 = ModelFamily(
    name="minimax_m2",
    aliases=("minimax-m2", "minimax"),
    tokenizer=MiniMaxM2TitoTokenizer,
    tool_call_parser="minimax-m2",
    reasoning_parser="minimax",
    verified=(
        "property battery (2,000 episodes) vs the official template (transformers), "
        "tests/tokenization/test_minimax_properties.py; parsers vs SGLang 0.5.23's minimax-m2/minimax, "
        "tests/parsing/test_minimax_parsing.py"
    ),
    template_sha256=(MiniMaxM2TitoTokenizer.TEMPLATE_SHA256,),
    tokenizer_folder="minimax",
    description="MiniMax-M2: ]~b]ai turns, always thinks, <minimax:tool_call><invoke> tool calls",
)

FAMILIES = (MINIMAX_M2,)
