"""The DeepSeek batteries' references are the official ones: V3.1's ids are transformers' ``apply_chat_template`` of
the official template; V3.2's and V4's are the official encoder's text (its own module, imported here by path)
tokenized by tokenizer.json, with the request mapped as SGLang 0.5.23 maps it (an empty system message first, carrying
the tools). And an encoder that is not the official one is never executed."""

from __future__ import annotations

import hashlib
import importlib.util

import pytest

from proxy.families import load_tito_tokenizer
from proxy.families.detection import detect_family
from proxy.tokenization import TemplateMismatchError
from proxy.tokenization.deepseek_encoder import DeepSeekV4TitoTokenizer

from .deepseek_models import deepseek_folder
from .strategies import TOOLS

CALL = {"id": "c", "type": "function", "function": {"name": "search", "arguments": '{"q": "ü 中文", "n": [1]}'}}
MESSAGES = [
    {"role": "system", "content": "sys"}, {"role": "user", "content": "hi 👍🏽"},
    {"role": "assistant", "content": "", "tool_calls": [CALL, {**CALL, "id": "d"}]},
    {"role": "tool", "tool_call_id": "c", "content": "r1"}, {"role": "tool", "tool_call_id": "d", "content": "r2"},
    {"role": "assistant", "content": "done", "reasoning_content": "why"}, {"role": "user", "content": "again"},
]


def test_v31_is_transformers_apply_chat_template(tokenizer_root):
    """Arguments given as JSON text, as the official template concatenates them."""
    transformers = pytest.importorskip("transformers")
    folder = deepseek_folder("deepseek_v3_1", tokenizer_root)
    hf = transformers.AutoTokenizer.from_pretrained(str(folder))
    tito = load_tito_tokenizer("deepseek_v3_1", folder)
    for kwargs in ({}, {"thinking": True}, {"thinking": False}):
        want = hf.apply_chat_template(MESSAGES, tokenize=True, add_generation_prompt=True, return_dict=False, **kwargs)
        assert tito.encode_full(MESSAGES, None, kwargs) == list(want)


@pytest.mark.parametrize(("family", "encoder"), [("deepseek_v3_2", "encoding_dsv32.py"), ("deepseek_v4", "encoding_dsv4.py")])
def test_encoder_families_are_the_official_encoder_tokenized(tokenizer_root, family, encoder):
    tokenizers = pytest.importorskip("tokenizers")
    folder = deepseek_folder(family, tokenizer_root)
    spec = importlib.util.spec_from_file_location(f"official_{family}", folder / encoder)
    official = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(official)
    tokenizer = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    tito = load_tito_tokenizer(family, folder)
    official_messages = [{**MESSAGES[0], "tools": list(TOOLS)}, *MESSAGES[1:]]
    for mode, kwargs in (("chat", {}), ("thinking", {"thinking": True}), ("thinking", {"enable_thinking": True})):
        text = official.encode_messages(official_messages, thinking_mode=mode)
        assert tito.encode_full(MESSAGES, TOOLS, kwargs) == tokenizer.encode(text, add_special_tokens=False).ids
    assert detect_family(folder).family.name == family


def test_a_changed_encoder_is_never_executed(tokenizer_root, tmp_path):
    """Detection and loading hash the encoder first: a folder with another encoding_dsv4.py is refused, unexecuted."""
    v4_folder = deepseek_folder("deepseek_v4", tokenizer_root)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((v4_folder / name).read_bytes())
    marker = tmp_path / "executed"
    (tmp_path / "encoding_dsv4.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    with pytest.raises(TemplateMismatchError):
        DeepSeekV4TitoTokenizer.from_path(tmp_path)
    with pytest.raises(FileNotFoundError):  # no template, no official encoder: nothing to render with
        detect_family(tmp_path)
    assert not marker.exists()
    official = hashlib.sha256((v4_folder / "encoding_dsv4.py").read_bytes()).hexdigest()
    assert official == DeepSeekV4TitoTokenizer.ENCODER_SHA256
