"""DeepSeek families rendered by an official Python encoder instead of a Jinja template (DeepSeek-V4: the model's
``encoding_dsv4.py``; DeepSeek-V3.2: ``encoding_dsv32.py``).

**The encoder is code from the model's folder.** It is executed only when its SHA-256 is the pinned official one
(``ENCODER_SHA256``), loaded with importlib from the folder by path (never copied into this repository), once per
process. Any other file is refused at load time (:class:`TemplateMismatchError`), so detection never runs unverified
code.

**From an OpenAI request to the encoder's input** (SGLang 0.5.23's DeepSeek encoding path, ``serving_chat``): content
``None`` becomes ``""`` and parts are flattened (``normalize_messages``); an empty system message is put first when
the conversation does not start with one, and the request's ``tools`` ride on that first message (``tools``);
tool-call arguments are JSON text (``json.dumps``, ``ensure_ascii=False``); the encoder's ``thinking_mode`` is
``"thinking"`` when the chat template kwargs ``thinking`` (else ``enable_thinking``) is truthy, else ``"chat"``;
``drop_thinking`` (default true) and, for V4, ``reasoning_effort`` (``max``, ``high``) pass through.

**TITO.** Every assistant turn ends with ``<｜end▁of▁sentence｜>`` (the checkpoint's last token). The fragment is what
the encoder renders for the new messages with the conversation before them as its ``context`` (the encoder's own
incremental interface): the context is the checkpoint's assistant turn (from ``prior_messages``: V4 orders parallel
tool results by the order of its calls; V3.2 counts results against them), a user query before it when the history
has one, and the system message with the tools -- which is everything the encoders read of the history when
rendering later messages. The cut falls after ``<｜end▁of▁sentence｜>`` and the fragment ends with the prompt
(``<｜Assistant｜>`` + ``<think>``/``</think>``; V3.2 after tool results ``\\n\\n<think>``/``\\n\\n</think>``), both
special tokens, so its tokens are the full render's at that place.

What the model generates for a turn is what the encoder renders for it after the history (``reasoning</think>`` first
when the prompt opened ``<think>``). In thinking mode with ``drop_thinking`` and no tools, the encoders drop the
reasoning of every assistant turn before the last user message (tool results count as user messages in V4) and give
those turns ``</think>`` instead of ``<think>``: the drift audit reports ``reasoning_stripped``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import tokenizers

from proxy.tokenization.deepseek import ASSISTANT, EOS, USER, arguments_as_text, closed_at_eos
from proxy.tokenization.messages import MessageError, normalize_messages
from proxy.tokenization.results import LastStepError, TitoError, TitoFailure, TitoFailureReason
from proxy.tokenization.tito import ANCHOR, ANCHOR_QUERY, TemplateMismatchError, TitoTokenizer, load_tokenizer_json

_modules: dict[str, ModuleType] = {}
_modules_lock = threading.Lock()


def load_encoder(file: Path, sha256: str) -> ModuleType:
    """The official encoder module at ``file``, executed only when its bytes hash to ``sha256`` (cached per hash)."""
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no official encoder")
    data = file.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise TemplateMismatchError(
            f"{file}: SHA-256 {digest[:12]} is not the official encoder's ({sha256[:12]}); it is not executed"
        )
    with _modules_lock:
        module = _modules.get(digest)
        if module is None:
            spec = importlib.util.spec_from_file_location(f"dressage_encoder_{digest[:16]}", file)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            _modules[digest] = module
        return module


class EncoderTitoTokenizer(TitoTokenizer):
    """A DeepSeek family whose reference render is its official Python encoder (module docstring)."""

    ENCODER_FILE: ClassVar[str]
    #: the tokens a last-step mask is placed by: text holding one of them in a message is refused there
    TURN_MARKERS: ClassVar[tuple[str, ...]] = (ASSISTANT, EOS, USER)
    ENCODER_SHA256: ClassVar[str]
    #: the text that opens a turn the model takes after tool results, when it is not the usual prompt
    AFTER_TOOLS: ClassVar[str | None] = None
    #: the text tool results end with, right before that prompt (last-step masks find the turns after it)
    AFTER_TOOLS_MARK: ClassVar[str | None] = None

    def __init__(self, tokenizer: tokenizers.Tokenizer, encoder: ModuleType, *, source: str = "<memory>"):
        self._encoder = encoder
        super().__init__(tokenizer, "", source=source)

    @classmethod
    def from_path(cls, tokenizer_path: str | Path) -> TitoTokenizer:
        path = Path(tokenizer_path)
        encoder = load_encoder(path / cls.ENCODER_FILE, cls.ENCODER_SHA256)
        return cls(load_tokenizer_json(path), encoder, source=str(path))

    def _init_junction_tokens(self) -> None:
        self.end_of_turn_id = self._special_id(EOS)
        self.end_of_turn_ids = frozenset({self.end_of_turn_id})
        self.assistant_id = self._special_id(ASSISTANT)
        self.user_id = self._special_id(USER)

    # -- switches, prompts, the encoder call ----------------------------------------------------------------------

    @staticmethod
    def thinking_on(chat_template_kwargs: Mapping[str, Any] | None) -> bool:
        kwargs = chat_template_kwargs or {}
        return bool(kwargs.get("thinking", kwargs.get("enable_thinking")))

    def thinking_prefix(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        return self.THINK_OPEN if self.thinking_on(chat_template_kwargs) else self.THINK_CLOSE

    def generation_prompt(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        """The prompt after a user turn."""
        return ASSISTANT + self.thinking_prefix(chat_template_kwargs)

    def prompt_endings(self, chat_template_kwargs: Mapping[str, Any] | None) -> tuple[str, ...]:
        """Every text a fragment may end with: the prompt after a user turn, and after tool results."""
        prompt = self.generation_prompt(chat_template_kwargs)
        if self.AFTER_TOOLS is None:
            return (prompt,)
        return (prompt, self.AFTER_TOOLS + self.thinking_prefix(chat_template_kwargs))

    def _encoder_call(self, messages: list[dict[str, Any]], kwargs: Mapping[str, Any], context: list | None) -> str:
        """``encode_messages`` with the switches the family's encoder takes."""
        return self._encoder.encode_messages(
            messages, thinking_mode="thinking" if self.thinking_on(kwargs) else "chat", context=context,
            drop_thinking=kwargs.get("drop_thinking", True) is not False,
        )

    def _encode(self, messages: list[dict[str, Any]], kwargs: Mapping[str, Any] | None, context=None) -> str:
        try:
            return self._encoder_call(messages, self._template_kwargs(kwargs), context)
        except Exception as exc:  # the encoder is the model's code: any exception is its refusal
            raise TitoError.of(TitoFailureReason.TEMPLATE_ERROR, f"{type(exc).__name__}: {exc}") from None

    @staticmethod
    def _encoder_messages(messages: list[dict[str, Any]], tools, *, first: bool = True) -> list[dict[str, Any]]:
        """Normalized messages as the encoder takes them (module docstring); ``first``: the conversation's start
        (the system message that carries the tools)."""
        out = arguments_as_text(messages)
        if first:
            if not out or out[0]["role"] != "system":
                out.insert(0, {"role": "system", "content": ""})
            if tools:
                out[0] = {**out[0], "tools": [dict(tool) for tool in tools]}
        return out

    def _render(self, messages, tools, chat_template_kwargs, add_generation_prompt) -> str:
        text = self._encode(self._encoder_messages(messages, tools), chat_template_kwargs)
        if not add_generation_prompt and messages and messages[-1]["role"] != "assistant":
            # the one prompt the encoder ended with (stripping every ending in turn could cut the user's own text)
            ending = next((e for e in self.prompt_endings(chat_template_kwargs) if text.endswith(e)), "")
            text = text[: len(text) - len(ending)]
        return text

    def _check_template(self) -> None:
        """The encoder (hash-pinned) still gives the pinned prompt and user junction."""
        for kwargs in ({}, {"thinking": True}, {"thinking": False}):
            rendered = self._render([{"role": "user", "content": "q"}], None, kwargs, add_generation_prompt=True)
            want = USER + "u" + self.generation_prompt(kwargs)
            result = self._fragment_after(None, [{"role": "user", "content": "u"}], True, None, kwargs, 0)
            if not rendered.endswith(USER + "q" + self.generation_prompt(kwargs)) or result != want:
                raise TemplateMismatchError(f"{self.source}: the encoder's prompt or user junction is not the pinned one")

    # -- what the model generates ---------------------------------------------------------------------------------

    def render_assistant(self, message: Any, chat_template_kwargs: Mapping[str, Any] | None = None) -> str:
        return self.render_assistant_after([{"role": "user", "content": ANCHOR_QUERY}], message, chat_template_kwargs)

    def render_assistant_after(
        self, history: Sequence[Any], message: Any, chat_template_kwargs: Mapping[str, Any] | None = None
    ) -> str:
        """What the encoder renders for ``message`` after ``history`` (its prompt excluded), through ``EOS``. Both
        encoders read only the message before a turn that follows a prompt, so only that one is converted."""
        try:
            context = self._encoder_messages(normalize_messages(history[-1:]), None)
            turn = self._encoder_messages(normalize_messages([message]), None, first=False)
        except MessageError as exc:
            raise TitoError.of(TitoFailureReason.INVALID_MESSAGE, str(exc)) from None
        if turn[0]["role"] != "assistant":
            raise TitoError.of(TitoFailureReason.INVALID_MESSAGE, f"not an assistant message: {turn[0]['role']}")
        text = self._encode(turn, chat_template_kwargs, context)
        if not text.endswith(EOS):
            raise TitoError.of(TitoFailureReason.JUNCTION_MISMATCH, f"the turn does not end with {EOS!r}: {text[-40:]!r}")
        return text

    # -- the fragment ---------------------------------------------------------------------------------------------

    def _fragment_after(self, prior_messages, new_messages, history_has_query, tools, chat_template_kwargs, end):
        """The encoder's render of the new messages after a context holding what it reads of the history."""
        checkpoint_turn: dict[str, Any] = {"role": "assistant", "content": ANCHOR}
        if prior_messages:
            try:
                checkpoint_turn = normalize_messages(prior_messages[-1:])[0]
            except MessageError as exc:
                return TitoFailure(TitoFailureReason.INVALID_MESSAGE, f"the checkpoint's turn: {exc}")
        context = [{"role": "user", "content": ANCHOR_QUERY}] if history_has_query else []
        context = self._encoder_messages([*context, checkpoint_turn], tools)
        try:
            text = self._encode(self._encoder_messages(new_messages, None, first=False), chat_template_kwargs, context)
        except TitoError as exc:
            return exc.failure
        endings = self.prompt_endings(chat_template_kwargs)
        if not text.endswith(endings):
            return TitoFailure(
                TitoFailureReason.JUNCTION_MISMATCH,
                f"the new messages leave the model no turn to take: the fragment ends with {text[-60:]!r}, not a "
                f"prompt {endings}",
            )
        return text

    def _check_fragment_ids(self, ids: list[int], chat_template_kwargs: Mapping[str, Any] | None) -> str | None:
        # after tool results V3.2's "\n\n" merges with the text before it (as in the full render): there the
        # fragment must end with the thinking prefix's special token
        prompt_ids = self.generation_prompt_ids(chat_template_kwargs)
        prefix_ids = self.encode_text(self.thinking_prefix(chat_template_kwargs))
        if tuple(ids[-len(prompt_ids) :]) == prompt_ids or (self.AFTER_TOOLS and ids[-len(prefix_ids) :] == prefix_ids):
            return None
        return f"fragment tokens do not end with a prompt's tokens: ...{ids[-6:]}"

    # -- last-step and drift --------------------------------------------------------------------------------------

    def close_last_step_text(self, text: str, final: Mapping[str, Any]) -> str:
        return closed_at_eos(text)

    def turn_starts(self, ids: list[int], kwargs: Mapping[str, Any] | None) -> list[int]:
        """Index of the first generated token of every assistant turn: after ``<｜Assistant｜>`` and the thinking
        prefix the turn starts with (V3.2: also after the think token that follows tool results)."""
        prefix = self.encode_text(self.thinking_prefix(kwargs))
        after_tools = self.AFTER_TOOLS_MARK.encode() if self.AFTER_TOOLS_MARK else None
        offsets = self.token_offsets(ids) if after_tools else []
        data = b"".join(self.token_bytes(t) for t in ids) if after_tools else b""
        starts: list[int] = []
        for p, token_id in enumerate(ids):
            if token_id == self.assistant_id:
                first = p + 1
                starts.append(first + len(prefix) if ids[first : first + len(prefix)] == prefix else first)
            elif after_tools and starts and token_id in (self.think_open_id, self.think_close_id):
                # (after a first turn: V3.2's tool instructions in the system prompt quote the same markup)
                # a turn follows only when no user turn does (the encoder closes every tool block with a think token)
                if data.endswith(after_tools, 0, offsets[p][0]) and ids[p + 1 : p + 2] not in ([], [self.user_id]):
                    starts.append(p + 1)
        return starts

    def last_step_spans(
        self, ids: list[int], messages: list[dict[str, Any]], has_tools: bool, kwargs: Mapping[str, Any] | None
    ) -> list[tuple[int, int]]:
        """From each turn start (:meth:`turn_starts`) through its ``EOS``; refused when the render's turn tokens
        differ from the messages' skeleton's (special-token text inside a message)."""
        markers = tuple(self._special_id(marker) for marker in self.TURN_MARKERS)
        skeleton = self.encode_text(self._render_skeleton(messages, has_tools, kwargs))
        if [t for t in ids if t in markers] != [t for t in skeleton if t in markers]:
            raise LastStepError("the render's turn tokens differ from its skeleton's: a message holds special-token text")
        spans = []
        for first in self.turn_starts(ids, kwargs):
            try:
                spans.append((first, ids.index(self.end_of_turn_id, first) + 1))
            except ValueError:
                raise LastStepError(f"an assistant turn is not closed by {EOS!r}") from None
        return spans

    def boundary_markers(self) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
        markers = tuple(marker.encode() for marker in (EOS, USER, ASSISTANT))
        return markers, markers


class DeepSeekV4TitoTokenizer(EncoderTitoTokenizer):
    """DeepSeek-V4: ``encoding_dsv4.py``; tool results become ``<tool_result>`` blocks of a user turn."""

    family = "deepseek_v4"
    ENCODER_FILE = "encoding_dsv4.py"
    ENCODER_SHA256 = "bdbd57c132a1b3725042323d02b98b9d1df28e5f388f134399555d041f5055e0"

    def _encoder_call(self, messages, kwargs, context) -> str:
        # reasoning_effort passes through: the encoder itself refuses anything but max, high or none
        return self._encoder.encode_messages(
            messages, thinking_mode="thinking" if self.thinking_on(kwargs) else "chat", context=context,
            drop_thinking=kwargs.get("drop_thinking", True) is not False,
            reasoning_effort=kwargs.get("reasoning_effort"),
        )


class DeepSeekV32TitoTokenizer(EncoderTitoTokenizer):
    """DeepSeek-V3.2: ``encoding_dsv32.py`` (from SGLang 0.5.23's wheel, ``serving/tokenizer_files.py``); tool
    results follow the calling turn as ``<function_results>`` and the model continues after ``\n\n<think>`` (or
    ``</think>``) without a header; a thinking turn after the last user message must carry reasoning or tool calls,
    and every call must have its result before the model is prompted again (the encoder's own rules)."""

    family = "deepseek_v3_2"
    ENCODER_FILE = "encoding_dsv32.py"
    ENCODER_SHA256 = "c9da7a1638f77df97e07dd538c5439cee9f3cb04a8e4d9fbf7d74410d9e46c41"
    AFTER_TOOLS = "\n\n"
    AFTER_TOOLS_MARK = "</function_results>\n\n"
