"""The PyPI package ``renderers`` (pinned, Apache-2.0) as the rendering back end of GLM-4.7 and GLM-5.

renderers hand-writes a token renderer per family (``render_ids``, ``bridge_to_next_turn``). Its ``glm-5`` renderer
(its own registry's choice for GLM-4.7-Flash and GLM-5), configured with ``thinking_retention="all"``, gives the
official template's ids on every full encode and our fragment's ids on every bridge, and bridges across a new user
turn (docs/families.md, "renderers"); for GLM-5.1/5.2 and every other family it does not, so they keep ours.

Here it sits behind the project's TITO interface without loosening a guarantee: :class:`RenderersGlmMixin` goes on
top of a GLM tokenizer of ``proxy/tokenization/glm.py``, so detection, the junction rules (checkpoint end, prior
messages, the role the model stopped on), last-step masks and the drift audit's markers stay ours. Full encodes and
fragment ids are renderers'; each bridge is held against the fragment our junction rules cut (a difference is a
JUNCTION_MISMATCH, so a step never records ids the official template would not give); where renderers declines to
bridge (assistant turns the proxy never generated among the new messages, which it leaves to a re-render) the
step uses our fragment. Its tokenizer protocol is served from the family's ``tokenizer.json`` (no transformers).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from proxy.tokenization.glm import Glm5TitoTokenizer, Glm47TitoTokenizer
from proxy.tokenization.messages import MessageError, normalize_messages
from proxy.tokenization.results import IncrementalResult, TitoError, TitoFailure, TitoFailureReason, TitoFragment
from proxy.tokenization.tito import TitoTokenizer

#: what ``dressage-proxy families`` and the family records call this back end (the other one is "own")
BACKEND_NAME = "renderers"


class TokenizerProtocol:
    """renderers' ``Tokenizer`` protocol over a TITO tokenizer's ``tokenizer.json``."""

    def __init__(self, tito: TitoTokenizer):
        self._tito = tito
        self.name_or_path = tito.source
        self.unk_token_id = None
        self.eos_token_id = tito.end_of_turn_id

    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]:
        return self._tito.encode_text(text)

    def decode(self, token_ids: Any, *args: Any, **kwargs: Any) -> str:
        return self._tito.decode(list(token_ids))

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        lookup = self._tito._tokenizer.token_to_id
        return lookup(tokens) if isinstance(tokens, str) else [lookup(t) for t in tokens]


def renderer_key(tito: TitoTokenizer, chat_template_kwargs: Mapping[str, Any] | None) -> tuple[bool, bool]:
    """(thinking on, clear_thinking): renderers takes both per renderer (config fields), not per call."""
    clear = (chat_template_kwargs or {}).get("clear_thinking", True) is not False
    return not tito.thinking_disabled(chat_template_kwargs), clear


class RenderersGlmMixin:
    """renderers' renderer for the full encode and the fragment ids of a GLM tokenizer (module docstring)."""

    #: renderers' config class for the family
    RENDERER_CONFIG: ClassVar[str] = "GLM5RendererConfig"
    #: the official templates renderers was verified against (GLM-4.7's and GLM-5's render the same text)
    VERIFIED_TEMPLATES: ClassVar[frozenset[str]] = frozenset(
        {Glm47TitoTokenizer.TEMPLATE_SHA256, Glm5TitoTokenizer.TEMPLATE_SHA256}
    )
    backend: ClassVar[str] = BACKEND_NAME

    @property
    def uses_renderers(self) -> bool:
        """Whether renderers renders this folder: only for a verified official template. An edited template taken
        structurally as GLM-4.7, or another GLM version forced with --model-family, renders through its own
        template (renderers hand-writes the official one and would not follow the edit)."""
        cached = self.__dict__.get("_uses_renderers")
        if cached is None:
            digest = hashlib.sha256(self._template.encode("utf-8")).hexdigest()  # type: ignore[attr-defined]
            cached = self.__dict__["_uses_renderers"] = digest in self.VERIFIED_TEMPLATES
        return cached

    def _renderer(self, chat_template_kwargs: Mapping[str, Any] | None) -> Any:
        key = renderer_key(self, chat_template_kwargs)  # type: ignore[arg-type]
        built = self.__dict__.setdefault("_renderers", {})
        if key not in built:
            with self.__dict__.setdefault("_renderers_lock", threading.Lock()):
                if key not in built:
                    built[key] = _create_renderer(self, self.RENDERER_CONFIG, *key)  # type: ignore[arg-type]
        return built[key]

    def encode_full(self, messages: Sequence[Any], tools: Sequence[Mapping[str, Any]] | None = None,
                    chat_template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
        """``TitoTokenizer.encode_full``: renderers' ``render_ids`` for a verified template."""
        if not self.uses_renderers:
            return super().encode_full(messages, tools, chat_template_kwargs)  # type: ignore[misc]
        try:
            normalized = normalize_messages(messages)
        except MessageError as exc:
            raise TitoError.of(TitoFailureReason.INVALID_MESSAGE, str(exc)) from None
        try:
            return list(self._renderer(chat_template_kwargs).render_ids(
                normalized, tools=list(tools) if tools else None, add_generation_prompt=True,
            ))
        except Exception:  # noqa: BLE001 - input renderers rejects: the template decides (and names the error)
            return super().encode_full(messages, tools, chat_template_kwargs)  # type: ignore[misc]

    def encode_incremental(
        self, checkpoint_ids: Sequence[int], new_messages: Sequence[Any], **options: Any
    ) -> IncrementalResult:
        """``TitoTokenizer.encode_incremental`` (same keyword options), its ids from renderers' bridge."""
        # our junction rules first: they decide whether the checkpoint can be extended at all
        ours = super().encode_incremental(checkpoint_ids, new_messages, **options)  # type: ignore[misc]
        if isinstance(ours, TitoFailure) or not self.uses_renderers:
            return ours
        tools, kwargs = options.get("tools"), options.get("chat_template_kwargs")
        bridged = self._bridge(list(checkpoint_ids), normalize_messages(new_messages), tools, kwargs)
        if bridged is None:
            return ours  # renderers leaves this extension to a re-render; the template's fragment is exact
        if bridged != ours.ids:
            return TitoFailure(
                TitoFailureReason.JUNCTION_MISMATCH,
                f"renderers' bridge differs from the template's fragment ({len(bridged)} vs {len(ours.ids)} tokens)",
            )
        return TitoFragment(ids=bridged, text=ours.text)

    def _bridge(
        self, ids: list[int], new_messages: list[dict[str, Any]], tools: Any, kwargs: Mapping[str, Any] | None
    ) -> tuple[int, ...] | None:
        """renderers' ids after ``ids`` for ``new_messages``, or None where it declines (or rewrites the
        checkpoint). The checkpoint is split after its last generation prompt into prompt and completion."""
        prompt = list(self.generation_prompt_ids(kwargs))  # type: ignore[attr-defined]
        end = next((s + len(prompt) for s in range(len(ids) - len(prompt), -1, -1) if ids[s : s + len(prompt)] == prompt),
                   None)
        if end is None:
            return None
        try:
            result = self._renderer(kwargs).bridge_to_next_turn(
                ids[:end], ids[end:], new_messages, tools=list(tools) if tools else None,
            )
        except Exception:  # noqa: BLE001 - a bridge renderers cannot make is one it declines
            return None
        if result is None or list(result.token_ids[: len(ids)]) != ids:
            return None
        return tuple(result.token_ids[len(ids) :])


class RenderersGlm47TitoTokenizer(RenderersGlmMixin, Glm47TitoTokenizer):
    """GLM-4.7 on renderers' ``glm-5`` renderer (renderers maps ``zai-org/GLM-4.7-Flash`` to it)."""


class RenderersGlm5TitoTokenizer(RenderersGlmMixin, Glm5TitoTokenizer):
    """GLM-5 on renderers' ``glm-5`` renderer."""


def _create_renderer(tito: TitoTokenizer, config_name: str, thinking: bool, clear: bool) -> Any:
    import renderers  # a runtime dependency, imported when a renderers-backed family is first used

    config_class = getattr(renderers, config_name)
    fields: dict[str, Any] = {"enable_thinking": thinking}
    # clear_thinking=False keeps every turn's reasoning and implies retention "all" (an explicit one conflicts);
    # otherwise "all" is what makes it bridge across a new user turn as the template's render allows
    fields.update({"clear_thinking": False} if not clear else {"thinking_retention": "all"})
    return renderers.create_renderer(TokenizerProtocol(tito), config_class(**fields))
