"""Qwen3.6 token-exact: the TITO property battery (tests/tokenization/test_properties.py) on the Qwen3.6 folder.

Qwen3.6 ships its own chat template (byte-identical to Qwen3.5's) and tokenizer_config.json but no tokenizer.json;
its folder uses Qwen3.5's (docs/families.md). The battery's five properties run here with the same example budget
(``DRESSAGE_TITO_EXAMPLES``, default 40 each) against that folder's template as transformers renders it.
"""

from __future__ import annotations

import pytest

from proxy.families import Qwen36TitoTokenizer, load_tito_tokenizer
from proxy.tokenization import TitoTokenizer
from serving.tokenizer_files import model_tokenizer_path
from tests.tokenization.test_properties import (  # noqa: F401 - collected here with this module's ``tito``
    test_context_of_next_step_extends_checkpoint_exactly,
    test_decoding_the_concatenation_gives_the_conversation_text,
    test_drift_audit_reports_exactly_where_template_strips_reasoning,
    test_last_step_mask_covers_exactly_the_assistant_turns,
    test_tito_equals_full_render_where_template_is_prefix_stable,
)


@pytest.fixture(scope="module")
def tito(tokenizer_root) -> TitoTokenizer:
    tokenizer = load_tito_tokenizer("qwen3_6", model_tokenizer_path("qwen3_6", tokenizer_root))
    assert isinstance(tokenizer, Qwen36TitoTokenizer) and tokenizer.family == "qwen3_6"
    return tokenizer


def test_qwen3_6_render_equals_transformers_apply_chat_template(tito):
    """The folder's own template, rendered by us, is what transformers renders for it (tools, reasoning, both
    thinking modes)."""
    from transformers import AutoTokenizer

    from tests.tokenization.test_families import CONVERSATION, TOOLS

    official = AutoTokenizer.from_pretrained(tito.source, local_files_only=True)
    for kwargs in ({}, {"enable_thinking": False}):
        expected = official.apply_chat_template(
            CONVERSATION, tools=TOOLS, tokenize=False, add_generation_prompt=True, **kwargs
        )
        assert tito.render_full(CONVERSATION, TOOLS, kwargs) == expected
