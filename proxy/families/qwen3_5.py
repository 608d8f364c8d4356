"""Qwen3.5 and Qwen3.6 (the generation prompt opens the think block; XML tool calls; system only as the first message).

=============  ===================================  =====================================
family         generation prompt, thinking on/unset  generation prompt, enable_thinking=False
=============  ===================================  =====================================
``qwen3_5``    ``<|im_start|>assistant\\n<think>\\n``   ``<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n``
=============  ===================================  =====================================

so a Qwen3.5 model starts inside the think block. Qwen3.6 ships the very same chat template (byte-identical,
SHA-256 ``a4aee8af...``) and a tokenizer_config.json equal to Qwen3.5's as JSON (same 33 added tokens at the same
ids, same pre-tokenizer regex), but no tokenizer.json: its folder uses Qwen3.5's tokenizer.json (docs/families.md
says how this was checked). The two families differ only in name and in the config bytes detection uses to tell
them apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from proxy.families.model_family import ModelFamily
from proxy.tokenization.chatml import ChatMLTitoTokenizer

#: the official Qwen3.5 chat_template.jinja, which Qwen3.6 ships byte for byte
QWEN3_5_TEMPLATE_SHA256 = "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715"


class Qwen35TitoTokenizer(ChatMLTitoTokenizer):
    """Qwen3.5 (generation prompt opens the think block; XML tool calls; system only as the first message)."""

    family = "qwen3_5"

    def thinking_prefix(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        return self.EMPTY_THINK if self.thinking_disabled(chat_template_kwargs) else self.THINK_OPEN + "\n"


class Qwen36TitoTokenizer(Qwen35TitoTokenizer):
    """Qwen3.6: Qwen3.5's template and tokenizer under its own name."""

    family = "qwen3_6"



QWEN3_5 = ModelFamily(
    name="qwen3_5",
    aliases=("qwen3.5", "qwen35"),
    tokenizer=Qwen35TitoTokenizer,
    tool_call_parser="qwen3_coder",
    reasoning_parser="qwen3",
    verified="property battery vs the official template (transformers), tests/tokenization/test_properties.py",
    template_sha256=(QWEN3_5_TEMPLATE_SHA256,),
    config_sha256=("316230d6a809701f4db5ea8f8fc862bc3a6f3229c937c174e674ff3ca0a64ac8",),
    tokenizer_folder="qwen3.5",
    description="Qwen3.5: thinks by default, XML tool calls",
)

# Qwen3.5's record but for the name, the tokenizer class, the config bytes and the folder.
QWEN3_6 = attrs.evolve(
    QWEN3_5,
    name="qwen3_6",
    aliases=("qwen3.6", "qwen36"),
    tokenizer=Qwen36TitoTokenizer,
    verified="the same battery on the Qwen3.6 folder (its template, Qwen3.5's tokenizer.json), "
    "tests/families/test_qwen3_6_properties.py",
    config_sha256=("85872dac6c375bb5ef7fb4ff1c5f84eb9ecb2db343d5291925beff696dfb8867",),
    tokenizer_folder="qwen3.6",
    description="Qwen3.6: Qwen3.5's template byte for byte, Qwen3.5's tokenizer",
)

FAMILIES = (QWEN3_5, QWEN3_6)
