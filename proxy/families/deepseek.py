"""DeepSeek-V3.1 (``proxy/tokenization/deepseek.py``: turns end with ``<｜end▁of▁sentence｜>``; tool results get no
prompt; every system message is hoisted to the start).

The official template is the one inside V3.1's ``tokenizer_config.json``; it reads the ``thinking`` variable
(``<｜Assistant｜><think>`` vs ``<｜Assistant｜></think>``) and never renders reasoning in history. SGLang 0.5.23 names:
tool calls ``deepseekv31``, reasoning ``deepseek-v3``. Detection: the template hash, else structurally (the pinned
generation prompts and the user / tool-result junctions).
"""

from __future__ import annotations

from proxy.families.model_family import ModelFamily
from proxy.tokenization.deepseek import DeepSeekV31TitoTokenizer

DEEPSEEK_V3_1 = ModelFamily(
    name="deepseek_v3_1",
    aliases=("deepseek-v3.1", "deepseekv31"),
    tokenizer=DeepSeekV31TitoTokenizer,
    tool_call_parser="deepseekv31",
    reasoning_parser="deepseek-v3",
    verified=(
        "property battery (2,000 episodes) vs the official template (transformers), "
        "tests/tokenization/test_deepseek_v31_properties.py"
    ),
    template_sha256=(DeepSeekV31TitoTokenizer.TEMPLATE_SHA256,),
    tokenizer_folder="deepseek-v3.1",
    description="DeepSeek-V3.1: <｜User｜>/<｜Assistant｜> turns ending <｜end▁of▁sentence｜>, `thinking` switch",
)

FAMILIES = (DEEPSEEK_V3_1,)
