"""Fixtures shared by the whole suite.

The real tokenizer files come from ``serving.tokenizer_files`` (package index, SHA-256 checked, cached); set
``DRESSAGE_TOKENIZERS_DIR`` to use a folder that already holds them (for example ``../shared/tokenizers``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# transformers without torch prints a warning on import; the tests never need torch.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# A proxy the tests start as a process keeps its trajectories in memory unless the test names a store (the command
# line's default is a SQLite file): sequential test proxies must not share one file's sessions. Anything that still
# reaches the default data folder writes into a temporary one, never the working directory.
os.environ.setdefault("DRESSAGE_PROXY_STORE", "memory")
os.environ.setdefault("DRESSAGE_DATA_DIR", tempfile.mkdtemp(prefix="dressage-tests-data-"))

from serving.tokenizer_files import ensure_tokenizers, model_tokenizer_path  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer_root() -> Path:
    """The verified root holding ``qwen3/`` and ``qwen3.5/``."""
    return ensure_tokenizers()


@pytest.fixture(scope="session")
def qwen3_path(tokenizer_root: Path) -> Path:
    return model_tokenizer_path("qwen3", tokenizer_root)


@pytest.fixture(scope="session")
def qwen3_5_path(tokenizer_root: Path) -> Path:
    return model_tokenizer_path("qwen3_5", tokenizer_root)
