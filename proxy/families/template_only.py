"""The family of an unrecognised chat template: every step is a full render of the template (last-step mode).

When a tokenizer folder's chat template is no family's official template and passes no family's pinned rules,
nothing is known about where its turns join, so no incremental fragment can be proven exact. The proxy still serves
it: each step's context is the template's full render of the conversation (exactly the tokens the model is given,
recorded as they are), and ``encode_incremental`` always answers ``last_step_mode``, so every step starts its own
segment (boundary ``tito_failed``, ``boundary_detail`` naming ``last_step_mode``). A segment is then one step: the
concat build exports exactly the prompt the model was given and the ids it generated. (``--trajectory-build-mode
last_step`` still works, but re-renders the final message list, which a template that rewrites history changes.)

What the rest of the proxy needs from a tokenizer is learned from the template itself at load time:

- the generation prompt, per ``chat_template_kwargs``: the render of a one-message chat with the prompt minus the
  render without it; its thinking prefix is the part from a trailing ``<think>`` on (reasoning starts open);
- the end-of-turn token: the first special token the template writes after an assistant turn's content, else the
  ``eos_token`` of tokenizer_config.json.

ChatML-only pieces (``<|im_start|>``, ``<think>`` ids) are -1 when the tokenizer has no such special token; the
last-step builder then refuses the render and the export falls back to the concat build.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tokenizers

from proxy.families.model_family import ModelFamily, TitoMode
from proxy.tokenization.results import IncrementalResult, TitoError, TitoFailure, TitoFailureReason
from proxy.tokenization.chatml import ChatMLTitoTokenizer
from proxy.tokenization.tito import ANCHOR, ANCHOR_QUERY, TemplateMismatchError

#: an id no vocabulary has: a ChatML token this tokenizer lacks
MISSING_ID = -1


class TemplateOnlyTokenizer(ChatMLTitoTokenizer):
    """Full renders through an arbitrary chat template; no incremental encode (see the module docstring)."""

    family = "generic"

    def __init__(self, tokenizer: tokenizers.Tokenizer, chat_template: str, *, source: str = "<memory>"):
        self._prompts: dict[str, str] = {}  # generation prompt per kwargs (an idempotent cache, like the base's)
        super().__init__(tokenizer, chat_template, source=source)

    def _special_id(self, token: str) -> int:
        """The id of a special token, or MISSING_ID: the ChatML markup the base class looks up is optional here."""
        token_id = self._tokenizer.token_to_id(token)
        return token_id if token_id is not None and self._added.get(token_id) == token else MISSING_ID

    def _check_template(self) -> None:
        """Learn the end-of-turn token (module docstring); fail only when the template cannot render a chat."""
        query = [{"role": "user", "content": ANCHOR_QUERY}]
        try:
            self._render(query, None, None, add_generation_prompt=True)
            turn = self._render(query + [{"role": "assistant", "content": ANCHOR}], None, None, False)
        except TitoError as exc:
            raise TemplateMismatchError(f"{self.source}: template failed on a two-message chat: {exc}") from None
        after = turn[turn.find(ANCHOR) + len(ANCHOR) :] if ANCHOR in turn else ""
        end = next((self._added[i] for i in self.encode_text(after) if i in self._added), None)
        end = end or _config_eos(Path(self.source))  # from_path names the folder as the source
        if end is None or self._special_id(end) == MISSING_ID:
            raise TemplateMismatchError(
                f"{self.source}: cannot tell which special token ends an assistant turn (the template writes "
                f"{after[:40]!r} after one, and tokenizer_config.json names no eos_token)"
            )
        self.END_OF_TURN = end  # an instance attribute shadowing the ChatML default
        self.end_of_turn_id = self._special_id(end)
        self.end_of_turn_ids = frozenset({self.end_of_turn_id})

    def generation_prompt(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        """What the template appends for ``add_generation_prompt`` after a one-message chat (cached per kwargs)."""
        kwargs = self._template_kwargs(chat_template_kwargs)
        key = json.dumps(kwargs, sort_keys=True, default=repr)
        prompt = self._prompts.get(key)
        if prompt is None:
            query = [{"role": "user", "content": ANCHOR_QUERY}]
            try:
                with_prompt = self._render(query, None, kwargs, add_generation_prompt=True)
                without = self._render(query, None, kwargs, add_generation_prompt=False)
            except TitoError:
                with_prompt = without = ""
            prompt = with_prompt[len(without) :] if with_prompt.startswith(without) else ""
            self._prompts[key] = prompt
        return prompt

    def thinking_prefix(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        """The generation prompt from its last ``<think>`` on (the output starts inside reasoning), else empty."""
        prompt = self.generation_prompt(chat_template_kwargs)
        at = prompt.rfind(self.THINK_OPEN)
        return prompt[at:] if at >= 0 and self.THINK_CLOSE not in prompt[at:] else ""

    def encode_incremental(
        self, checkpoint_ids: Sequence[int], new_messages: Sequence[Any], **_: Any
    ) -> IncrementalResult:
        """Always ``last_step_mode``: without pinned junction rules no fragment is known to be exact (the base
        class's keyword arguments are accepted and unused)."""
        return TitoFailure(
            TitoFailureReason.LAST_STEP_MODE,
            f"the chat template at {self.source} is not a recognised family's: every step is a full render",
        )


def _config_eos(path: Path) -> str | None:
    """The ``eos_token`` of the folder's tokenizer_config.json (a string or an AddedToken dict), if any."""
    config = path / "tokenizer_config.json"
    if not config.is_file():
        return None
    eos = json.loads(config.read_text(encoding="utf-8")).get("eos_token")
    if isinstance(eos, Mapping):
        eos = eos.get("content")
    return eos if isinstance(eos, str) else None


GENERIC = ModelFamily(
    name="generic",
    aliases=("unknown",),
    tokenizer=TemplateOnlyTokenizer,
    tool_call_parser=None,
    reasoning_parser=None,
    verified="none: full render of the folder's own template every step, tests/families/test_last_step_mode.py",
    structural=False,
    mode=TitoMode.LAST_STEP,
    description="any other chat template: full render each step, last-step trajectories, no parsers by default",
)
