"""The PyPI package ``renderers`` (Apache-2.0) behind the project's TITO interface, for the property battery.

An adapter over one of our family tokenizers: ``encode_full`` is renderers' ``render_ids`` (generation prompt
included) and ``encode_incremental`` its ``bridge_to_next_turn`` (the previous prompt and completion, split at
the checkpoint's last generation prompt, then the new messages); everything the battery compares against stays
ours and the official template's (``render_full``, ``render_assistant`` as the simulated model, the tokenizer).
renderers takes its thinking switch per renderer (``enable_thinking`` in the config), so one renderer is built
per ``chat_template_kwargs``. Its tokenizer protocol is served from our ``tokenizer.json`` (no transformers).
GLM-4.7 uses renderers' ``glm-5`` renderer (its own registry maps ``zai-org/GLM-4.7-Flash`` there); MiniMax-M2 its
``minimax-m2`` renderer (no thinking switch), given the official template's default identity (``MiniMax-M2.7``; the
renderer's default names M2.5).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.tokenization import TitoFailure, TitoFailureReason, TitoFragment, TitoTokenizer
from proxy.tokenization.messages import normalize_messages
from proxy.tokenization.renderers_backend import TokenizerProtocol

#: our family -> renderers' config class name
RENDERER_CONFIGS = {"qwen3": "Qwen3RendererConfig", "qwen3_5": "Qwen35RendererConfig",
                    "qwen3_6": "Qwen36RendererConfig", "glm4_7": "GLM5RendererConfig", "glm5": "GLM5RendererConfig",
                    "glm5_1": "GLM51RendererConfig", "minimax_m2": "MiniMaxM2RendererConfig"}
#: fields a family's renderer is given so that it renders the wheel's template (not a later revision's defaults)
RENDERER_FIELDS: dict[str, dict[str, Any]] = {
    "minimax_m2": {"model_identity": "You are a helpful assistant. Your name is MiniMax-M2.7 and is built by MiniMax."},
}


def renderers_adapter(tito: TitoTokenizer, **config: Any) -> TitoTokenizer:
    """A copy of ``tito`` whose encodes come from renderers (see the module docstring); ``config``: more fields
    of the renderer config (``thinking_retention="all"`` lets it bridge across user turns)."""
    import renderers

    config_class = getattr(renderers, RENDERER_CONFIGS[tito.family])
    protocol = TokenizerProtocol(tito)
    built: dict[tuple[bool, bool], Any] = {}

    def renderer(kwargs: Mapping[str, Any] | None) -> Any:
        thinking = not tito.thinking_disabled(kwargs)
        # GLM's clear_thinking switch is a renderer config field too (False keeps every turn's reasoning)
        clear = (kwargs or {}).get("clear_thinking", True) is not False
        if (thinking, clear) not in built:
            fields = {**RENDERER_FIELDS.get(tito.family, {}), **config}
            if "enable_thinking" in config_class.model_fields:
                fields["enable_thinking"] = thinking
            if "clear_thinking" in config_class.model_fields and not clear:
                fields["clear_thinking"] = False
                fields.pop("thinking_retention", None)  # implied ("all"); an explicit one would conflict
            built[(thinking, clear)] = renderers.create_renderer(protocol, config_class(**fields))
        return built[(thinking, clear)]

    class RenderersTito(type(tito)):  # type: ignore[misc, valid-type]
        def encode_full(self, messages: Sequence[Any], tools: Any = None, chat_template_kwargs: Any = None):
            return list(renderer(chat_template_kwargs).render_ids(
                normalize_messages(messages), tools=list(tools) if tools else None, add_generation_prompt=True,
            ))

        def encode_incremental(self, checkpoint_ids: Sequence[int], new_messages: Sequence[Any], *,
                               prior_messages: Any = None, tools: Any = None, chat_template_kwargs: Any = None):
            backend = renderer(chat_template_kwargs)
            ids = list(checkpoint_ids)
            prompt_end = _generation_prompt_end(backend, ids)
            if prompt_end is None:
                return TitoFailure(TitoFailureReason.JUNCTION_MISMATCH, "no generation prompt in the checkpoint")
            bridged = backend.bridge_to_next_turn(
                ids[:prompt_end], ids[prompt_end:], normalize_messages(new_messages),
                tools=list(tools) if tools else None,
            )
            if bridged is None:
                return TitoFailure(TitoFailureReason.JUNCTION_MISMATCH, "renderers: bridge_to_next_turn refused")
            extended = list(bridged.token_ids)
            if extended[: len(ids)] != ids:
                return TitoFailure(TitoFailureReason.JUNCTION_MISMATCH, "renderers: the bridge rewrote the checkpoint")
            fragment = tuple(extended[len(ids):])
            return TitoFragment(ids=fragment, text=self.decode(fragment))

    adapter = object.__new__(RenderersTito)
    adapter.__dict__.update(tito.__dict__)
    return adapter


def family_pair(family: str, **config: Any) -> tuple[TitoTokenizer, TitoTokenizer]:
    """Our TITO tokenizer for ``family`` (its fetched folder) and the renderers adapter over it; ``config``: more
    renderer config fields."""
    from proxy.families import get_family, load_tito_tokenizer
    from serving.tokenizer_files import ensure_tokenizers, model_tokenizer_path

    ours = load_tito_tokenizer(family, model_tokenizer_path(get_family(family).tokenizer_folder, ensure_tokenizers()))
    return ours, renderers_adapter(ours, **config)


def _generation_prompt_end(backend: Any, ids: list[int]) -> int | None:
    """Where the last generation prompt (renderers' own, for this renderer) ends in ``ids``."""
    probe = [{"role": "user", "content": "q"}]
    with_prompt = backend.render_ids(probe, add_generation_prompt=True)
    without = backend.render_ids(probe, add_generation_prompt=False)
    prompt = with_prompt[len(without):]
    for start in range(len(ids) - 1, -1, -1):
        if ids[start : start + len(prompt)] == prompt:
            return start + len(prompt)
    return None
