"""``POST /v1/chat/completions``: the request body and headers, validated into one frozen value.

:meth:`ChatCompletionRequest.from_http` takes the parsed JSON body (anything at all) and the request headers and
returns a :class:`ChatCompletionRequest`, or raises :class:`~proxy.api.errors.ApiError` (4xx): never another
exception, whatever the body. Unknown fields are ignored (their names are kept in ``ignored_fields`` for logs).

Three parts of the request have modules of their own: who it belongs to (:mod:`proxy.api.session_identity`: the
session, instance and turn ids from headers and body), its ``messages`` (:mod:`proxy.api.chat_messages`: roles,
content, tool calls) and its ``tools`` and ``tool_choice`` (:mod:`proxy.api.chat_tools`). This module reads the
rest, puts them together, and maps the sampling fields onto SGLang's.

Body fields:

| field | accepted | becomes |
|---|---|---|
| ``model`` | string, optional | ``model`` (``None`` when absent or ``""``: the app answers with the served model's name) |
| ``messages`` | non-empty array of messages (:mod:`proxy.api.chat_messages`) | ``messages``: a tuple of fresh, cleaned dicts |
| ``tools`` | array of ``{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}`` | ``tools`` (``None`` when absent or ``[]``); names non-empty and unique |
| ``tool_choice`` | ``"none"``, ``"auto"``, ``"required"``, ``{"type": "function", "function": {"name"}}`` | :class:`~proxy.api.chat_tools.ToolChoice` (``None``: ``auto``) |
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

from proxy.api.chat_messages import messages_from_json
from proxy.api.chat_tools import ToolChoice, tools_from_json
from proxy.api.constraints import ResponseFormat, conflict_error, is_forcing
from proxy.api.constraints import constraint_params as build_constraint_params
from proxy.api.errors import ApiError
from proxy.api.fields import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    check_json,
    field_path,
    json_type,
    optional_bool,
    optional_float,
    optional_int,
    optional_str,
    require_object,
    shown,
)
from proxy.api.session_identity import (
    DEFAULT_SESSION_ID_SOURCES,
    INSTANCE_HEADER,
    TURN_HEADER,
    SessionIdSources,
    header_map,
    read_optional_id,
    read_session_id,
)

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
    #: (Idempotency-Key, body fingerprint) the chat route claimed for this request: journaled with the step it
    #: commits (``proxy/controllers/idempotency.py``); None without a key
    idempotency: tuple[str, str] | None = None

    @classmethod
    def from_http(
        cls, body: Any, headers: Mapping[str, str], session_ids: SessionIdSources = DEFAULT_SESSION_ID_SOURCES, *,
        tool_call_type: str = DEFAULT_TOOL_CALL_TYPE, max_messages: int | None = None,
    ) -> ChatCompletionRequest:
        """Validate a parsed JSON body and the request headers (the session id read from ``session_ids``); raises
        ``ApiError`` (4xx) and nothing else. More than ``max_messages`` messages (``--max-messages``; None: any
        number) is ``too_many_messages``, checked before anything else in the body.

        ``tool_call_type`` is the served model's tool-call format (``qwen25`` or ``qwen3_coder``): the
        constrained-decoding parameters depend on it, as in SGLang."""
        body = require_object(body)
        if max_messages is not None and isinstance(messages := body.get("messages"), list) \
                and len(messages) > max_messages:
            raise ApiError.too_many_messages(len(messages), max_messages)
        header = header_map(headers)
        session_id, source = read_session_id(body, header, session_ids)
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
        tools = tools_from_json(body.get("tools"))
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
            instance_id=read_optional_id(body, header, INSTANCE_HEADER, "instance_id"),
            turn_id=read_optional_id(body, header, TURN_HEADER, "turn_id"),
            model=model or None,
            messages=messages_from_json(body.get("messages")),
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


# -- budgets, stop, mask ----------------------------------------------------------------------------------------------



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


__all__ = ["DEFAULT_TOOL_CALL_TYPE", "MAX_CHOICES", "UNSERVED_PARAMETERS", "ChatCompletionRequest"]
