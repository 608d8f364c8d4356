"""Real TITO tokenizers for the session tests (loaded once per test session)."""

from __future__ import annotations

import pytest

from proxy.families import load_tito_tokenizer
from proxy.tokenization import TitoTokenizer


@pytest.fixture(scope="session", params=["qwen3", "qwen3_5"])
def real_tokenizer(request, qwen3_path, qwen3_5_path) -> TitoTokenizer:
    """Each real family in turn."""
    path = qwen3_path if request.param == "qwen3" else qwen3_5_path
    return load_tito_tokenizer(request.param, path)
