"""The model families: Qwen3 and Qwen3.5, their pinned thinking prefixes, and the registry keyed by family.

Both families share the ChatML turn shape and junction (``<|im_end|>`` + ``\\n`` + ``<|im_start|>``) and group
consecutive tool results into one user turn. They differ where the generation prompt meets the model's output:

=============  ===================================  =====================================
family         generation prompt, thinking on/unset  generation prompt, enable_thinking=False
=============  ===================================  =====================================
``qwen3``      ``<|im_start|>assistant\\n``            ``<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n``
``qwen3_5``    ``<|im_start|>assistant\\n<think>\\n``   ``<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n``
=============  ===================================  =====================================

so a Qwen3 model in thinking mode generates ``<think>`` itself, a Qwen3.5 model starts inside the think block.
The template loaded from ``--tokenizer-path`` is checked against these strings at load time.

Loaded tokenizers are cached per (family, resolved path) for the life of the process (loading takes a few
hundred milliseconds); the cache is guarded by a lock, and the tokenizers themselves are thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from proxy.tokenization.chatml import ChatMLTitoTokenizer
from proxy.tokenization.glm import GLM_FAMILIES
from proxy.tokenization.tito import TemplateMismatchError, TitoTokenizer, read_chat_template


class Qwen3TitoTokenizer(ChatMLTitoTokenizer):
    """Qwen3 (hybrid thinking; JSON tool calls inside ``<tool_call>``)."""

    family = "qwen3"

    def thinking_prefix(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        return self.EMPTY_THINK if self.thinking_disabled(chat_template_kwargs) else ""


class Qwen35TitoTokenizer(ChatMLTitoTokenizer):
    """Qwen3.5 (generation prompt opens the think block; XML tool calls; system only as the first message)."""

    family = "qwen3_5"

    def thinking_prefix(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        return self.EMPTY_THINK if self.thinking_disabled(chat_template_kwargs) else self.THINK_OPEN + "\n"


#: family name (the value of --tito-model / --trajectory-build-model) -> implementation
TITO_FAMILIES: dict[str, type[TitoTokenizer]] = {"qwen3": Qwen3TitoTokenizer, "qwen3_5": Qwen35TitoTokenizer}
_ALIASES = {"qwen3.5": "qwen3_5", "qwen35": "qwen3_5"}
# GLM (proxy/tokenization/glm.py): one entry per official template version
TITO_FAMILIES.update(GLM_FAMILIES)
_ALIASES.update({"glm-4.7": "glm4_7", "glm47": "glm4_7", "glm-5": "glm5", "glm-5.1": "glm5_1", "glm-5.2": "glm5_2"})

_cache: dict[tuple[str, Path], TitoTokenizer] = {}
_cache_lock = threading.Lock()


def family_name(family: str) -> str:
    """The canonical family name (``qwen3.5`` -> ``qwen3_5``); ValueError for an unknown family."""
    name = _ALIASES.get(family, family)
    if name not in TITO_FAMILIES:
        raise ValueError(f"unknown TITO model family {family!r}; expected one of {sorted(TITO_FAMILIES)}")
    return name


def detect_family(tokenizer_path: str | Path) -> str:
    """The family whose pinned template rules the folder's chat template follows (each family's load-time check
    is the signature: generation prompts with thinking on and off, and the user-turn junction).

    Raises :class:`~proxy.tokenization.tito.TemplateMismatchError` naming every family's objection when none fits,
    and FileNotFoundError when the folder lacks the files."""
    objections = []
    # A template byte-identical to an official one names its family (GLM's versions share the junction rules)
    template = read_chat_template(Path(tokenizer_path))
    exact = [name for name, cls in TITO_FAMILIES.items() if getattr(cls, "template_matches", lambda _: False)(template)]
    for name in exact + [name for name in TITO_FAMILIES if name not in exact]:
        try:
            load_tito_tokenizer(name, tokenizer_path)
        except TemplateMismatchError as exc:
            objections.append(f"{name}: {exc}")
            continue
        return name
    raise TemplateMismatchError(
        f"{tokenizer_path}: the chat template is none of the supported families ({'; '.join(objections)})"
    )


def load_tito_tokenizer(family: str, tokenizer_path: str | Path) -> TitoTokenizer:
    """The TITO tokenizer of ``family`` for the tokenizer folder ``tokenizer_path`` (cached per process).

    Raises ValueError for an unknown family, FileNotFoundError when the folder lacks the files, and
    :class:`~proxy.tokenization.tito.TemplateMismatchError` when the folder's template is not that family's.
    """
    name = family_name(family)
    key = (name, Path(tokenizer_path).resolve())
    with _cache_lock:
        cached = _cache.get(key)
        if cached is None:
            cached = TITO_FAMILIES[name].from_path(key[1])
            _cache[key] = cached
        return cached
