"""MiniMax-M3 (``proxy/tokenization/minimax.py``): M2's turn shape, but ``<mm:think>``/``</mm:think>`` reasoning kept in
EVERY assistant turn (a turn without reasoning renders a bare ``</mm:think>``), a ``developer`` turn after the
system turn, the ``thinking_mode`` switch (``enabled``: prompt ends ``<mm:think>``; ``disabled``: ``</mm:think>``;
``adaptive`` or unset: nothing, the model decides) and namespaced XML tool calls
(``]<]minimax[>[<tool_call>\\n]<]minimax[>[<invoke name="f">]<]minimax[>[<key>value]<]minimax[>[</key>...``, nested
objects and arrays expanded into elements, None values omitted).

A different template, not a revision of M2's rules: its own family. SGLang 0.5.23 parses it with ``minimax-m3`` (tool
calls and reasoning, ``<mm:think>`` forced open only for ``thinking_mode=enabled``); the proxy's parsers do not read
that markup yet (docs/families.md, "MiniMax"), so the record names none.
"""

from __future__ import annotations

from proxy.families.model_family import ModelFamily
from proxy.tokenization.minimax import MiniMaxM3TitoTokenizer

MINIMAX_M3 = ModelFamily(
    name="minimax_m3",
    aliases=("minimax-m3",),
    tokenizer=MiniMaxM3TitoTokenizer,
    tool_call_parser=None,
    reasoning_parser=None,
    verified=(
        "property battery (2,000 episodes, thinking_mode enabled/disabled/adaptive) vs the official template "
        "(transformers), tests/tokenization/test_minimax_properties.py"
    ),
    template_sha256=(MiniMaxM3TitoTokenizer.TEMPLATE_SHA256,),
    tokenizer_folder="minimax-m3",
    description="MiniMax-M3: <mm:think> in every turn, thinking_mode switch, namespaced XML tool calls",
)

FAMILIES = (MINIMAX_M3,)
