"""``POST /v1/chat/completions``: the request body and headers, validated into one frozen value.

:meth:`ChatCompletionRequest.from_http` takes the parsed JSON body (anything at all) and the request headers and
returns a :class:`ChatCompletionRequest`, or raises :class:`~proxy.api.errors.ApiError` (4xx): never another
exception, whatever the body. Unknown fields are ignored (their names are kept in ``ignored_fields`` for logs).

Session identity (spec 3.1). Header names are matched case-insensitively; blank values count as absent.

| field | from | rule |
|---|---|---|
| ``session_id`` | the :class:`SessionIdSources`: by default the ``X-Session-Id`` header, else body ``session_id``, else the ``X-SMG-Routing-Key`` header | required: ``missing_session_id`` (400, ``param`` the first header) |
| ``instance_id`` | ``X-Instance-Id`` header, else body ``instance_id`` | optional |
| ``turn_id`` | ``X-Turn-Id`` header, else body ``turn_id`` | optional |

Ids are strings (or integers, turned into strings) of 1-256 printable ASCII characters (see :mod:`proxy.api.fields`).

Body fields:

| field | accepted | becomes |
|---|---|---|
| ``model`` | string, optional | ``model`` (``None`` when absent or ``""``: the app answers with the served model's name) |
| ``messages`` | non-empty array of messages (below) | ``messages``: a tuple of fresh, cleaned dicts |
| ``tools`` | array of ``{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}`` | ``tools`` (``None`` when absent or ``[]``); names non-empty and unique |
| ``tool_choice`` | ``"none"``, ``"auto"``, ``"required"``, ``{"type": "function", "function": {"name"}}`` | :class:`ToolChoice` (``None``: ``auto``) |
| ``parallel_tool_calls`` | boolean | ``parallel_tool_calls`` (default true) |
| ``response_format`` | ``{"type": "text"}``, ``{"type": "json_object"}``, ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"?}}`` | :class:`~proxy.api.constraints.ResponseFormat` |
| ``temperature`` | number in [0, 2] | ``temperature`` |
| ``top_p`` | number in (0, 1] (SGLang refuses 0) | ``top_p`` |
| ``top_k``, ``min_p``, ``presence_penalty``, ``frequency_penalty``, ``repetition_penalty`` | SGLang sampling extras: int >= -1 (0 refused); [0, 1]; [-2, 2]; [-2, 2]; (0, 2] | same names |
| ``max_tokens``, ``max_completion_tokens`` | integer in [1, 2**31-1] | ``max_tokens`` (see the conflict rule) |
| ``stop`` | string or array of non-empty strings | ``stop``: tuple (``None`` when absent or empty) |
| ``seed`` | integer in [0, 2**63-1] | ``seed`` (SGLang ``sampling_seed``; negative seeds are refused rather than sent to a gateway that may not take them) |
| ``n`` | integer in [1, :data:`MAX_CHOICES`] | ``n`` (< 1: ``invalid_request``; above the cap: ``unsupported_parameter``) |
| ``logit_bias`` | object: token id (decimal string) -> number in [-100, 100] | ``logit_bias``: keys canonical (``"007"`` is ``"7"``; the same token twice is refused), ``None`` when absent or empty |
| ``reasoning_effort`` | ``none``, ``minimal``, ``low``, ``medium``, ``high``, ``xhigh``, ``ultra``, ``max``, or a number in [0, 0.99] (SGLang's set) | merged into ``chat_template_kwargs`` as SGLang does (below) |
| ``stream``, ``stream_options.include_usage`` | booleans | ``stream``, ``include_usage`` |
| ``stream_options.include_obfuscation`` | boolean | accepted, nothing to do (the proxy never pads chunks) |
| ``stream_options.continuous_usage_stats`` | (SGLang: usage in every chunk) | ``true``: ``unsupported_parameter`` |
| ``logprobs``, ``top_logprobs`` | boolean; integer in [0, 20], > 0 only with ``logprobs: true`` (as OpenAI) | ``logprobs``, ``top_logprobs`` |
| ``chat_template_kwargs`` | object | ``chat_template_kwargs`` (``None`` when absent) |
| ``return_token_ids`` | boolean (extension) | ``return_token_ids``: ``None`` means "the server flag decides" |
| ``response_mask`` | array of 0/1 integers (extension) | ``response_mask`` tuple; its length is checked against the context fragment later (422) |
| ``functions``, ``function_call`` | (legacy function calling) | ``unsupported_parameter``: use ``tools`` and ``tool_choice`` |
| ``audio``, ``prediction``, ``web_search_options``; ``modalities``, ``service_tier``, ``store``, ``verbosity`` | absent or ``null``; also OpenAI's default (``["text"]``; ``"auto"`` or ``"default"``; ``false``; ``"medium"``) | anything else: ``unsupported_parameter`` naming the field (:data:`UNSERVED_PARAMETERS`) |

Decisions:

- **Conflicting ``max_tokens`` and ``max_completion_tokens``**: ``max_completion_tokens`` wins (it is OpenAI's
  current name; SGLang and vLLM resolve it the same way), so clients that send both never fail. Neither: ``None``,
  meaning "up to the context window" (SGLang's chat semantics).
- **Roles**: system, user, assistant, tool. ``developer`` (OpenAI's newer name for system instructions) becomes
  ``system``: the chat templates know no developer role. The legacy ``function`` role is ``unsupported_parameter``;
  any other role is ``invalid_request``.
- **Content**: a string; an array of text parts (``{"type": "text", "text": ...}``, ``type`` may be omitted),
  rebuilt as ``[{"type": "text", "text": ...}]`` (extra part keys such as ``cache_control`` dropped); or ``null``
  / absent, for assistant messages only. Image, audio and file parts are ``unsupported_parameter`` naming the part:
  the proxy serves text-only models and records text tokens.
- **Assistant messages** keep ``content``, ``name``, ``reasoning_content`` (the aliases ``reasoning`` and
  ``thinking`` are read in that order and stored as ``reasoning_content``) and ``tool_calls``. A tool call needs a
  non-empty ``function.name``; ``type`` must be ``"function"`` when present (custom tools are unsupported);
  ``id`` is optional. ``arguments`` may be a JSON string or an object and is kept as given (missing means
  ``"{}"``); a string must parse to a JSON object (blank means ``{}``), because the chat templates need an object,
  and that object must be valid Unicode like the body itself (no ``\\ud800`` escape of a lone surrogate inside it).
- **Tool messages** keep ``content``, ``tool_call_id`` (optional: the Qwen templates do not render it) and ``name``.
- **Unknown tools**: the request layer checks tool names only for ``tool_choice`` (a named choice must name a
  declared tool; ``required`` or a named choice without tools is refused). Tool calls in the history may name
  tools that are no longer declared (a session's tools may change): they are recorded as given.
- **Tool choice and response format** behave as in SGLang 0.5.23's OpenAI server (:mod:`proxy.api.constraints`
  has the references): ``none`` renders the template without tools and parses no tool calls
  (:attr:`ChatCompletionRequest.template_tools`, :attr:`ChatCompletionRequest.parse_tools`); a named choice
  renders that tool alone; ``required``, a named choice, ``auto`` with a ``strict`` tool, and ``response_format``
  ``json_object`` / ``json_schema`` constrain decoding (:attr:`ChatCompletionRequest.constraint_params`, computed
  here for the server's tool-call format). ``required`` or a named choice together with a ``response_format``
  that constrains is refused (400, SGLang's message).
- **OpenAI parameters the proxy cannot honour** are refused (400 ``unsupported_parameter`` naming the field) when
  set to anything but their default, never silently ignored: an answer would not be what the client asked for.
  Labels and provider hints that change nothing in the answer (``user``, ``metadata``, ``safety_identifier``,
  ``prompt_cache_key``, ``prompt_cache_retention``) are ignored, as SGLang ignores them, and so are unknown fields
  (SGLang's own extensions included): they appear in ``ignored_fields``.
- **``reasoning_effort``** as SGLang (``protocol.py``: ``normalize_reasoning_inputs``; ``serving_chat.py``: the
  template's ``reasoning_effort``): the effective ``chat_template_kwargs`` are ``{"reasoning_effort": effort}``,
  updated with the request's own ``chat_template_kwargs``, with ``thinking`` and ``enable_thinking`` defaulting to
  ``effort != "none"``. They are the trie's context like any template kwargs.
- **``n > 1``**: the step is answered with ``n`` choices, each a generation of its own (see
  ``proxy/controllers/choices.py``); the cap keeps one request from holding more than 16 generation slots.

:meth:`ChatCompletionRequest.to_sampling_params` maps the sampling fields onto SGLang's ``sampling_params`` (the
one place that mapping lives).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from proxy.api.constraints import ResponseFormat, conflict_error, is_forcing
from proxy.api.constraints import constraint_params as build_constraint_params
from proxy.api.errors import DEFAULT_SESSION_ID_HEADERS, ApiError
from proxy.api.fields import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    check_json,
    field_path,
    identifier,
    json_type,
    optional_bool,
    optional_float,
    optional_identifier,
    optional_int,
    optional_str,
    require_object,
    require_valid_unicode,
    shown,
)

#: the roles a message may have after ``developer`` became ``system``
ROLES = frozenset({"system", "user", "assistant", "tool"})
#: assistant reasoning field names, in the order they are read
REASONING_ALIASES = ("reasoning_content", "reasoning", "thinking")
#: content-part types that are valid OpenAI input but not text
NON_TEXT_PARTS = frozenset({"image_url", "input_image", "image", "input_audio", "audio", "file", "input_file"})
#: the largest ``top_logprobs`` OpenAI accepts
MAX_TOP_LOGPROBS = 20
#: the most choices (``n``) one request may ask for: each is a generation of its own (a gate slot, an upstream request)
MAX_CHOICES = 16
#: the largest absolute ``logit_bias`` value (OpenAI's range is [-100, 100])
MAX_LOGIT_BIAS = 100.0
#: the ``reasoning_effort`` tiers SGLang 0.5.23 accepts (OpenAI's, plus ``ultra`` and ``max``: protocol.py
#: ``ReasoningEffortTier``); SGLang also takes a number in [0, 0.99]
REASONING_EFFORTS = frozenset({"none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max"})
#: OpenAI chat-completions parameters the proxy cannot honour: name -> (the values accepted besides null: OpenAI's
#: defaults, which ask for nothing the proxy lacks; why any other value is refused)
UNSERVED_PARAMETERS: dict[str, tuple[tuple[Any, ...], str]] = {
    "audio": ((), "audio output is not served (text-only models)"),
    "modalities": ((["text"],), "only text output is served"),
    "prediction": ((), "predicted outputs are not served"),
    "web_search_options": ((), "web search is not served"),
    "service_tier": (("auto", "default"), "the proxy has a single service tier"),
    "store": ((False,), "stored completions are not served (the proxy records trajectories: POST /trajectory/read)"),
    "verbosity": (("medium",), "verbosity control is not served"),
}

ROUTING_KEY_HEADER = "x-smg-routing-key"
INSTANCE_HEADER = "x-instance-id"
TURN_HEADER = "x-turn-id"

#: the tool-call format whose SGLang constraints are built when the caller names none (the qwen3 build model's)
DEFAULT_TOOL_CALL_TYPE = "qwen25"

# The body fields this module reads; every other top-level key is reported in ``ignored_fields``.
_READ_FIELDS = frozenset(
    {
        "model", "messages", "tools", "tool_choice", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
        "frequency_penalty", "repetition_penalty", "max_tokens", "max_completion_tokens", "stop", "seed", "n",
        "stream", "stream_options", "logprobs", "top_logprobs", "chat_template_kwargs", "return_token_ids",
        "response_mask", "session_id", "instance_id", "turn_id", "functions", "function_call", "logit_bias",
        "reasoning_effort", "parallel_tool_calls", "response_format", *UNSERVED_PARAMETERS,
    }
)


@attrs.frozen
class SessionIdSources:
    """Where a request's session id is read, in precedence order: each of ``headers``, then the body field
    ``body_field`` (None: never), then the gateway's ``X-SMG-Routing-Key`` header. The proxy's
    ``--session-id-header`` (repeatable) and ``--session-id-body-field`` set them; the default is spec 3.1's order.
    An operator whose agents send their own ``X-Session-Id`` puts its own header first."""

    headers: tuple[str, ...] = attrs.field(default=DEFAULT_SESSION_ID_HEADERS, converter=tuple)
    body_field: str | None = "session_id"

    def __attrs_post_init__(self) -> None:
        if not self.headers:
            raise ValueError("a session id needs at least one header to be read from")


DEFAULT_SESSION_ID_SOURCES = SessionIdSources()


@attrs.frozen
class ToolChoice:
    """The request's ``tool_choice``: ``mode`` is none, auto, required or function (then ``name`` is set)."""

    mode: str
    name: str | None = None

    @classmethod
    def from_json(cls, value: Any, tool_names: frozenset[str]) -> ToolChoice | None:
        if value is None:
            return None
        if isinstance(value, str):
            if value not in ("none", "auto", "required"):
                raise ApiError.invalid_request(
                    f"tool_choice must be 'none', 'auto', 'required' or a function object, not {shown(value)}",
                    "tool_choice",
                )
            if value == "required" and not tool_names:
                raise ApiError.invalid_request("tool_choice 'required' needs tools", "tool_choice")
            return cls(value)
        if not isinstance(value, dict):
            raise ApiError.invalid_request(
                f"tool_choice must be a string or an object, not {json_type(value)}", "tool_choice"
            )
        kind = value.get("type")
        if kind is not None and kind != "function":
            raise ApiError.unsupported_parameter(
                f"tool_choice of type {shown(kind)} is not supported; use a function choice", "tool_choice.type"
            )
        function = value.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise ApiError.invalid_request("tool_choice.function.name must be a non-empty string", "tool_choice")
        if name not in tool_names:
            raise ApiError.invalid_request(
                f"tool_choice names the function {shown(name, 128)}, which is not in tools", "tool_choice"
            )
        return cls("function", name)


@attrs.frozen
class ChatCompletionRequest:
    """One validated chat-completions request (see the module docstring for every field's rule).

    ``messages``, ``tools`` and ``chat_template_kwargs`` hold plain JSON dicts (what the tokenizer and the prefix
    trie read); treat them as read-only.
    """

    session_id: str
    #: where the session id came from: "header" (X-Session-Id), "body" (session_id) or "routing_key"
    session_id_source: str
    instance_id: str | None
    turn_id: str | None
    model: str | None
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None
    #: the constrained-decoding keys of ``sampling_params`` (``json_schema`` or ``structural_tag``), as SGLang
    #: 0.5.23's OpenAI server builds them for tool_choice and response_format (see proxy.api.constraints)
    constraint_params: dict[str, str] = attrs.field(factory=dict)
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    #: the completion budget asked for (max_completion_tokens, else max_tokens); None: up to the context window
    max_tokens: int | None = None
    stop: tuple[str, ...] | None = None
    seed: int | None = None
    #: how many choices to answer with (each a generation of its own)
    n: int = 1
    #: token id (canonical decimal string, as SGLang takes it) -> bias; None when absent or empty
    logit_bias: dict[str, float] | None = None
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    #: the effective template kwargs (``reasoning_effort`` merged in, as SGLang does)
    chat_template_kwargs: dict[str, Any] | None = None
    #: None: the server's flag decides whether the token extension fields are returned
    return_token_ids: bool | None = None
    response_mask: tuple[int, ...] | None = None
    #: top-level body keys that were not read (unknown or deliberately ignored), sorted
    ignored_fields: tuple[str, ...] = ()

    @classmethod
    def from_http(
        cls, body: Any, headers: Mapping[str, str], session_ids: SessionIdSources = DEFAULT_SESSION_ID_SOURCES, *,
        tool_call_type: str = DEFAULT_TOOL_CALL_TYPE,
    ) -> ChatCompletionRequest:
        """Validate a parsed JSON body and the request headers (the session id read from ``session_ids``); raises
        ``ApiError`` (4xx) and nothing else.

        ``tool_call_type`` is the served model's tool-call format (``qwen25`` or ``qwen3_coder``): the
        constrained-decoding parameters depend on it, as in SGLang."""
        body = require_object(body)
        header = _header_reader(headers)
        session_id, source = _session_id(body, header, session_ids)
        for legacy in ("functions", "function_call"):
            if body.get(legacy) is not None:
                raise ApiError.unsupported_parameter(
                    f"{legacy} (legacy function calling) is not supported; use tools and tool_choice", legacy
                )
        _refuse_unserved(body)
        n = optional_int(body, "n", INT64_MIN, INT64_MAX)
        if n is not None and n < 1:
            raise ApiError.invalid_request(f"n must be at least 1, not {n}", "n")
        if n is not None and n > MAX_CHOICES:
            raise ApiError.unsupported_parameter(f"n must be at most {MAX_CHOICES} here, not {n}", "n")
        tools = _tools(body.get("tools"))
        tool_names = frozenset(tool["function"]["name"] for tool in tools or ())
        logprobs = bool(optional_bool(body, "logprobs"))
        top_logprobs = optional_int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS) or 0
        if top_logprobs and not logprobs:
            raise ApiError.invalid_request("top_logprobs needs logprobs: true", "top_logprobs")
        stream_options = body.get("stream_options")
        if stream_options is not None and not isinstance(stream_options, dict):
            raise ApiError.invalid_request(
                f"stream_options must be an object, not {json_type(stream_options)}", "stream_options"
            )
        include_usage = _stream_options(stream_options or {})
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise ApiError.invalid_request(
                f"chat_template_kwargs must be an object, not {json_type(kwargs)}", "chat_template_kwargs"
            )
        kwargs = _with_reasoning_effort(check_json(kwargs, "chat_template_kwargs"), body.get("reasoning_effort"))
        model = optional_str(body, "model")
        top_k = optional_int(body, "top_k", -1, INT32_MAX)
        if top_k == 0:
            raise ApiError.invalid_request("top_k must be -1 (all tokens) or at least 1, not 0", "top_k")
        tool_choice = ToolChoice.from_json(body.get("tool_choice"), tool_names)
        parallel_tool_calls = optional_bool(body, "parallel_tool_calls")
        parallel_tool_calls = True if parallel_tool_calls is None else parallel_tool_calls
        response_format = ResponseFormat.from_json(body.get("response_format"))
        mode, name = (tool_choice.mode, tool_choice.name) if tool_choice is not None else (None, None)
        if is_forcing(mode) and response_format is not None and response_format.constrains:
            raise conflict_error()
        constraints = build_constraint_params(
            tools, mode, name, response_format, parallel_tool_calls=parallel_tool_calls, tool_call_type=tool_call_type
        )
        return cls(
            session_id=session_id,
            session_id_source=source,
            instance_id=_optional_id(body, header, INSTANCE_HEADER, "instance_id"),
            turn_id=_optional_id(body, header, TURN_HEADER, "turn_id"),
            model=model or None,
            messages=_messages(body.get("messages")),
            tools=tools,
            tool_choice=tool_choice,
            parallel_tool_calls=parallel_tool_calls,
            response_format=response_format,
            constraint_params=constraints,
            temperature=optional_float(body, "temperature", 0.0, 2.0),
            top_p=optional_float(body, "top_p", 0.0, 1.0, low_open=True),
            top_k=top_k,
            min_p=optional_float(body, "min_p", 0.0, 1.0),
            presence_penalty=optional_float(body, "presence_penalty", -2.0, 2.0),
            frequency_penalty=optional_float(body, "frequency_penalty", -2.0, 2.0),
            repetition_penalty=optional_float(body, "repetition_penalty", 0.0, 2.0, low_open=True),
            max_tokens=_max_tokens(body),
            stop=_stop(body.get("stop")),
            seed=optional_int(body, "seed", 0, INT64_MAX),
            n=n or 1,
            logit_bias=_logit_bias(body.get("logit_bias")),
            stream=bool(optional_bool(body, "stream")),
            include_usage=bool(include_usage),
            logprobs=logprobs,
            top_logprobs=top_logprobs,
            chat_template_kwargs=kwargs,
            return_token_ids=optional_bool(body, "return_token_ids"),
            response_mask=_response_mask(body.get("response_mask")),
            ignored_fields=tuple(sorted(key for key in body if isinstance(key, str) and key not in _READ_FIELDS)),
        )

    def to_sampling_params(
        self, max_new_tokens: int | None, *, temperature_override: float | None = None, choice_index: int = 0
    ) -> dict:
        """SGLang ``sampling_params`` for this request (spec 11; ``sglang-protocol.md`` 1.2), for its choice
        ``choice_index`` (``n > 1``: each choice is a request of its own, sent with ``n`` left out, meaning 1).

        ``max_new_tokens`` is the budget the caller computed (the request's ``max_tokens``, clamped to the context
        window unless ``--no-dynamic-max-tokens``); it is always sent, ``None`` as an explicit ``null`` ("until the
        context ends": an omitted key would mean SGLang's default of 128). ``temperature_override`` is
        ``--rollout-temperature``. Only fields the client set are sent: temperature, top_p, top_k, min_p,
        presence_penalty, frequency_penalty, repetition_penalty, stop (a list), sampling_seed (from ``seed``), all
        within the gateway's whitelist, and logit_bias (as SGLang's OpenAI server forwards it; the gateway ``smg``
        drops it, sglang-protocol.md 4.2); then the constrained-decoding keys of ``tool_choice`` /
        ``response_format`` (:attr:`constraint_params`: ``json_schema``, or ``structural_tag``, which ``smg`` 1.13
        drops).

        With a ``seed``, choice ``i`` is sent ``sampling_seed = (seed + i) mod 2**63``: SGLang 0.5.23 copies one
        ``sampling_seed`` into every parallel sample of a request (tokenizer_manager.py ``_handle_batch_request``),
        so under deterministic inference, the mode in which it honours the seed, the ``n`` samples are the same
        tokens (sgl-project/sglang#28805 proposes ``seed + i``, as here); choice 0 gets the seed itself, so
        ``n = 1`` is unchanged.
        """
        params: dict[str, Any] = {"max_new_tokens": max_new_tokens}
        temperature = temperature_override if temperature_override is not None else self.temperature
        seed = self.seed if self.seed is None or not choice_index else (self.seed + choice_index) % (INT64_MAX + 1)
        for key, value in (
            ("temperature", temperature),
            ("top_p", self.top_p),
            ("top_k", self.top_k),
            ("min_p", self.min_p),
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
            ("repetition_penalty", self.repetition_penalty),
            ("stop", list(self.stop) if self.stop else None),
            ("sampling_seed", seed),
            ("logit_bias", dict(self.logit_bias) if self.logit_bias else None),
        ):
            if value is not None:
                params[key] = value
        params.update(self.constraint_params)
        return params

    @property
    def template_tools(self) -> tuple[dict[str, Any], ...] | None:
        """The tools the chat template renders, i.e. what the model is offered (SGLang 0.5.23, serving_chat.py
        ``_process_messages`` L1858-1873): none for ``tool_choice: "none"``, only the named tool for a named
        choice, else all of them. This, not ``tools``, is the session's context (a change starts a segment)."""
        choice = self.tool_choice
        if self.tools is None or choice is None:
            return self.tools
        if choice.mode == "none":
            return None
        if choice.mode == "function":
            return tuple(tool for tool in self.tools if tool["function"]["name"] == choice.name)
        return self.tools

    def tool_choice_unmet(self, call_names: Iterable[str]) -> bool:
        """Whether an answer with calls to ``call_names`` misses what ``required`` (a call) or a named choice
        (a call to that tool) asked for. SGLang answers such an output as parsed (text, no calls, finish_reason
        stop) and logs a warning (serving_chat.py ``_process_tool_calls`` L3218-3226); so does the proxy."""
        choice = self.tool_choice
        if choice is None or not is_forcing(choice.mode):
            return False
        names = list(call_names)
        return not names if choice.mode == "required" else choice.name not in names

    @property
    def parse_tools(self) -> tuple[dict[str, Any], ...] | None:
        """The tools whose calls are parsed from the output: none for ``tool_choice: "none"`` (SGLang runs no
        tool-call parser then, serving_chat.py ``_tool_call_parsing_active`` L1080-1092), else every declared
        tool (also for a named choice, as SGLang)."""
        if self.tool_choice is not None and self.tool_choice.mode == "none":
            return None
        return self.tools

    def wants_token_ids(self, server_default: bool) -> bool:
        """Whether the response carries the token extension fields (the request's flag, else the server's)."""
        return server_default if self.return_token_ids is None else self.return_token_ids


# -- OpenAI parameters: unserved ones, stream options, reasoning effort, logit bias -------------------------------------


def _refuse_unserved(body: dict[str, Any]) -> None:
    """``unsupported_parameter`` for the first OpenAI parameter the proxy cannot honour, set to a non-default value."""
    for name, (accepted, why) in UNSERVED_PARAMETERS.items():
        value = body.get(name)
        if value is None or any(type(value) is type(ok) and value == ok for ok in accepted):
            continue
        allowed = " or ".join(json.dumps(ok) for ok in accepted)
        raise ApiError.unsupported_parameter(
            f"{name} is not supported: {why}; leave it out" + (f" or send {allowed}" if allowed else ""), name
        )


def _stream_options(options: dict[str, Any]) -> bool:
    """``include_usage``; ``include_obfuscation`` is accepted (no chunk is ever padded), SGLang's
    ``continuous_usage_stats`` refused (usage comes once, in the final usage chunk)."""
    include_usage = optional_bool(options, "include_usage", "stream_options.include_usage")
    optional_bool(options, "include_obfuscation", "stream_options.include_obfuscation")
    if optional_bool(options, "continuous_usage_stats", "stream_options.continuous_usage_stats"):
        raise ApiError.unsupported_parameter(
            "stream_options.continuous_usage_stats is not supported: usage comes in the final usage chunk "
            "(stream_options.include_usage)",
            "stream_options.continuous_usage_stats",
        )
    return bool(include_usage)


def _with_reasoning_effort(kwargs: dict[str, Any] | None, effort: Any) -> dict[str, Any] | None:
    """The effective template kwargs: ``reasoning_effort`` merged in as SGLang does (module docstring)."""
    if effort is None:
        return kwargs
    if isinstance(effort, str):
        if effort not in REASONING_EFFORTS:
            raise ApiError.invalid_request(
                f"reasoning_effort must be one of {', '.join(sorted(REASONING_EFFORTS))} or a number in [0, 0.99], "
                f"not {shown(effort)}",
                "reasoning_effort",
            )
    else:
        effort = optional_float({"reasoning_effort": effort}, "reasoning_effort", 0.0, 0.99)
    thinking = effort != "none"
    merged: dict[str, Any] = {"reasoning_effort": effort, **(kwargs or {})}
    merged.setdefault("thinking", thinking)
    merged.setdefault("enable_thinking", thinking)
    return merged


def _logit_bias(value: Any) -> dict[str, float] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ApiError.invalid_request(
            f"logit_bias must be an object mapping token ids to numbers, not {json_type(value)}", "logit_bias"
        )
    out: dict[str, float] = {}
    for key, bias in value.items():
        if not isinstance(key, str):  # only from a caller that did not parse JSON
            raise ApiError.invalid_request(f"logit_bias has a non-string key {shown(key)}", "logit_bias")
        param = field_path("logit_bias", key) if len(key) <= 64 else "logit_bias"
        if not (key.isascii() and key.isdigit() and len(key) <= 10 and int(key) <= INT32_MAX):
            raise ApiError.invalid_request(
                f"logit_bias keys must be token ids (non-negative decimal integers), not {shown(key)}", param
            )
        token = str(int(key))
        if token in out:
            raise ApiError.invalid_request(f"logit_bias gives token {token} twice", param)
        number = optional_float(value, key, -MAX_LOGIT_BIAS, MAX_LOGIT_BIAS, param=param)
        if number is None:
            raise ApiError.invalid_request(f"{param} must be a number in [-100, 100], not null", param)
        out[token] = number
    return out or None


# -- headers and ids ---------------------------------------------------------------------------------------------------


def _header_reader(headers: Mapping[str, str] | Any) -> dict[str, str]:
    """The headers by lower-cased name (first value wins); works for dicts and werkzeug ``Headers``."""
    out: dict[str, str] = {}
    items: Iterable[Any] = headers.items() if hasattr(headers, "items") else headers or ()
    for pair in items:
        if isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], str):
            value = pair[1].strip()
            if value:
                out.setdefault(pair[0].lower(), value)
    return out


def _session_id(body: dict[str, Any], header: Mapping[str, str], sources: SessionIdSources) -> tuple[str, str]:
    """The first session id of ``sources`` present (a blank header counts as absent), and where it came from."""
    for name in sources.headers:
        if name.lower() in header:
            return identifier(header[name.lower()], name), "header"
    if sources.body_field is not None:
        value = body.get(sources.body_field)
        if value is not None and value != "":
            return identifier(value, sources.body_field), "body"
    if ROUTING_KEY_HEADER in header:
        return identifier(header[ROUTING_KEY_HEADER], "X-SMG-Routing-Key"), "routing_key"
    raise ApiError.missing_session_id(sources.headers, sources.body_field)


def _optional_id(body: dict[str, Any], header: Mapping[str, str], header_name: str, key: str) -> str | None:
    if header_name in header:
        return identifier(header[header_name], "-".join(part.capitalize() for part in header_name.split("-")))
    return optional_identifier(body, key)


# -- messages ----------------------------------------------------------------------------------------------------------


def _messages(value: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list):
        raise ApiError.invalid_request(f"messages must be an array, not {json_type(value)}", "messages")
    if not value:
        raise ApiError.invalid_request("messages must not be empty", "messages")
    return tuple(_message(message, f"messages[{index}]") for index, message in enumerate(value))


def _message(message: Any, where: str) -> dict[str, Any]:
    if not isinstance(message, dict):
        raise ApiError.invalid_request(f"{where} must be an object, not {json_type(message)}", where)
    role = message.get("role")
    if role == "developer":
        role = "system"
    elif role == "function":
        raise ApiError.unsupported_parameter(
            f"{where}: the legacy function role is not supported; use tool messages", f"{where}.role"
        )
    elif not isinstance(role, str) or role not in ROLES:
        raise ApiError.invalid_request(
            f"{where}.role must be one of system, developer, user, assistant, tool, not {shown(role)}", f"{where}.role"
        )
    out: dict[str, Any] = {"role": role, "content": _content(message.get("content"), f"{where}.content", role)}
    name = optional_str(message, "name", f"{where}.name")
    if name is not None:
        out["name"] = name
    if role == "tool":
        call_id = optional_str(message, "tool_call_id", f"{where}.tool_call_id")
        if call_id is not None:
            out["tool_call_id"] = call_id
    elif role == "assistant":
        for alias in REASONING_ALIASES:
            reasoning = message.get(alias)
            if reasoning is None:
                continue
            if not isinstance(reasoning, str):
                raise ApiError.invalid_request(
                    f"{where}.{alias} must be a string, not {json_type(reasoning)}", f"{where}.{alias}"
                )
            out["reasoning_content"] = reasoning
            break
        calls = message.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise ApiError.invalid_request(
                    f"{where}.tool_calls must be an array, not {json_type(calls)}", f"{where}.tool_calls"
                )
            if calls:
                out["tool_calls"] = [_tool_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls)]
    return out


def _content(content: Any, where: str, role: str) -> str | list[dict[str, str]] | None:
    if isinstance(content, str):
        return content
    if content is None:
        if role == "assistant":
            return None
        raise ApiError.invalid_request(f"{where} is required for a {role} message", where)
    if not isinstance(content, list):
        raise ApiError.invalid_request(
            f"{where} must be a string or an array of text parts, not {json_type(content)}", where
        )
    parts = []
    for index, part in enumerate(content):
        param = f"{where}[{index}]"
        if not isinstance(part, dict):
            raise ApiError.invalid_request(f"{param} must be a content-part object, not {json_type(part)}", param)
        kind = part.get("type")
        if kind is None:
            kind = "text"
        if isinstance(kind, str) and kind in NON_TEXT_PARTS:
            raise ApiError.unsupported_parameter(
                f"{param} is a {kind} part: this proxy serves text-only models; send text parts only", param
            )
        if kind != "text":
            raise ApiError.invalid_request(f"{param} has an unknown content-part type {shown(kind)}", f"{param}.type")
        text = part.get("text")
        if not isinstance(text, str):
            raise ApiError.invalid_request(f"{param}.text must be a string, not {json_type(text)}", f"{param}.text")
        parts.append({"type": "text", "text": text})
    return parts


def _tool_call(call: Any, where: str) -> dict[str, Any]:
    if not isinstance(call, dict):
        raise ApiError.invalid_request(f"{where} must be an object, not {json_type(call)}", where)
    kind = call.get("type")
    if kind is not None and kind != "function":
        raise ApiError.unsupported_parameter(
            f"{where} has type {shown(kind)}; only function tool calls are supported", f"{where}.type"
        )
    function = call.get("function")
    if not isinstance(function, dict):
        raise ApiError.invalid_request(
            f"{where}.function must be an object, not {json_type(function)}", f"{where}.function"
        )
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ApiError.invalid_request(f"{where}.function.name must be a non-empty string", f"{where}.function.name")
    arguments = _arguments(function.get("arguments"), f"{where}.function.arguments")
    out: dict[str, Any] = {}
    call_id = optional_str(call, "id", f"{where}.id")
    if call_id is not None:
        out["id"] = call_id
    out["type"] = "function"
    out["function"] = {"name": name, "arguments": arguments}
    return out


def _arguments(arguments: Any, where: str) -> str | dict[str, Any]:
    if arguments is None:
        return "{}"
    if isinstance(arguments, dict):
        return check_json(arguments, where)
    if not isinstance(arguments, str):
        raise ApiError.invalid_request(
            f"{where} must be a JSON string or an object, not {json_type(arguments)}", where
        )
    if arguments.strip():
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):
            raise ApiError.invalid_request(f"{where} is not valid JSON", where) from None
        if not isinstance(parsed, dict):
            raise ApiError.invalid_request(f"{where} must encode a JSON object, not {json_type(parsed)}", where)
        _require_unicode_arguments(parsed, where)
    return arguments


def _require_unicode_arguments(parsed: dict[str, Any], where: str) -> None:
    """The object an arguments string encodes is what the chat template renders: a ``\\ud800`` escape inside the
    string (valid text itself) would decode to a lone surrogate there and fail the tokenizer (a 500). Refused like
    a lone surrogate anywhere in the body (``proxy.api.fields``), naming the arguments field."""
    try:
        require_valid_unicode(parsed, where)
    except ApiError as exc:
        raise ApiError.invalid_request(
            f"{where} encodes a string that is not valid Unicode (at {exc.param}: a JSON escape of a lone UTF-16 "
            "surrogate); every string must be valid Unicode",
            where,
        ) from None


# -- tools, budgets, stop, mask ----------------------------------------------------------------------------------------


def _tools(value: Any) -> tuple[dict[str, Any], ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise ApiError.invalid_request(f"tools must be an array, not {json_type(value)}", "tools")
    seen: set[str] = set()
    tools = []
    for index, tool in enumerate(value):
        where = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise ApiError.invalid_request(f"{where} must be an object, not {json_type(tool)}", where)
        kind = tool.get("type")
        if kind is not None and kind != "function":
            raise ApiError.unsupported_parameter(
                f"{where} has type {shown(kind)}; only function tools are supported", f"{where}.type"
            )
        function = tool.get("function")
        if not isinstance(function, dict):
            raise ApiError.invalid_request(
                f"{where}.function must be an object, not {json_type(function)}", f"{where}.function"
            )
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError.invalid_request(
                f"{where}.function.name must be a non-empty string", f"{where}.function.name"
            )
        if name in seen:
            raise ApiError.invalid_request(f"{where}: the tool name {shown(name, 128)} is declared twice", where)
        seen.add(name)
        optional_str(function, "description", f"{where}.function.description")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise ApiError.invalid_request(
                f"{where}.function.parameters must be a JSON-schema object, not {json_type(parameters)}",
                f"{where}.function.parameters",
            )
        tools.append(check_json(tool, where))
    return tuple(tools) or None


def _max_tokens(body: dict[str, Any]) -> int | None:
    completion = optional_int(body, "max_completion_tokens", 1, INT32_MAX)
    legacy = optional_int(body, "max_tokens", 1, INT32_MAX)
    return completion if completion is not None else legacy


def _stop(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list):
        raise ApiError.invalid_request(f"stop must be a string or an array of strings, not {json_type(value)}", "stop")
    for index, item in enumerate(values):
        if not isinstance(item, str) or not item:
            raise ApiError.invalid_request(f"stop[{index}] must be a non-empty string", "stop")
    return tuple(values) or None


def _response_mask(value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise ApiError.invalid_request(
            f"response_mask must be an array of 0/1 integers, not {json_type(value)}", "response_mask"
        )
    # type() rather than isinstance(): true/false are not mask entries.
    if not all(type(entry) is int and (entry == 0 or entry == 1) for entry in value):
        raise ApiError.invalid_request("response_mask must hold only the integers 0 and 1", "response_mask")
    return tuple(value)


__all__ = ["DEFAULT_SESSION_ID_SOURCES", "ChatCompletionRequest", "SessionIdSources", "ToolChoice"]
