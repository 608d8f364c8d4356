"""DeepSeek-V3.1 and V4. V3.1 (``proxy/tokenization/deepseek.py``: turns end with ``<｜end▁of▁sentence｜>``; tool results get no
prompt; every system message is hoisted to the start).

The official template is the one inside V3.1's ``tokenizer_config.json``; it reads the ``thinking`` variable
(``<｜Assistant｜><think>`` vs ``<｜Assistant｜></think>``) and never renders reasoning in history. SGLang 0.5.23 names:
tool calls ``deepseekv31``, reasoning ``deepseek-v3``. Detection: the template hash, else structurally (the pinned
generation prompts and the user / tool-result junctions).

V3.2 and V4 ship no template but its official Python encoder (``proxy/tokenization/deepseek_encoder.py``), executed only when
its SHA-256 is the pinned one; detection is by that hash (``encoder_file``). V3.2's encoder is not in the model
folder: ``dressage-tokenizers`` takes it from SGLang 0.5.23's wheel. SGLang 0.5.23 names: V3.2 ``deepseekv32`` /
``deepseek-v3``; V4 ``deepseekv4`` / ``deepseek-v4``.
"""

from __future__ import annotations

from proxy.families.model_family import ModelFamily
from proxy.tokenization.deepseek import DeepSeekV31TitoTokenizer
from proxy.tokenization.deepseek_encoder import DeepSeekV4TitoTokenizer, DeepSeekV32TitoTokenizer

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

DEEPSEEK_V4 = ModelFamily(
    name="deepseek_v4",
    aliases=("deepseek-v4", "deepseekv4"),
    tokenizer=DeepSeekV4TitoTokenizer,
    tool_call_parser="deepseekv4",
    reasoning_parser="deepseek-v4",
    verified=(
        "property battery (2,000 episodes) vs the official encoder encoding_dsv4.py (SHA-256 pinned) tokenized by "
        "tokenizer.json, tests/tokenization/test_deepseek_v4_properties.py"
    ),
    template_sha256=(DeepSeekV4TitoTokenizer.ENCODER_SHA256,),
    encoder_file=DeepSeekV4TitoTokenizer.ENCODER_FILE,
    structural=False,
    tokenizer_folder="deepseek-v4",
    description="DeepSeek-V4: the official Python encoder, <｜DSML｜tool_calls> blocks, tool results as user turns",
)

DEEPSEEK_V3_2 = ModelFamily(
    name="deepseek_v3_2",
    aliases=("deepseek-v3.2", "deepseekv32"),
    tokenizer=DeepSeekV32TitoTokenizer,
    tool_call_parser="deepseekv32",
    reasoning_parser="deepseek-v3",
    verified=(
        "property battery (2,000 episodes) vs the official encoder encoding_dsv32.py (from SGLang 0.5.23's wheel, "
        "SHA-256 pinned) tokenized by tokenizer.json, tests/tokenization/test_deepseek_v32_properties.py"
    ),
    template_sha256=(DeepSeekV32TitoTokenizer.ENCODER_SHA256,),
    encoder_file=DeepSeekV32TitoTokenizer.ENCODER_FILE,
    structural=False,
    tokenizer_folder="deepseek-v3.2",
    description="DeepSeek-V3.2: the official Python encoder (SGLang's copy), <｜DSML｜function_calls> blocks",
)

FAMILIES = (DEEPSEEK_V3_1, DEEPSEEK_V3_2, DEEPSEEK_V4)
