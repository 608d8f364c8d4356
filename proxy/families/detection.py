"""Which family a tokenizer folder belongs to, from its chat template.

In order:

0. **Official encoder.** A folder holding a family's official Python encoder (``ModelFamily.encoder_file``,
   DeepSeek-V3.2 and V4, which ship no template) whose SHA-256 is the pinned one is that family.
1. **Template hash.** The SHA-256 of the folder's chat template (``chat_template.jinja``, else the template in
   tokenizer_config.json, as transformers reads it) is a family's official template hash. Families with
   byte-identical templates (Qwen3.5 and Qwen3.6) are told apart by the tokenizer_config.json hash; when that does
   not decide either, the first registered one is taken. The family's tokenizer must still load (its pinned rules).
2. **Structure.** Otherwise the first family (registry order) whose tokenizer loads the folder, i.e. whose pinned
   load-time rules the template follows (generation prompts under each thinking setting, the user-turn junction):
   an edited template that keeps the family's turn shape stays incremental. A warning says the template is not
   the official one.
3. **Unrecognised.** Otherwise the template-only family (last-step mode), with one warning naming the template's
   hash and every family's objection. Never an error, unless the folder cannot be rendered at all.

``--model-family`` (``proxy/config.py``) skips detection.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import attrs

from proxy.families.model_family import ModelFamily
from proxy.families.registry import FALLBACK, FAMILIES, load_tito_tokenizer
from proxy.tokenization.tito import TemplateMismatchError, read_chat_template


@attrs.frozen
class Detection:
    """The outcome of :func:`detect_family`."""

    family: ModelFamily
    #: ``encoder_sha256``, ``template_sha256``, ``structure`` or ``unrecognised``
    how: str
    template_sha256: str
    #: the one warning to log (None when the template is a family's official one)
    warning: str | None = None


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _config_sha256(path: Path) -> str | None:
    config = path / "tokenizer_config.json"
    return hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None


def _detect_encoder(path: Path) -> Detection | None:
    """A folder holding a family's official Python encoder (by SHA-256) is that family; its tokenizer must load."""
    for family in FAMILIES:
        encoder = path / family.encoder_file if family.encoder_file else None
        if encoder is not None and encoder.is_file():
            digest = hashlib.sha256(encoder.read_bytes()).hexdigest()
            if digest in family.template_sha256:
                load_tito_tokenizer(family, path)
                return Detection(family, "encoder_sha256", digest)
    return None


def detect_family(tokenizer_path: str | Path) -> Detection:
    """The family of the folder's chat template (see the module docstring).

    Raises FileNotFoundError when the folder has no chat template or no tokenizer.json, and
    :class:`TemplateMismatchError` only when even the template-only family cannot use it."""
    path = Path(tokenizer_path)
    encoded = _detect_encoder(path)
    if encoded is not None:
        return encoded
    try:
        template = read_chat_template(path)
    except FileNotFoundError:
        encoders = ", ".join(sorted({f.encoder_file for f in FAMILIES if f.encoder_file}))
        raise FileNotFoundError(
            f"{path}: no chat template (chat_template.jinja or tokenizer_config.json) and no official encoder "
            f"({encoders}; dressage-tokenizers puts DeepSeek-V3.2's into its cached folder)"
        ) from None
    digest = sha256_text(template)
    by_hash = [family for family in FAMILIES if digest in family.template_sha256]
    if by_hash:
        config = _config_sha256(path)
        family = next((f for f in by_hash if config in f.config_sha256), by_hash[0])
        load_tito_tokenizer(family, path)  # its pinned rules must hold: a wrong tokenizer.json fails here, loudly
        return Detection(family, "template_sha256", digest)
    objections = []
    for family in FAMILIES:
        if not family.structural:
            continue
        try:
            load_tito_tokenizer(family, path)
        except TemplateMismatchError as exc:
            objections.append(f"{family.name}: {str(exc).removeprefix(f'{path}: ')}")
            continue
        warning = (
            f"{path}: the chat template (sha256 {digest[:12]}) is not an official template of any family, but "
            f"follows {family.name}'s pinned rules: using {family.name} (TITO incremental). Choose another family "
            f"with --model-family."
        )
        return Detection(family, "structure", digest, warning)
    load_tito_tokenizer(FALLBACK, path)
    warning = (
        f"{path}: chat template not recognised (sha256 {digest[:12]} is no family's official template, and it "
        f"follows no family's pinned rules: {'; '.join(objections)}). Starting in last-step mode: every step is "
        f"a full render of this template and its own segment (recorded token-exact: the prompt the model was given "
        f"and its generated ids), no TITO incremental encode, and no tool-call or reasoning parser unless "
        f"--model-tool-call-type / --model-reasoning-type name one. "
        f"Use --model-family to choose a family."
    )
    return Detection(FALLBACK, "unrecognised", digest, warning)
