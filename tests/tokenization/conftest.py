"""Session-scoped TITO tokenizers for both families (the real tokenizer files, loaded once)."""

from __future__ import annotations

import pytest

from proxy.families import load_tito_tokenizer
from proxy.tokenization import TitoTokenizer


@pytest.fixture(scope="session")
def qwen3_tito(qwen3_path) -> TitoTokenizer:
    return load_tito_tokenizer("qwen3", qwen3_path)


@pytest.fixture(scope="session")
def qwen3_5_tito(qwen3_5_path) -> TitoTokenizer:
    return load_tito_tokenizer("qwen3_5", qwen3_5_path)


@pytest.fixture(scope="session", params=["qwen3", "qwen3_5"])
def tito(request) -> TitoTokenizer:
    """Each family in turn."""
    return request.getfixturevalue(f"{request.param}_tito")
