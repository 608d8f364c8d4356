"""The GLM junction rules (GLM-4.7, GLM-5, GLM-5.1, GLM-5.2): no end-of-turn token, the model stops on the next role.

A GLM conversation renders as ``[gMASK]<sop>`` then turns that each start with a role token and have no closing
token: ``<|system|>...``, ``<|user|>...``, ``<|assistant|><think>reasoning</think>content<tool_call>...``,
``<|observation|><tool_response>...</tool_response>...`` (consecutive tool results share one observation turn).
The generation prompt is ``<|assistant|>`` plus the thinking prefix: ``<think>`` (thinking on or unset), and with
``enable_thinking=False`` ``</think>`` (GLM-4.7, 5, 5.1) or ``<think></think>`` (GLM-5.2). A GLM model ends its
turn by generating the role token that comes next -- ``<|observation|>`` after tool calls, ``<|user|>`` otherwise
(both are in the models' ``eos_token_id`` list) -- so that token is the last id of a checkpoint, and the fragment is
everything the template renders AFTER it: the new turns' text (without their first role token, which the model
already produced) and the generation prompt. When the messages after a checkpoint open with another role than the
one the model stopped on (tool results after ``<|user|>``), the checkpoint cannot be extended: JUNCTION_MISMATCH.

Every role token, ``<think>``, ``</think>``, ``<tool_call>``, ``<arg_key>`` etc. is a special token, so a fragment cut
right after a role token tokenizes exactly as the full render does at that place.

Last-step: the final turn is closed with the role token the model stopped on; each assistant turn's masked region
runs from after ``<|assistant|>`` (and the thinking prefix when the rendered turn starts with it) up to and including
the next role token.

GLM-5.x ship chat templates only; they use GLM-4.7's tokenizer (docs/families.md: every special token their
templates emit is a special token of GLM-4.7's ``tokenizer.json``, and their ``tokenizer_config.json`` lists the
same special tokens in the same order).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from proxy.tokenization.results import LastStepError, TitoError, TitoFailure, TitoFailureReason
from proxy.tokenization.tito import TemplateMismatchError, TemplateTitoTokenizer

SYSTEM, USER, ASSISTANT, OBSERVATION = "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"
ROLE_TOKENS = (SYSTEM, USER, ASSISTANT, OBSERVATION)


def stop_token_for(message: Mapping[str, Any]) -> str:
    """The role token a GLM model generates to end this assistant turn."""
    return OBSERVATION if message.get("tool_calls") else USER


class GlmTitoTokenizer(TemplateTitoTokenizer):
    """The GLM turn shape; subclasses pin the template version (its thinking-off prefix and its SHA-256)."""

    #: what the generation prompt adds after ``<|assistant|>`` with ``enable_thinking=False``
    THINK_OFF_PREFIX: ClassVar[str] = "</think>"
    #: SHA-256 of the official chat template (``proxy/families/glm.py``: detection's signature)
    TEMPLATE_SHA256: ClassVar[str] = ""

    def _init_junction_tokens(self) -> None:
        self.role_ids = {token: self._special_id(token) for token in ROLE_TOKENS}
        self.assistant_id = self.role_ids[ASSISTANT]
        self.end_of_turn_id = self.role_ids[USER]
        self.end_of_turn_ids = frozenset({self.role_ids[USER], self.role_ids[OBSERVATION]})
        self._role_by_id = {token_id: token for token, token_id in self.role_ids.items()}

    def thinking_prefix(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        return self.THINK_OFF_PREFIX if self.thinking_disabled(chat_template_kwargs) else self.THINK_OPEN

    def generation_prompt(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        return ASSISTANT + self.thinking_prefix(chat_template_kwargs)

    def _check_template(self) -> None:
        for kwargs, expected in self._checked_generation_prompts():
            for message, stop, want in (
                ({"role": "user", "content": "u"}, USER, "u"),
                ({"role": "tool", "content": "t"}, OBSERVATION, "<tool_response>t</tool_response>"),
            ):
                result = self._fragment_text([message], True, None, kwargs, self.role_ids[stop])
                if result != want + expected:
                    raise TemplateMismatchError(
                        f"{self.source}: a {message['role']} turn after an assistant turn renders as {result!r} after "
                        f"{stop}, expected {want + expected!r}"
                    )

    def render_assistant(self, message: Any, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        """The template's rendering of the turn after the generation prompt, then the role token the model stops
        on. With thinking on, a turn the template renders without a think block (GLM-4.7/5: no reasoning) is
        generated as the bare ``</think>`` that closes the prompt's ``<think>``."""
        prompt, turn = self._render_one_turn(message, chat_template_kwargs)
        prefix = self.thinking_prefix(chat_template_kwargs)
        header = prompt[: len(prompt) - len(prefix)]
        body = turn[len(header) :] if turn.startswith(header) and header.endswith(ASSISTANT) else None
        if body is not None and body.startswith(prefix):
            body = body[len(prefix) :]
        elif body is None or prefix != self.THINK_OPEN or not body.startswith(self.THINK_CLOSE):
            raise TitoError.of(
                TitoFailureReason.JUNCTION_MISMATCH,
                f"the template renders this assistant turn as {turn[turn.rfind(ASSISTANT):]!r}, which does not "
                f"extend the generation prompt {self.generation_prompt(chat_template_kwargs)!r}",
            )
        return body + stop_token_for(message if isinstance(message, Mapping) else {})

    def _cut_fragment(
        self, text: str, anchor: str, checkpoint_end: int, chat_template_kwargs: Mapping[str, Any] | None
    ) -> str | TitoFailure:
        if text.count(anchor) != 1:
            return TitoFailure(
                TitoFailureReason.JUNCTION_MISMATCH,
                f"the checkpoint's turn ({anchor!r}) occurs {text.count(anchor)} times in the synthetic render",
            )
        rest = text[text.index(anchor) + len(anchor) :]
        stop = self._role_by_id.get(checkpoint_end, "")
        if not stop or not rest.startswith(stop):
            following = next((r for r in ROLE_TOKENS if rest.startswith(r)), rest[:20])
            return TitoFailure(
                TitoFailureReason.JUNCTION_MISMATCH,
                f"the checkpoint's turn ended with {self.decode([checkpoint_end])!r} but the template continues "
                f"with {following!r}",
            )
        fragment = rest[len(stop) :]
        prompt = self.generation_prompt(chat_template_kwargs)
        if not fragment.endswith(prompt):
            return TitoFailure(
                TitoFailureReason.JUNCTION_MISMATCH,
                f"fragment does not end with the generation prompt {prompt!r}: {fragment[-60:]!r}",
            )
        return fragment

    def _check_fragment_ids(self, ids: list[int], chat_template_kwargs: Mapping[str, Any] | None) -> str | None:
        prompt_ids = self.generation_prompt_ids(chat_template_kwargs)
        if tuple(ids[-len(prompt_ids) :]) != prompt_ids:
            return f"fragment tokens do not end with the generation prompt {prompt_ids}: ...{ids[-6:]}"
        return None

    # -- last-step and drift ----------------------------------------------------------------------------------------

    def close_last_step_text(self, text: str, final: Mapping[str, Any]) -> str:
        """Append the role token the model stopped on (the render of a final turn has no closing token)."""
        if any(text.endswith(role) for role in ROLE_TOKENS):
            raise LastStepError(f"the render ends with a role token, not the final assistant turn: {text[-40:]!r}")
        return text + stop_token_for(final)

    def last_step_spans(
        self, ids: list[int], messages: list[dict[str, Any]], has_tools: bool, kwargs: Mapping[str, Any] | None
    ) -> list[tuple[int, int]]:
        """From after ``<|assistant|>`` (and the thinking prefix the turn starts with) up to and including the next
        role token. Refused when the render has more role tokens than the messages' skeleton (special-token text
        inside a message)."""
        offsets = self.token_offsets(ids)
        data = b"".join(self.token_bytes(t) for t in ids)
        role_ids = set(self.role_ids.values())
        # role tokens of the skeleton (+1: the closing one the model generated)
        skeleton = self._render_skeleton(messages, has_tools, kwargs)  # once: a render of the whole conversation
        expected = sum(skeleton.count(role) for role in ROLE_TOKENS) + 1
        found = sum(1 for token_id in ids if token_id in role_ids)
        if found != expected:
            raise LastStepError(
                f"the render has {found} role tokens for {expected} expected: a message contains special-token text"
            )
        prefix = self.thinking_prefix(kwargs).encode()
        spans: list[tuple[int, int]] = []
        for p, token_id in enumerate(ids):
            if token_id != self.assistant_id:
                continue
            generated_from = offsets[p][1]
            if data.startswith(prefix, generated_from):
                generated_from += len(prefix)
            end = next((j for j in range(p + 1, len(ids)) if ids[j] in role_ids), None)
            if end is None:
                raise LastStepError("an assistant turn is not closed by a role token")
            first = next(j for j in range(p + 1, end + 1) if offsets[j][0] >= generated_from)
            spans.append((first, end + 1))
        return spans

    def boundary_markers(self) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
        roles = tuple(role.encode() for role in ROLE_TOKENS)
        return roles, roles


class Glm47TitoTokenizer(GlmTitoTokenizer):
    """GLM-4.7 (and GLM-4.7-Flash): reasoning and content stripped; no think block for a turn without reasoning."""

    family = "glm4_7"
    TEMPLATE_SHA256 = "d63ad536c3c81880043e22ec7fd08db42b4d8fb7c89c7138bc562bfa25281375"


class Glm5TitoTokenizer(GlmTitoTokenizer):
    """GLM-5: GLM-4.7's template with tighter whitespace control (the same rendered text)."""

    family = "glm5"
    TEMPLATE_SHA256 = "45a1d5635afd3d8e08a28866e72fc8395d2a7ec30989fd0bdaec6dd45a99eff0"


class Glm51TitoTokenizer(GlmTitoTokenizer):
    """GLM-5.1: reasoning kept verbatim; an empty ``<think></think>`` for a reasoning-less turn after the query."""

    family = "glm5_1"
    TEMPLATE_SHA256 = "03b1bbff20331e54647c68167e8ac7f0b5b7ceb40ead372f44826624a9ad79cd"


class Glm52TitoTokenizer(GlmTitoTokenizer):
    """GLM-5.2: ``<think></think>`` as the thinking-off prefix and for every turn without kept reasoning; a
    ``Reasoning Effort`` system turn first when thinking is on (``reasoning_effort``: ``high`` or max)."""

    family = "glm5_2"
    THINK_OFF_PREFIX = "<think></think>"
    TEMPLATE_SHA256 = "172dc74a35e1752df75ecfb2b2cf9326d2852bb1379868ebeec9571654489679"

