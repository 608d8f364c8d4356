"""A thin wrapper over ``tokenizers.Tokenizer`` with the Qwen special-token ids the engine needs.

The engine uses the fast ``tokenizers`` library directly (no transformers import: about 0.25 s to load instead of
0.8 s plus torch warnings). Special-token ids are read from the files, never hard-coded, so the same code serves
Qwen3 (ids 151643-151668) and Qwen3.5 (248044-248076).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import attrs
from tokenizers import Tokenizer

from .deepseek_markup import variant as deepseek_variant


class TokenizerLoadError(Exception):
    """The tokenizer folder lacks a file or a token the engine relies on."""


@attrs.define(eq=False)
class EngineTokenizer:
    """Encode/decode plus the ids of the chat-format markers.

    ``special_ids`` are the tokens flagged ``special`` (stripped by ``skip_special_tokens``); ``<think>`` and
    ``<tool_call>`` are ordinary added tokens in Qwen vocabularies and survive it, as in SGLang.
    """

    tokenizer: Tokenizer
    path: Path
    im_start_id: int | None
    im_end_id: int | None
    endoftext_id: int | None
    think_start_id: int | None
    think_end_id: int | None
    special_ids: frozenset[int]
    vocab_size: int
    #: GLM vocabularies: role token -> id (``<|user|>``, ``<|observation|>``, ...); empty for ChatML (Qwen)
    glm_roles: dict[str, int] = attrs.field(factory=dict)

    @property
    def is_glm(self) -> bool:
        """The GLM chat format (no ``<|im_start|>``; role tokens, ``engine/glm_markup.py``)."""
        return bool(self.glm_roles)

    #: MiniMax-M2 vocabularies: ``]~b]`` / ``[e~[`` play ``<|im_start|>`` / ``<|im_end|>`` (engine/minimax_markup.py)
    is_minimax: bool = False
    #: DeepSeek vocabularies: the format (``v3_1``, ``v3_2``, ``v4``; ``engine/deepseek_markup.py``), else empty;
    #: ``<｜User｜>`` / ``<｜end▁of▁sentence｜>`` play ``<|im_start|>`` / ``<|im_end|>``
    deepseek: str = ""
    #: MiniMax-M3 (a MiniMax vocabulary with the ``]<]minimax[>[`` markup namespace): ``<mm:think>`` reasoning and
    #: namespaced tool calls
    is_minimax_m3: bool = False

    @property
    def assistant_header(self) -> str:
        if self.is_minimax:
            return "]~b]ai\n"
        if self.deepseek:
            return "<｜Assistant｜>"
        return "<|assistant|>" if self.is_glm else "<|im_start|>assistant\n"

    def end_of_turn_id(self, reply: str) -> int:
        """The token the model ends ``reply`` with: ``<|im_end|>``, or GLM's next role (``glm_markup.stop_role``)."""
        if self.is_glm:
            from .glm_markup import stop_role  # noqa: PLC0415 - GLM only

            return self.glm_roles[stop_role(reply)]
        assert self.im_end_id is not None
        return self.im_end_id

    @classmethod
    def from_path(cls, path: Path) -> EngineTokenizer:
        return _load(Path(path).resolve())

    @property
    def eos_ids(self) -> frozenset[int]:
        """Token ids that end generation unless ``ignore_eos``: ``<|im_end|>`` and ``<|endoftext|>``.

        Qwen's generation_config lists both as ``eos_token_id``; SGLang merges them into the stop set.
        """
        ids = {self.im_end_id} if self.im_end_id is not None else set()
        if self.is_glm:  # GLM's generation_config: <|endoftext|>, <|user|>, <|observation|>
            ids |= {self.glm_roles["<|user|>"], self.glm_roles["<|observation|>"]}
        if self.endoftext_id is not None:
            ids.add(self.endoftext_id)
        return frozenset(ids)

    @property
    def uses_xml_tool_calls(self) -> bool:
        """Qwen3.5-class vocabularies (about 248k) emit XML tool calls; Qwen3 (about 151k) emits JSON."""
        return self.vocab_size > 200_000 and not self.is_glm

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], *, skip_special_tokens: bool = True) -> str:
        if not ids:
            return ""
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        """The decoded text of one token (as ``return_text_in_logprobs`` reports it)."""
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    def is_valid_id(self, token_id: int) -> bool:
        return 0 <= token_id < self.vocab_size


@lru_cache(maxsize=8)
def _load(path: Path) -> EngineTokenizer:
    tokenizer_file = path / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise TokenizerLoadError(f"{path}: no tokenizer.json")
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    added: dict[str, tuple[int, bool]] = {}
    config_file = path / "tokenizer_config.json"
    if config_file.is_file():
        decoder = json.loads(config_file.read_text()).get("added_tokens_decoder", {})
        for key, token in decoder.items():
            added[token["content"]] = (int(key), bool(token.get("special", False)))
    for token_id, token in tokenizer.get_added_tokens_decoder().items():
        added.setdefault(token.content, (int(token_id), bool(token.special)))

    def required(content: str) -> int:
        if content not in added:
            raise TokenizerLoadError(f"{path}: the vocabulary has no {content} token")
        return added[content][0]

    def optional(content: str) -> int | None:
        return added[content][0] if content in added else None

    roles = ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")
    glm = "<|im_start|>" not in added and all(role in added for role in roles)
    minimax_m3 = "<|im_start|>" not in added and "]~b]" in added and "]<]minimax[>[" in added
    minimax = minimax_m3 or ("<|im_start|>" not in added and "]~b]" in added and "<minimax:tool_call>" in added)
    deepseek = "<|im_start|>" not in added and "<｜User｜>" in added and "<｜Assistant｜>" in added
    start, end = ("]~b]", "[e~[") if minimax else ("<｜User｜>", "<｜end▁of▁sentence｜>") if deepseek else (
        "<|im_start|>", "<|im_end|>")
    return EngineTokenizer(
        tokenizer=tokenizer,
        path=path,
        im_start_id=None if glm else required(start),
        im_end_id=None if glm else required(end),
        is_minimax=minimax,
        deepseek=deepseek_variant(set(added)) if deepseek else "",
        is_minimax_m3=minimax_m3,
        endoftext_id=optional("<|endoftext|>"),
        think_start_id=optional("<think>"),
        think_end_id=optional("</think>"),
        special_ids=frozenset(token_id for token_id, special in added.values() if special),
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        glm_roles={role: added[role][0] for role in roles} if glm else {},
    )
