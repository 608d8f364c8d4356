"""The registry of model families, and the per-process cache of loaded TITO tokenizers.

``FAMILIES`` lists every family in detection order (a folder whose template hash matches no family's is tried
against each family's pinned rules in this order); the template-only family comes last and is never detected, only
chosen (``--model-family generic``) or fallen back to. To add a family, write its module and append its records
here (docs/families.md).

Loaded tokenizers are cached per (family, resolved path) for the life of the process (loading takes a few hundred
milliseconds); the cache is guarded by a lock, and the tokenizers themselves are thread-safe.
"""

from __future__ import annotations

import threading
from pathlib import Path

from proxy.families import deepseek, glm, minimax, minimax_m3, qwen3, qwen3_5, template_only
from proxy.families.model_family import ModelFamily
from proxy.tokenization.tito import TitoTokenizer

#: every family, in detection order; the template-only fallback last
FAMILIES: tuple[ModelFamily, ...] = (
    *qwen3.FAMILIES, *qwen3_5.FAMILIES, *glm.FAMILIES, *minimax.FAMILIES, *minimax_m3.FAMILIES,
    *deepseek.FAMILIES,
    template_only.GENERIC,
)
#: the family of an unrecognised template
FALLBACK: ModelFamily = template_only.GENERIC


def _index(families: tuple[ModelFamily, ...]) -> dict[str, ModelFamily]:
    index: dict[str, ModelFamily] = {}
    for family in families:
        for name in family.names:
            if name in index:
                raise ValueError(f"model family name {name!r} is registered twice")
            index[name] = family
    return index


_BY_NAME = _index(FAMILIES)

_cache: dict[tuple[str, Path], TitoTokenizer] = {}
_cache_lock = threading.Lock()


def family_names() -> tuple[str, ...]:
    """Every name ``--model-family`` accepts (names and aliases)."""
    return tuple(_BY_NAME)


def get_family(name: str) -> ModelFamily:
    """The family called ``name`` (or one of its aliases); ValueError naming the choices otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown model family {name!r}; expected one of {', '.join(_BY_NAME)}") from None


def family_name(name: str) -> str:
    """The canonical name of a family (``qwen3.5`` -> ``qwen3_5``); ValueError for an unknown family."""
    return get_family(name).name


def load_tito_tokenizer(family: str | ModelFamily, tokenizer_path: str | Path) -> TitoTokenizer:
    """The TITO tokenizer of ``family`` for the tokenizer folder ``tokenizer_path`` (cached per process).

    Raises ValueError for an unknown family, FileNotFoundError when the folder lacks the files, and
    :class:`~proxy.tokenization.tito.TemplateMismatchError` when the folder's template is not that family's.
    """
    record = family if isinstance(family, ModelFamily) else get_family(family)
    key = (record.name, Path(tokenizer_path).resolve())
    with _cache_lock:
        cached = _cache.get(key)
        if cached is None:
            cached = record.load(key[1])
            _cache[key] = cached
        return cached
