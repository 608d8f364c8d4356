"""``POST /v1/responses``: the request body, translated into a chat-completions body (the proxy's one conversation
model) plus the few Responses options the answer needs.

:func:`read_responses_body` validates the Responses-only fields here, with the Responses names in every error, and
leaves the rest (sampling ranges, tool schemas, message shapes) to ``ChatCompletionRequest.from_http``, which the
route calls on :attr:`ResponsesBody.chat` (its errors name the chat fields; :func:`responses_error` renames them).

| Responses field | becomes |
|---|---|
| ``input`` (string or items) | the chat ``messages`` after the stored conversation of ``previous_response_id`` (``responses_items.py``) |
| ``instructions`` | a leading ``system`` message (not carried over from a previous response, as in OpenAI's API) |
| ``system`` / ``developer`` messages | the leading ones joined into the first system message; a later one a ``system`` message in its place, or ``user`` where the template refuses that (``template_probe.py``) |
| ``tools`` (``type: function``; ``namespace`` groups of them) | chat function tools (a namespace's flattened; its calls carry the namespace); hosted tools (web search, file search, computer, ...) are ``unsupported_parameter`` |
| ``tool_choice`` | ``none`` / ``auto`` / ``required`` / ``{"type": "function", "name"}`` |
| ``max_output_tokens`` | ``max_completion_tokens`` |
| ``reasoning.effort`` | ``reasoning_effort`` (``reasoning.summary`` also puts the reasoning text in the item's ``summary``) |
| ``text.format`` | ``response_format`` (text, json_object, json_schema) |
| ``temperature``, ``top_p``, ``parallel_tool_calls``, ``top_logprobs`` | the same chat fields |
| the chat extensions ``session_id``, ``instance_id``, ``turn_id``, ``seed``, ``top_k``, ``min_p``, ``presence_penalty``, ``frequency_penalty``, ``repetition_penalty``, ``chat_template_kwargs``, ``response_mask`` | the same chat fields (``docs/api.md``, chat request body) |
| ``include: ["message.output_text.logprobs"]`` | ``logprobs: true`` |
| ``stream``, ``store``, ``previous_response_id`` | handled by the route (``proxy/routes/responses.py``) |
| ``text.verbosity`` | accepted and ignored (a hint; the Agents SDK's default model sends ``low``) |
| ``metadata``, ``user``, ``safety_identifier``, ``prompt_cache_key``, ``prompt_cache_retention``, ``service_tier`` (``auto``/``default``), ``truncation`` (``disabled``/``auto``), ``stream_options`` | accepted, change nothing |
| ``background`` (true), ``conversation``, ``prompt``, ``max_tool_calls``, ``context_management`` | ``unsupported_parameter`` naming the field (an answer would not be what the client asked for) |
| anything else (e.g. Codex CLI's ``client_metadata``) | ignored, as the chat route ignores unknown fields |
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from proxy.api.errors import ApiError
from proxy.api.fields import json_type, optional_bool, optional_str, require_object, shown
from proxy.frontends.responses_items import items_to_messages, merge_leading_system, objects_of

#: ``include`` values the proxy honours; any other is refused by name
LOGPROBS_INCLUDE = "message.output_text.logprobs"
ENCRYPTED_INCLUDE = "reasoning.encrypted_content"
IGNORED_INCLUDES = frozenset({"message.input_image.image_url", "computer_call_output.output.image_url"})
#: fields read and passed on to the chat body under the same name: OpenAI's, then the proxy's chat extensions
#: (session identity, SGLang sampling extras, template kwargs, the client's loss mask of the new messages)
CHAT_FIELDS = ("model", "temperature", "top_p", "parallel_tool_calls", "top_logprobs", "session_id", "instance_id",
               "turn_id", "seed", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
               "chat_template_kwargs", "response_mask")
#: field -> values accepted besides null (they ask for nothing the proxy lacks)
DEFAULT_ONLY = {
    "service_tier": ("auto", "default"),
    "truncation": ("disabled", "auto"),  # the proxy never truncates; "auto" only allows it
    "background": (False,),
}
#: Responses features the proxy cannot serve: refused when set (name -> why)
UNSERVED = {
    "conversation": "conversations are not stored; send the history in input or use previous_response_id",
    "prompt": "stored prompt templates are not served",
    "max_tool_calls": "a cap on built-in tool calls does not apply (function tools only)",
    "context_management": "server-side compaction is not served",
}
#: the keys of a Responses function tool that the chat tool's ``function`` takes
FUNCTION_TOOL_KEYS = ("name", "description", "parameters", "strict")


@attrs.frozen
class ResponsesBody:
    """A validated Responses request: the chat body to run and what the answer echoes or needs."""

    #: the chat-completions body without its ``messages`` (:meth:`conversation` gives them)
    chat: dict[str, Any]
    #: the chat messages of ``input`` alone (what is stored after the previous conversation)
    input_messages: list[dict[str, Any]]
    instructions: str | None
    stream: bool
    store: bool
    previous_response_id: str | None
    logprobs: bool
    encrypted_reasoning: bool
    reasoning_summary: bool
    #: tool name -> the ``namespace`` tool that declared it (its calls carry that namespace)
    namespaces: dict[str, str]
    #: the Response object's echo of the request (tools, tool_choice, reasoning, text, ...)
    echo: dict[str, Any]

    def conversation(self, history: list[dict[str, Any]], inner_system_role: str = "system") -> list[dict[str, Any]]:
        """The chat messages to run after ``history`` (a previous response's conversation): the instructions as a
        system message, the history, the new input; leading system messages merged (``merge_leading_system``),
        later ones given ``inner_system_role`` (``user`` where the template takes system messages only first:
        ``proxy/frontends/template_probe.py``)."""
        system = [{"role": "system", "content": self.instructions}] if self.instructions else []
        messages = merge_leading_system(system + history + self.input_messages)
        return [{**message, "role": inner_system_role} if index and message["role"] == "system" else message
                for index, message in enumerate(messages)]


def read_responses_body(body: Any) -> ResponsesBody:
    """Validate a parsed JSON body (anything at all); raises ``ApiError`` (4xx) and nothing else."""
    body = require_object(body)
    _refuse_unserved(body)
    instructions = optional_str(body, "instructions")
    input_messages = _input(body.get("input"))
    include = _include(body.get("include"))
    logprobs = LOGPROBS_INCLUDE in include or bool(body.get("top_logprobs"))
    chat: dict[str, Any] = {key: body[key] for key in CHAT_FIELDS if body.get(key) is not None}
    tools, namespaces = _tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    if body.get("max_output_tokens") is not None:
        chat["max_completion_tokens"] = body["max_output_tokens"]
    effort, summary = _reasoning(body.get("reasoning"))
    if effort is not None:
        chat["reasoning_effort"] = effort
    response_format = _text_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    if logprobs:
        chat["logprobs"] = True
    stream = bool(optional_bool(body, "stream"))
    # The front end always reads the chat answer as a stream (one translation for both: responses_stream.py).
    chat["stream"] = True
    chat["stream_options"] = {"include_usage": True}
    store = optional_bool(body, "store")
    return ResponsesBody(
        chat=chat,
        input_messages=input_messages,
        instructions=instructions,
        stream=stream,
        store=True if store is None else store,
        previous_response_id=optional_str(body, "previous_response_id") or None,
        logprobs=logprobs,
        encrypted_reasoning=ENCRYPTED_INCLUDE in include,
        reasoning_summary=summary is not None,
        namespaces=namespaces,
        echo=_echo(body),
    )


def _refuse_unserved(body: dict[str, Any]) -> None:
    """``unsupported_parameter`` for a Responses feature the proxy cannot serve, when set; unknown fields are
    ignored (as the chat route ignores them: clients add their own, e.g. Codex CLI's ``client_metadata``)."""
    for name, accepted in DEFAULT_ONLY.items():
        value = body.get(name)
        if value is not None and not any(type(value) is type(ok) and value == ok for ok in accepted):
            raise ApiError.unsupported_parameter(
                f"{name} {shown(value)} is not supported by this proxy; leave it out", name
            )
    for name, why in UNSERVED.items():
        value = body.get(name)
        if value is not None and value != [] and value != {}:
            raise ApiError.unsupported_parameter(f"{name} is not supported: {why}; leave it out", name)


def _input(value: Any) -> list[dict[str, Any]]:
    # Absent input is legal (a previous response's conversation may be all there is); an empty conversation is
    # then refused by the chat layer (``messages must not be empty``, reported as ``input``).
    return [] if value is None else items_to_messages(value)


def _include(value: Any) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(entry, str) for entry in value):
        raise ApiError.invalid_request(f"include must be an array of strings, not {json_type(value)}", "include")
    for entry in value:
        if entry not in (LOGPROBS_INCLUDE, ENCRYPTED_INCLUDE) and entry not in IGNORED_INCLUDES:
            raise ApiError.unsupported_parameter(
                f"include {shown(entry)} is not supported; the proxy offers {LOGPROBS_INCLUDE} and "
                f"{ENCRYPTED_INCLUDE}", "include",
            )
    return frozenset(value)


def _tools(value: Any) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The chat function tools, and the namespace of each tool declared inside a ``namespace`` tool (a group of
    function tools: flattened here, the namespace written back on its calls)."""
    if value is None:
        return [], {}
    if not isinstance(value, list):
        raise ApiError.invalid_request(f"tools must be an array, not {json_type(value)}", "tools")
    tools: list[dict[str, Any]] = []
    namespaces: dict[str, str] = {}
    for where, tool in objects_of(value, "tools"):
        if tool.get("type") != "namespace":
            tools.append(_function_tool(tool, where))
            continue
        name, inner = tool.get("name"), tool.get("tools")
        if not isinstance(name, str) or not name:
            raise ApiError.invalid_request(f"{where}.name must be a non-empty string", f"{where}.name")
        if not isinstance(inner, list):
            raise ApiError.invalid_request(f"{where}.tools must be an array, not {json_type(inner)}", f"{where}.tools")
        for at, member in objects_of(inner, f"{where}.tools"):
            tools.append(_function_tool(member, at))
            namespaces[tools[-1]["function"]["name"]] = name
    return tools, namespaces


def _function_tool(tool: dict[str, Any], where: str) -> dict[str, Any]:
    kind = tool.get("type")
    if kind != "function":
        raise ApiError.unsupported_parameter(
            f"{where} is a {shown(kind)} tool: this proxy serves function tools only (hosted tools such as "
            "web_search, file_search, computer_use, code_interpreter, image_generation, mcp, local_shell and "
            "custom tools are not available)", f"{where}.type",
        )
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise ApiError.invalid_request(f"{where}.name must be a non-empty string", f"{where}.name")
    return {"type": "function", "function": {key: tool[key] for key in FUNCTION_TOOL_KEYS if tool.get(key) is not None}}


def _tool_choice(value: Any) -> Any:
    if isinstance(value, str):
        return value  # none / auto / required (the chat layer refuses anything else)
    if isinstance(value, dict) and value.get("type") == "function":
        return {"type": "function", "function": {"name": value.get("name")}}
    if isinstance(value, dict):
        raise ApiError.unsupported_parameter(
            f"tool_choice of type {shown(value.get('type'))} is not supported: use none, auto, required or "
            '{"type": "function", "name": ...}', "tool_choice",
        )
    raise ApiError.invalid_request(f"tool_choice must be a string or an object, not {json_type(value)}", "tool_choice")


def _reasoning(value: Any) -> tuple[Any, Any]:
    """``(effort, summary)`` of ``reasoning`` (``generate_summary`` is the older name of ``summary``)."""
    if value is None:
        return None, None
    if not isinstance(value, dict):
        raise ApiError.invalid_request(f"reasoning must be an object, not {json_type(value)}", "reasoning")
    return value.get("effort"), value.get("summary") or value.get("generate_summary")


def _text_format(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ApiError.invalid_request(f"text must be an object, not {json_type(value)}", "text")
    # ``text.verbosity`` is accepted and ignored: a hint to the model the served model has no control for, which
    # the Agents SDK's default model settings send (``low``): refusing it would refuse that SDK out of the box.
    form = value.get("format")
    if form is None:
        return None
    if not isinstance(form, dict):
        raise ApiError.invalid_request(f"text.format must be an object, not {json_type(form)}", "text.format")
    kind = form.get("type")
    if kind in ("text", "json_object"):
        return {"type": kind}
    if kind == "json_schema":
        schema = {key: form[key] for key in ("name", "schema", "strict", "description") if key in form}
        return {"type": "json_schema", "json_schema": schema}
    raise ApiError.invalid_request(
        f"text.format.type must be text, json_object or json_schema, not {shown(kind)}", "text.format.type"
    )


def _echo(body: dict[str, Any]) -> dict[str, Any]:
    """What the Response object repeats of its request (OpenAI's fields, with their defaults)."""
    reasoning = body.get("reasoning") if isinstance(body.get("reasoning"), dict) else {}
    return {
        "instructions": body.get("instructions"),
        "tools": body.get("tools") or [],  # as given (validated: function and namespace tools)
        "tool_choice": body.get("tool_choice") if body.get("tool_choice") is not None else "auto",
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "top_logprobs": body.get("top_logprobs"),
        "max_output_tokens": body.get("max_output_tokens"),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "text": body.get("text") or {"format": {"type": "text"}},
        "metadata": body.get("metadata") or {},
        "store": body.get("store") is not False,
        "truncation": body.get("truncation") or "disabled",
        "user": body.get("user"),
    }


#: chat field names in the chat layer's error messages -> the Responses request's names
_CHAT_NAMES = (("max_completion_tokens", "max_output_tokens"), ("reasoning_effort", "reasoning.effort"),
               ("response_format", "text.format"), (".function.", "."))


def responses_error(error: ApiError) -> ApiError:
    """An error of ``ChatCompletionRequest.from_http`` on the translated body, in the Responses request's terms
    (a chat message index is not an input item index: ``messages[i]`` becomes ``input``)."""
    message = re.sub(r"\bmessages(\[\d+\])?", "input", error.message)
    for chat, responses in _CHAT_NAMES:
        message = message.replace(chat, responses)
    return ApiError(error.status, error.code, message, responses_param(error.param), error.type,
                    details=error.details, headers=error.headers)


def responses_param(param: str | None) -> str | None:
    """A chat field name of an error (from ``ChatCompletionRequest.from_http`` on the translated body) in the
    Responses request's terms."""
    if param is None:
        return None
    for chat, responses in (("messages", "input"), ("max_completion_tokens", "max_output_tokens"),
                            ("reasoning_effort", "reasoning.effort"), ("response_format", "text.format"),
                            ("logprobs", "include")):
        if param == chat or param.startswith(chat + "[") or param.startswith(chat + "."):
            return responses if chat == "messages" else responses + param[len(chat):]
    return param.replace(".function.", ".") if param.startswith("tools[") else param


__all__ = ["ResponsesBody", "read_responses_body", "responses_error", "responses_param"]
