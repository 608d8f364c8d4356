"""Tokenizer folders with edited chat templates, made from the verified Qwen folders (for detection tests)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

#: Qwen3.5's generation prompt in thinking mode, and an operator's edit that primes the reasoning: no family's
#: pinned generation prompt any more (Qwen3.5 expects ``<think>\n``, Qwen3 nothing after the header)
QWEN3_5_THINK_PROMPT = "{{- '<think>\\n' }}"
PRIMED_THINK_PROMPT = "{{- '<think>\\nLet me think step by step.\\n' }}"


def copy_folder(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    return dest


def primed_qwen3_5(qwen3_5_path: Path, dest: Path) -> Path:
    """Qwen3.5's folder with a generation prompt that no family pins: an unrecognised template."""
    folder = copy_folder(qwen3_5_path, dest)
    template = folder / "chat_template.jinja"
    text = template.read_text(encoding="utf-8")
    assert text.count(QWEN3_5_THINK_PROMPT) == 1, "the Qwen3.5 template changed: update this edit"
    template.write_text(text.replace(QWEN3_5_THINK_PROMPT, PRIMED_THINK_PROMPT), encoding="utf-8")
    return folder


def commented_qwen3(qwen3_path: Path, dest: Path) -> Path:
    """Qwen3's folder whose template (inside tokenizer_config.json) gained a Jinja comment: not the official bytes,
    same rendering."""
    folder = copy_folder(qwen3_path, dest)
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["chat_template"] = "{#- edited by an operator -#}" + config["chat_template"]
    config_file.write_text(json.dumps(config), encoding="utf-8")
    return folder
