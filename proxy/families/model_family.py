"""One model family as one record: what the proxy needs to serve a model of that family token-exact.

A family is a small module under ``proxy/families/`` that builds one or more :class:`ModelFamily` records: the TITO
tokenizer (a :class:`~proxy.tokenization.tito.TitoTokenizer` class, or any factory taking a tokenizer folder), the
SGLang parser names for its tool-call and reasoning markup, the signature that recognises its official chat
template, how it was verified, and whether steps extend checkpoints incrementally (TITO) or are full renders
(last-step mode). ``proxy/families/registry.py`` lists the families; docs/families.md has the recipe for adding one.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from pathlib import Path

import attrs

from proxy.tokenization.tito import TitoTokenizer


class TitoMode(enum.Enum):
    """How a family's steps get their context ids."""

    INCREMENTAL = "incremental"
    """TITO: the checkpoint's ids plus an exact fragment for the new messages (pinned junction rules)."""
    LAST_STEP = "last_step"
    """Every step is a full render of the chat template (no junction rules are known) and its own segment: the
    recorded segment is exactly the prompt the model was given plus what it generated."""


@attrs.frozen
class ModelFamily:
    """A model family (see the module docstring). ``name`` is what ``--model-family`` takes, as do ``aliases``."""

    name: str
    #: the family's TITO tokenizer for a tokenizer folder: a ``TitoTokenizer`` subclass (``from_path``) or a factory
    tokenizer: Callable[[Path], TitoTokenizer]
    #: SGLang's tool-call parser name for the family's markup (``--model-tool-call-type``); None: not parsed
    tool_call_parser: str | None
    #: SGLang's reasoning parser name (``--model-reasoning-type``); None: reasoning is not split
    reasoning_parser: str | None
    #: how the family was verified (shown by ``dressage-proxy families``)
    verified: str
    aliases: tuple[str, ...] = ()
    #: SHA-256 of the official chat template(s) (``chat_template.jinja``, else the one in tokenizer_config.json)
    template_sha256: tuple[str, ...] = ()
    #: the official Python encoder a family renders with instead of a Jinja template (DeepSeek-V3.2, V4): a file of
    #: the tokenizer folder, detected by its SHA-256 (``template_sha256`` holds it)
    encoder_file: str | None = None
    #: SHA-256 of the official tokenizer_config.json: tells apart families whose templates are byte-identical
    config_sha256: tuple[str, ...] = ()
    #: whether detection may recognise a template that is not an official one but passes the tokenizer's own
    #: load-time checks (the family's pinned rules); False for families with no rules to check
    structural: bool = True
    mode: TitoMode = TitoMode.INCREMENTAL
    #: the family's folder in the ``dressage-tokenizers`` root (``serving/tokenizer_files.py``), if it is fetched
    tokenizer_folder: str | None = None
    description: str = ""
    #: what renders the family's ids: "own" (our template-driven TITO) or "renderers" (the PyPI package, where it
    #: passed the checks: proxy/tokenization/renderers_backend.py, docs/families.md "renderers")
    tito_backend: str = "own"

    @property
    def names(self) -> tuple[str, ...]:
        """The name and every alias."""
        return (self.name, *self.aliases)

    def load(self, tokenizer_path: Path) -> TitoTokenizer:
        """The family's tokenizer for a folder, uncached (``registry.load_tito_tokenizer`` caches)."""
        factory = self.tokenizer
        if isinstance(factory, type) and issubclass(factory, TitoTokenizer):
            return factory.from_path(tokenizer_path)
        return factory(tokenizer_path)
