"""Loading, the family registry, pinned generation prompts, and fidelity to the official tokenizer and template."""

from __future__ import annotations

import threading

import pytest
import tokenizers

from proxy.families import Qwen3TitoTokenizer, Qwen35TitoTokenizer, family_name, load_tito_tokenizer
from proxy.tokenization import TemplateMismatchError, TitoTokenizer
from proxy.tokenization.tito import read_chat_template

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Find ü and 😀"},
    {
        "role": "assistant",
        "content": "Looking.",
        "reasoning_content": "I should search.",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": {"q": "ü"}}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "found"},
    {"role": "tool", "tool_call_id": "c2", "content": "also"},
]
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]


def test_load_tito_tokenizer_caches_per_family_and_path(qwen3_path, qwen3_tito):
    assert load_tito_tokenizer("qwen3", qwen3_path) is qwen3_tito
    assert load_tito_tokenizer("qwen3", str(qwen3_path) + "/") is qwen3_tito


def test_load_tito_tokenizer_selects_family_class(qwen3_tito, qwen3_5_tito):
    assert isinstance(qwen3_tito, Qwen3TitoTokenizer) and qwen3_tito.family == "qwen3"
    assert isinstance(qwen3_5_tito, Qwen35TitoTokenizer) and qwen3_5_tito.family == "qwen3_5"


def test_family_name_accepts_dotted_alias_and_refuses_unknown():
    assert family_name("qwen3.5") == "qwen3_5"
    with pytest.raises(ValueError, match="llama"):
        family_name("llama")


def test_load_tito_tokenizer_refuses_a_folder_of_the_other_family(qwen3_path, qwen3_5_path):
    with pytest.raises(TemplateMismatchError, match="generation prompt"):
        Qwen35TitoTokenizer.from_path(qwen3_path)
    with pytest.raises(TemplateMismatchError, match="generation prompt"):
        Qwen3TitoTokenizer.from_path(qwen3_5_path)


def test_load_tito_tokenizer_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_tito_tokenizer("qwen3", tmp_path)


@pytest.mark.parametrize(
    ("family", "kwargs", "expected"),
    [
        ("qwen3", {}, "<|im_start|>assistant\n"),
        ("qwen3", {"enable_thinking": True}, "<|im_start|>assistant\n"),
        ("qwen3", {"enable_thinking": False}, "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
        ("qwen3_5", {}, "<|im_start|>assistant\n<think>\n"),
        ("qwen3_5", {"enable_thinking": True}, "<|im_start|>assistant\n<think>\n"),
        ("qwen3_5", {"enable_thinking": False}, "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
    ],
)
def test_generation_prompt_is_pinned_per_family(request, family, kwargs, expected):
    tito: TitoTokenizer = request.getfixturevalue(f"{family}_tito")
    assert tito.generation_prompt(kwargs) == expected
    rendered = tito.render_full([{"role": "user", "content": "hi"}], None, kwargs)
    assert rendered.endswith("<|im_start|>user\nhi<|im_end|>\n" + expected)


@pytest.mark.parametrize("kwargs", [{}, {"enable_thinking": False}])
def test_render_full_equals_transformers_apply_chat_template(tito, kwargs):
    """Our render is the official template's, as transformers applies it (arguments given as objects)."""
    from transformers import AutoTokenizer

    official = AutoTokenizer.from_pretrained(tito.source, local_files_only=True)
    expected = official.apply_chat_template(
        CONVERSATION, tools=TOOLS, tokenize=False, add_generation_prompt=True, **kwargs
    )
    assert tito.render_full(CONVERSATION, TOOLS, kwargs) == expected


def test_encode_uses_the_official_tokenizer_json(qwen3_5_tito, qwen3_5_path):
    """transformers 5.23 rebuilds Qwen3.5's pre-tokenizer with the Qwen2 regex (no \\p{M}); we must not."""
    from transformers import AutoTokenizer

    text = "<|im_start|>user\nहिन्दी भाषा<|im_end|>\n"
    official = tokenizers.Tokenizer.from_file(str(qwen3_5_path / "tokenizer.json"))
    assert qwen3_5_tito.encode_text(text) == official.encode(text, add_special_tokens=False).ids
    auto = AutoTokenizer.from_pretrained(str(qwen3_5_path), local_files_only=True)
    assert auto.encode(text, add_special_tokens=False) != qwen3_5_tito.encode_text(text)


def test_read_chat_template_finds_both_locations(qwen3_path, qwen3_5_path):
    assert "<|im_start|>" in read_chat_template(qwen3_path)  # inside tokenizer_config.json
    assert "render_content" in read_chat_template(qwen3_5_path)  # chat_template.jinja


def test_reserved_template_kwargs_cannot_remove_the_generation_prompt(tito):
    messages = [{"role": "user", "content": "hi"}]
    assert tito.render_full(messages, None, {"add_generation_prompt": False}) == tito.render_full(messages)


def test_token_offsets_cover_the_utf8_text(tito):
    text = "<|im_start|>user\né😀 हिन्दी<|im_end|>"
    ids = tito.encode_text(text)
    offsets = tito.token_offsets(ids)
    assert offsets[-1][1] == len(text.encode())
    assert b"".join(tito.token_bytes(i) for i in ids) == text.encode()


def test_tito_tokenizer_is_thread_safe(tito):
    """Full and incremental encodes from several threads give the sequential results."""
    kwargs = {"enable_thinking": True}
    checkpoint = tito.encode_full(CONVERSATION[:2], TOOLS, kwargs) + tito.encode_text(
        tito.render_assistant(CONVERSATION[2], kwargs)
    )
    expected_full = tito.encode_full(CONVERSATION, TOOLS, kwargs)
    expected_fragment = tito.encode_incremental(checkpoint, CONVERSATION[3:], tools=TOOLS, chat_template_kwargs=kwargs)
    failures = []

    def work():
        for _ in range(30):
            if tito.encode_full(CONVERSATION, TOOLS, kwargs) != expected_full:
                failures.append("full")
            got = tito.encode_incremental(checkpoint, CONVERSATION[3:], tools=TOOLS, chat_template_kwargs=kwargs)
            if got != expected_fragment:
                failures.append("incremental")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
