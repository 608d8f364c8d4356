"""The TITO tokenizer base: full encodes, exact incremental fragments, decode, with the model's own chat template.

Theory of operation
-------------------
A TITO context is the previous checkpoint's token ids (which end with the token the model generated to close its
turn) plus a fragment for the messages that came after it. The fragment must be exactly the text the model's
template puts there: the new turns, then the generation prompt with its thinking prefix.

We never re-render the history to get it (the Qwen and GLM templates rewrite earlier assistant turns once a new user
query arrives, so the history is not a prefix of its own re-render). Instead we render a *minimal synthetic context*
with the model's template, loaded at run time from ``--tokenizer-path``::

    [user "<query>" if the real history has a user query] + [assistant "<anchor>"] + new messages  (+ gen. prompt)

and cut right after the anchor's end of turn. What the templates render after an assistant turn depends only on
the previous message's role (always assistant here: the checkpoint's turn) and on where the last user query is
relative to each later message, which the synthetic context preserves. The property tests compare every fragment
with the full render of the real conversation wherever that render is prefix-stable.

Where the turn ends is the family's junction rule (a subclass): ChatML families (``proxy.tokenization.chatml``) end
a turn with ``<|im_end|>`` and start the next after a newline; GLM (``proxy.tokenization.glm``) has no end-of-turn
token, the model stops by emitting the NEXT role token (``<|user|>``, ``<|observation|>``). Either way the cut falls
right after a special token, and the fragment is tokenized on its own: exact, because the BPE never merges across
special tokens, so the fragment's tokens are the tokens the full render has at that place.

Encoding uses the official ``tokenizer.json`` through ``tokenizers.Tokenizer``, not ``AutoTokenizer``:
transformers 5.23's ``Qwen2Tokenizer`` replaces the pre-tokenizer with the Qwen2 regex, which drops Qwen3.5's
``\\p{M}`` (combining marks) rule and tokenizes e.g. Hindi differently from the model's own tokenizer.

Everything here is synchronous, free of I/O after construction and thread-safe (the only mutable state is two
idempotent caches), so the proxy can run full encodes in a worker thread.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import orjson
import tokenizers
from transformers.utils.chat_template_utils import render_jinja_template

from proxy.canonical_json import canonical_json
from proxy.tokenization.messages import MessageError, normalize_message, normalize_messages
from proxy.tokenization.render_cache import ShapeRenderCache
from proxy.tokenization.results import IncrementalResult, TitoError, TitoFailure, TitoFailureReason, TitoFragment

#: template variables the proxy controls itself; a client's chat_template_kwargs cannot override them
RESERVED_TEMPLATE_KWARGS = frozenset(
    {"messages", "tools", "documents", "add_generation_prompt", "continue_final_message"}
)

# Content of the synthetic turns that stand in for the real history. Plain ASCII with no whitespace at either end
# (Qwen3.5 trims content), no think tags. The anchor is lengthened until it occurs nowhere in the new messages or
# tools (so no client text can forge the cut), and the cut is still refused unless it occurs exactly once. Family
# tokenizers with junctions of their own (minimax.py, families/template_only.py) use the same contents.
ANCHOR = "tito-anchor-5c1e0b9d"
ANCHOR_QUERY = "tito-query-5c1e0b9d"


def anchor_absent_from(*values: Any) -> str:
    """The base anchor, lengthened until no string in ``values`` contains it.

    The strings are searched in one serialization of ``values``: orjson's UTF-8 (a byte substring of it is a
    substring of its text), 8 -> ~2 µs a turn inside the proxy (issue 21 item 2); the json module's when orjson
    cannot write a value (an integer beyond 64 bits, a lone surrogate)."""
    anchor = ANCHOR
    try:
        haystack = orjson.dumps(values, default=repr, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:
        text = json.dumps(values, ensure_ascii=False, default=repr)
        while anchor in text:
            anchor += "x"
        return anchor
    while anchor.encode() in haystack:
        anchor += "x"
    return anchor


class TemplateMismatchError(ValueError):
    """The chat template at the tokenizer path does not follow the family's pinned rules (wrong --tito-model?)."""


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's byte-to-unicode table used by byte-level BPE vocabularies."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = [], 0
    for byte in range(256):
        if byte in printable:
            chars.append((chr(byte), byte))
        else:
            chars.append((chr(256 + extra), byte))
            extra += 1
    return dict(chars)


def _kwargs_key(kwargs: Mapping[str, Any]) -> str:
    return canonical_json(kwargs)


class TitoTokenizer(abc.ABC):
    """One model family's tokenizer and chat template, with the family's pinned junction rules.

    The base is family-neutral (loading, encode/decode, full renders, the incremental driver); a family subclass
    pins where a turn ends (:meth:`_init_junction_tokens`, :meth:`_fragment_after`, :meth:`_check_fragment_ids`),
    what the model generates for a turn (:meth:`render_assistant`), its generation prompt, the last-step mask
    (:meth:`close_last_step_text`, :meth:`last_step_spans`) and the drift audit's turn boundaries
    (:meth:`boundary_markers`). Construct with :meth:`from_path` (or
    :func:`proxy.tokenization.load_tito_tokenizer`, which caches per path).
    """

    family: ClassVar[str]
    THINK_OPEN: ClassVar[str] = "<think>"
    THINK_CLOSE: ClassVar[str] = "</think>"
    #: the token a checkpoint normally ends with (the family's main end-of-turn)
    end_of_turn_id: int
    #: every token a checkpoint may end with and still be extended (ChatML: ``<|im_end|>``; GLM: the role tokens
    #: the model stops on)
    end_of_turn_ids: frozenset[int]

    def __init__(self, tokenizer: tokenizers.Tokenizer, chat_template: str, *, source: str = "<memory>"):
        self._tokenizer = tokenizer
        self._template = chat_template
        self.source = source
        self._added: dict[int, str] = {i: t.content for i, t in tokenizer.get_added_tokens_decoder().items()}
        self._vocab_size: int = tokenizer.get_vocab_size(with_added_tokens=True)
        self.think_open_id = self._special_id(self.THINK_OPEN)
        self.think_close_id = self._special_id(self.THINK_CLOSE)
        self._init_junction_tokens()
        # idempotent caches: concurrent writers store equal values, so no lock is needed
        self._gen_prompt_ids: dict[str, tuple[int, ...]] = {}
        self._token_bytes: dict[int, bytes] = {}
        self._query_prompts: dict[str, str] = {}
        # Used by TemplateTitoTokenizer's fragment renders; made here, where _check_template may already render one.
        self._fragment_renders = ShapeRenderCache(chat_template)
        self._check_template()

    @abc.abstractmethod
    def _init_junction_tokens(self) -> None:
        """Look up the family's turn tokens (``end_of_turn_id``, ``end_of_turn_ids``, ...); TemplateMismatchError
        when the tokenizer lacks them."""

    @abc.abstractmethod
    def _check_template(self) -> None:
        """Fail at load time (TemplateMismatchError) when the template does not follow the family's pinned rules."""

    def _checked_generation_prompts(self) -> list[tuple[dict[str, Any], str]]:
        """The first load-time check of every family: with thinking unset, on and off, the template's generation
        prompt after a one-message chat is the pinned one. Returns ``(kwargs, prompt)`` for the junction checks."""
        checked = []
        for kwargs in ({}, {"enable_thinking": True}, {"enable_thinking": False}):
            query = [{"role": "user", "content": "q"}]
            try:
                without = self._render(query, None, kwargs, add_generation_prompt=False)
                with_prompt = self._render(query, None, kwargs, add_generation_prompt=True)
            except TitoError as exc:
                raise TemplateMismatchError(f"{self.source}: template failed on a one-message chat: {exc}") from None
            expected = self.generation_prompt(kwargs)
            if with_prompt != without + expected:
                raise TemplateMismatchError(
                    f"{self.source}: the generation prompt for {kwargs} is {with_prompt[len(without):]!r}, "
                    f"but the {self.family} family expects {expected!r}"
                )
            checked.append((kwargs, expected))
        return checked

    @property
    def vocab_size(self) -> int:
        """Token ids are ``0 <= id < vocab_size`` (added tokens included): the ids an upstream may generate."""
        return self._vocab_size

    # -- construction -------------------------------------------------------------------------------------------

    @classmethod
    def from_path(cls, tokenizer_path: str | Path) -> TitoTokenizer:
        """Load ``tokenizer.json`` and the chat template (``chat_template.jinja``, else the one inside
        ``tokenizer_config.json``) from a tokenizer folder."""
        path = Path(tokenizer_path)
        return cls(load_tokenizer_json(path), read_chat_template(path), source=str(path))

    def _special_id(self, token: str) -> int:
        token_id = self._tokenizer.token_to_id(token)
        if token_id is None or self._added.get(token_id) != token:
            raise TemplateMismatchError(f"{self.source}: {token!r} is not a special token of this tokenizer")
        return token_id

    # -- family rules -------------------------------------------------------------------------------------------

    @staticmethod
    def thinking_disabled(chat_template_kwargs: Mapping[str, Any] | None) -> bool:
        """True when the template's ``enable_thinking is false`` test holds (the boolean False only)."""
        return bool(chat_template_kwargs) and chat_template_kwargs.get("enable_thinking") is False

    @abc.abstractmethod
    def thinking_prefix(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        """What the generation prompt adds after the assistant header (pinned per family)."""

    @abc.abstractmethod
    def generation_prompt(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        """The pinned generation prompt: the assistant header plus the thinking prefix."""

    def generation_prompt_ids(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> tuple[int, ...]:
        """Token ids of :meth:`generation_prompt` (cached per kwargs)."""
        key = _kwargs_key(self._template_kwargs(chat_template_kwargs))
        ids = self._gen_prompt_ids.get(key)
        if ids is None:
            ids = tuple(self.encode_text(self.generation_prompt(chat_template_kwargs)))
            self._gen_prompt_ids[key] = ids
        return ids

    # -- text <-> ids ---------------------------------------------------------------------------------------------

    def encode_text(self, text: str) -> list[int]:
        """Tokenize rendered text (special-token strings become special tokens; no BOS/EOS added).

        The tokenizer normalizes to NFC, so ``decode(encode_text(t)) == unicodedata.normalize("NFC", t)``.
        """
        # ``encode_batch_fast``: the ids of ``encode`` (tests/proxy/test_gil_free_encode.py) without the character
        # offsets, which nothing here reads: ~10-15% less CPU on a turn's fragment, about half on a long prompt. Like
        # ``encode_batch`` it releases the GIL while the Rust code runs (``encode`` holds it for the whole call: a 10
        # MB prompt encoding in a worker thread would freeze the event loop for its ~25 s). docs/benchmarks.md.
        return self._tokenizer.encode_batch_fast([text], add_special_tokens=False)[0].ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids, special tokens included."""
        return self._tokenizer.decode(list(ids), skip_special_tokens=False)

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes one token stands for (a token may hold part of a UTF-8 character)."""
        cached = self._token_bytes.get(token_id)
        if cached is not None:
            return cached
        added = self._added.get(token_id)
        if added is not None:
            data = added.encode("utf-8")
        else:
            piece = self._tokenizer.id_to_token(token_id)
            if piece is None:
                raise ValueError(f"token id {token_id} is not in the vocabulary")
            table = _byte_decoder()
            data = bytes(table[ch] for ch in piece)
        self._token_bytes[token_id] = data
        return data

    def token_offsets(self, ids: Sequence[int]) -> list[tuple[int, int]]:
        """Byte span ``[start, end)`` of each token in the UTF-8 text of ``ids``."""
        spans, pos = [], 0
        for token_id in ids:
            size = len(self.token_bytes(token_id))
            spans.append((pos, pos + size))
            pos += size
        return spans

    # -- rendering ------------------------------------------------------------------------------------------------

    @staticmethod
    def _template_kwargs(chat_template_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
        return {k: v for k, v in (chat_template_kwargs or {}).items() if k not in RESERVED_TEMPLATE_KWARGS}

    def _render(
        self,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        chat_template_kwargs: Mapping[str, Any] | None,
        add_generation_prompt: bool,
    ) -> str:
        """Render normalized messages with the model's template; any template failure is a TEMPLATE_ERROR."""
        try:
            rendered, _ = render_jinja_template(
                conversations=[messages],
                tools=list(tools) if tools else None,
                chat_template=self._template,
                add_generation_prompt=add_generation_prompt,
                **self._template_kwargs(chat_template_kwargs),
            )
        except Exception as exc:  # the template is code from the model repository: any exception is its error
            raise TitoError.of(TitoFailureReason.TEMPLATE_ERROR, f"{type(exc).__name__}: {exc}") from None
        return rendered[0]

    def _render_skeleton(
        self, messages: list[dict[str, Any]], has_tools: bool, chat_template_kwargs: Mapping[str, Any] | None
    ) -> str:
        """The same conversation with every text replaced by a plain word (same roles, reasoning and tool calls):
        a family that masks a last-step render counts its turn markers here, where no client text can forge one."""
        skeleton = []
        for message in normalize_messages(messages):
            plain: dict[str, Any] = {"role": message["role"], "content": "x"}
            if "reasoning_content" in message:
                plain["reasoning_content"] = "x"
            if message.get("tool_calls"):
                plain["tool_calls"] = [
                    {"type": "function", "function": {"name": "f", "arguments": {}}} for _ in message["tool_calls"]
                ]
            skeleton.append(plain)
        tools = [{"type": "function", "function": {"name": "f"}}] if has_tools else None
        return self._render(skeleton, tools, chat_template_kwargs, add_generation_prompt=False)

    def render_full(
        self,
        messages: Sequence[Any],
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> str:
        """The template's text for a whole conversation; raises :class:`TitoError`."""
        try:
            normalized = normalize_messages(messages)
        except MessageError as exc:
            raise TitoError.of(TitoFailureReason.INVALID_MESSAGE, str(exc)) from None
        if not normalized:
            raise TitoError.of(TitoFailureReason.INVALID_MESSAGE, "no messages to render")
        return self._render(normalized, tools, chat_template_kwargs, add_generation_prompt)

    def encode_full(
        self,
        messages: Sequence[Any],
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """Token ids of the whole conversation, generation prompt included; raises :class:`TitoError`.

        CPU-bound and linear in the history: the proxy runs it in a worker thread for long histories.
        """
        return self.encode_text(self.render_full(messages, tools, chat_template_kwargs))

    @abc.abstractmethod
    def render_assistant(self, message: Any, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        """What a model following the template generates for ``message`` after the generation prompt, ending with
        the token that closes its turn; raises :class:`TitoError` when the template's rendering of that turn does
        not extend the generation prompt."""

    def render_assistant_after(
        self, history: Sequence[Any], message: Any, chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> str:
        """What the model generates for ``message`` as the turn after ``history``: :meth:`render_assistant`, except
        in a family whose prompt depends on the turn before (DeepSeek-V3.1 gives none after tool results)."""
        return self.render_assistant(message, chat_template_kwargs)

    # -- family hooks for the last-step build and the drift audit --------------------------------------------------

    @abc.abstractmethod
    def close_last_step_text(self, text: str, final: Mapping[str, Any]) -> str:
        """The render of a final message list (no generation prompt) cut or completed so that it ends with the
        token that closes the final assistant turn (``final``); raises ``LastStepError``."""

    @abc.abstractmethod
    def last_step_spans(
        self, ids: list[int], messages: list[dict[str, Any]], has_tools: bool, kwargs: Mapping[str, Any] | None
    ) -> list[tuple[int, int]]:
        """Token range ``[first, end)`` of what each assistant turn generated in the last-step render ``ids`` of
        ``messages`` (``kwargs``: the chat template kwargs); raises
        ``LastStepError`` when the render cannot be masked."""

    @abc.abstractmethod
    def boundary_markers(self) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
        """(text a turn boundary ends with, text a turn boundary starts with), for the drift audit."""

    # -- incremental ----------------------------------------------------------------------------------------------

    def encode_incremental(
        self,
        checkpoint_ids: Sequence[int],
        new_messages: Sequence[Any],
        *,
        prior_messages: Sequence[Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> IncrementalResult:
        """The exact tokens to append after ``checkpoint_ids`` for ``new_messages``, or a :class:`TitoFailure`.

        ``checkpoint_ids`` must end with the end-of-turn token the model generated. ``prior_messages`` (the
        messages up to and including the checkpoint's assistant turn) are optional; when given they are checked to
        end with an assistant turn and tell whether the history holds a user query. ``new_messages`` may hold any
        roles (tool results, user and system turns, assistant turns the proxy never generated); the template
        decides what is legal. Never raises for bad input.
        """
        if not checkpoint_ids or checkpoint_ids[-1] not in self.end_of_turn_ids:
            last = checkpoint_ids[-1] if checkpoint_ids else None
            return TitoFailure(
                TitoFailureReason.NOT_AT_TURN_BOUNDARY,
                f"checkpoint ends with token {last!r}, not an end-of-turn token {sorted(self.end_of_turn_ids)} "
                f"({', '.join(self.decode([t]) for t in sorted(self.end_of_turn_ids))})",
            )
        history_has_query = True
        if prior_messages is not None:
            last = prior_messages[-1] if prior_messages else None
            last_role = last.get("role") if isinstance(last, Mapping) else None
            if last_role != "assistant":
                return TitoFailure(
                    TitoFailureReason.NOT_AT_TURN_BOUNDARY,
                    f"the checkpoint's messages end with role {last_role!r}, not an assistant turn",
                )
            history_has_query = any(isinstance(m, Mapping) and m.get("role") == "user" for m in prior_messages)
        if not new_messages:
            return TitoFailure(TitoFailureReason.EMPTY_FRAGMENT, "no new messages after the checkpoint")
        try:
            normalized = normalize_messages(new_messages)
        except MessageError as exc:
            return TitoFailure(TitoFailureReason.INVALID_MESSAGE, str(exc))
        fragment = self._fragment_after(
            prior_messages, normalized, history_has_query, tools, chat_template_kwargs, checkpoint_ids[-1]
        )
        if isinstance(fragment, TitoFailure):
            return fragment
        ids = self.encode_text(fragment)
        problem = self._check_fragment_ids(ids, chat_template_kwargs)
        if problem is not None:
            return TitoFailure(TitoFailureReason.JUNCTION_MISMATCH, problem)
        return TitoFragment(ids=tuple(ids), text=fragment)

    @abc.abstractmethod
    def _fragment_after(
        self, prior_messages: Sequence[Any] | None, new_messages: list[dict[str, Any]], history_has_query: bool,
        tools: Sequence[Mapping[str, Any]] | None, chat_template_kwargs: Mapping[str, Any] | None, checkpoint_end: int,
    ) -> str | TitoFailure:
        """The fragment's text (or why there is none): :class:`TemplateTitoTokenizer` cuts it out of a synthetic
        render of the chat template; a family rendered by an official encoder reads the checkpoint's own turn from
        ``prior_messages`` (``proxy/tokenization/deepseek_encoder.py``)."""

    @abc.abstractmethod
    def _check_fragment_ids(self, ids: list[int], chat_template_kwargs: Mapping[str, Any] | None) -> str | None:
        """Why the fragment's tokens do not split at the family's junction and generation prompt (None: they do)."""

    def _render_one_turn(self, message: Any, chat_template_kwargs: Mapping[str, Any] | None) -> tuple[str, str]:
        """(the generation prompt after a one-query chat, the same chat with ``message`` as the assistant turn)."""
        try:
            normalized = normalize_message(message)
        except MessageError as exc:
            raise TitoError.of(TitoFailureReason.INVALID_MESSAGE, str(exc)) from None
        if normalized["role"] != "assistant":
            raise TitoError.of(TitoFailureReason.INVALID_MESSAGE, f"not an assistant message: {normalized['role']}")
        query = [{"role": "user", "content": ANCHOR_QUERY}]
        key = _kwargs_key(self._template_kwargs(chat_template_kwargs))
        prompt = self._query_prompts.get(key)
        if prompt is None:  # idempotent cache: the same for every turn under these kwargs
            prompt = self._query_prompts[key] = self._render(query, None, chat_template_kwargs, True)
        turn = self._render(query + [normalized], None, chat_template_kwargs, add_generation_prompt=False)
        return prompt, turn


class TemplateTitoTokenizer(TitoTokenizer):
    """A family rendered by its Jinja chat template: the fragment is cut out of a synthetic render (an anchor turn
    that stands for the checkpoint, then the new messages) after the anchor's end of turn, by the family's
    :meth:`_cut_fragment` (its junction rules)."""

    def _fragment_after(
        self, prior_messages: Sequence[Any] | None, new_messages: list[dict[str, Any]], history_has_query: bool,
        tools: Sequence[Mapping[str, Any]] | None, chat_template_kwargs: Mapping[str, Any] | None, checkpoint_end: int,
    ) -> str | TitoFailure:
        """The fragment's text: only the synthetic context is needed (:meth:`_fragment_text`)."""
        return self._fragment_text(new_messages, history_has_query, tools, chat_template_kwargs, checkpoint_end)

    def _fragment_text(
        self,
        new_messages: list[dict[str, Any]],
        history_has_query: bool,
        tools: Sequence[Mapping[str, Any]] | None,
        chat_template_kwargs: Mapping[str, Any] | None,
        checkpoint_end: int,
    ) -> str | TitoFailure:
        """Render the synthetic context and cut the fragment after the anchor's end of turn (``checkpoint_end``:
        the token the checkpoint ends with)."""
        anchor = anchor_absent_from(new_messages, tools)
        synthetic = [{"role": "user", "content": ANCHOR_QUERY}] if history_has_query else []
        synthetic.append({"role": "assistant", "content": anchor})
        try:
            text = self._render_fragment(synthetic, new_messages, tools, chat_template_kwargs)
        except TitoError as exc:
            return exc.failure
        return self._cut_fragment(text, anchor, checkpoint_end, chat_template_kwargs)

    def _render_fragment(
        self, synthetic: list[dict[str, Any]], new_messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None, chat_template_kwargs: Mapping[str, Any] | None,
    ) -> str:
        """The synthetic render (generation prompt on) of a fragment, from the shape cache when the same roles,
        fields, tools and kwargs were rendered before (``proxy/tokenization/render_cache.py``)."""
        messages = synthetic + new_messages
        return self._fragment_renders.render(
            messages, tools, self._template_kwargs(chat_template_kwargs), True, len(synthetic),
            lambda: self._render(messages, tools, chat_template_kwargs, add_generation_prompt=True),
        )

    @abc.abstractmethod
    def _cut_fragment(
        self, text: str, anchor: str, checkpoint_end: int, chat_template_kwargs: Mapping[str, Any] | None
    ) -> str | TitoFailure:
        """The fragment: what the synthetic render ``text`` holds after the end of the ``anchor`` turn, checked
        against the family's junction rules."""


def load_tokenizer_json(path: Path) -> tokenizers.Tokenizer:
    """The folder's ``tokenizer.json``, never truncating or padding."""
    tokenizer_file = path / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise FileNotFoundError(f"{path}: no tokenizer.json")
    tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_file))
    # Never truncate or pad, and never mutate the tokenizer after this point: concurrent encodes only take
    # shared borrows (a setter racing an encode is what raises "Already borrowed" in tokenizers).
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def read_chat_template(path: Path) -> str:
    """The chat template of a tokenizer folder, found where transformers looks for it."""
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = path / "tokenizer_config.json"
    if config.is_file():
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        if isinstance(template, str):
            return template
    raise FileNotFoundError(f"{path}: no chat template (chat_template.jinja or tokenizer_config.json)")
