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

_BATTERY = "property battery (2,000 episodes) vs {what}, tests/tokenization/test_deepseek_properties.py"


def _family(version: str, cls: type, parsers: tuple[str, str], reference: str, what: str) -> ModelFamily:
    """One DeepSeek record: ``version`` as in the folder name (``v3.1``); encoder families (``ENCODER_FILE``) are
    detected by the encoder's hash, V3.1 by its template's (structurally too: it has junction rules to check)."""
    encoder = getattr(cls, "ENCODER_FILE", None)
    return ModelFamily(
        name=f"deepseek_{version.replace('.', '_')}",
        aliases=(f"deepseek-{version}", f"deepseek{version.replace('.', '')}"),
        tokenizer=cls,
        tool_call_parser=parsers[0],
        reasoning_parser=parsers[1],
        verified=_BATTERY.format(what=reference),
        template_sha256=(getattr(cls, "ENCODER_SHA256", None) or cls.TEMPLATE_SHA256,),
        encoder_file=encoder,
        structural=encoder is None,
        tokenizer_folder=f"deepseek-{version}",
        description=f"DeepSeek-{version.upper()}: {what}",
    )


DEEPSEEK_V3_1 = _family(
    "v3.1", DeepSeekV31TitoTokenizer, ("deepseekv31", "deepseek-v3"),
    "the official template (transformers)", "<｜User｜>/<｜Assistant｜> turns closed by the eos, `thinking` switch",
)
DEEPSEEK_V3_2 = _family(
    "v3.2", DeepSeekV32TitoTokenizer, ("deepseekv32", "deepseek-v3"),
    "the official encoder encoding_dsv32.py (from SGLang 0.5.23's wheel, SHA-256 pinned) tokenized by tokenizer.json",
    "the official Python encoder (SGLang's copy), <｜DSML｜function_calls> blocks",
)
DEEPSEEK_V4 = _family(
    "v4", DeepSeekV4TitoTokenizer, ("deepseekv4", "deepseek-v4"),
    "the official encoder encoding_dsv4.py (SHA-256 pinned) tokenized by tokenizer.json",
    "the official Python encoder, <｜DSML｜tool_calls> blocks, tool results as user turns",
)

FAMILIES = (DEEPSEEK_V3_1, DEEPSEEK_V3_2, DEEPSEEK_V4)
