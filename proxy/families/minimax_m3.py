"""MiniMax-M3 (``proxy/tokenization/minimax.py``): M2's turn shape, but ``<mm:think>``/``</mm:think>`` reasoning kept in
EVERY assistant turn (a turn without reasoning renders a bare ``</mm:think>``), a ``developer`` turn after the
system turn, the ``thinking_mode`` switch (``enabled``: prompt ends ``<mm:think>``; ``disabled``: ``</mm:think>``;
``adaptive`` or unset: nothing, the model decides) and namespaced XML tool calls
(``]<]minimax[>[<tool_call>\\n]<]minimax[>[<invoke name="f">]<]minimax[>[<key>value]<]minimax[>[</key>...``, nested
objects and arrays expanded into elements, None values omitted).

A different template, not a revision of M2's rules: its own family. SGLang 0.5.23 parses it with ``minimax-m3`` (tool
calls and reasoning, ``<mm:think>`` forced open only for ``thinking_mode=enabled``); so do the proxy's parsers
(``proxy/parsing/minimax_m3_blocks.py``, the ``minimax-m3`` reasoning markers in ``proxy/parsing/formats.py``) and the
embedded engine (``engine/minimax_markup.py``, ``engine/parsers/minimax.py``).
"""

from __future__ import annotations

from proxy.families.model_family import ModelFamily
from proxy.tokenization.minimax import MiniMaxM3TitoTokenizer

MINIMAX_M3 = ModelFamily(
    name="minimax_m3",
    aliases=("minimax-m3",),
    tokenizer=MiniMaxM3TitoTokenizer,
    tool_call_parser="minimax-m3",
    reasoning_parser="minimax-m3",
    verified=(
        "property battery (2,000 episodes, thinking_mode enabled/disabled/adaptive) vs the official template "
        "(transformers), tests/tokenization/test_minimax_properties.py; parsers vs SGLang 0.5.23's minimax-m3, "
        "tests/parsing/test_minimax_m3_parsing.py"
    ),
    template_sha256=(MiniMaxM3TitoTokenizer.TEMPLATE_SHA256,),
    tokenizer_folder="minimax-m3",
    description="MiniMax-M3: <mm:think> in every turn, thinking_mode switch, namespaced XML tool calls",
)

FAMILIES = (MINIMAX_M3,)
