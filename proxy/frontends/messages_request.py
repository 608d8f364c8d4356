"""``POST /v1/messages`` (Anthropic Messages API): the request body translated into a chat-completions body.

:func:`chat_body` takes the parsed JSON body (anything at all) and returns the equivalent body of
``POST /v1/chat/completions`` (a dict), which ``ChatCompletionRequest.from_http`` then validates like any chat
request: the proxy has ONE internal conversation model, and nothing below the front end knows which protocol a
request came in. Every problem is an :class:`~proxy.api.errors.ApiError` (4xx) naming the field by its path in the
Anthropic body (``messages[2].content[0].tool_use_id``); ``proxy/frontends/messages_errors.py`` renders it in
Anthropic's error shape. Content blocks, tools, ``tool_choice`` and ``thinking`` are checked against the SDK's own
types (``anthropic.types``, through pydantic) before they are translated.

| Anthropic | chat |
|---|---|
| ``model`` (string, required) | ``model`` |
| ``max_tokens`` (integer >= 1, required; 0, Anthropic's cache pre-warm, is refused) | ``max_tokens`` |
| ``system``: string or text blocks | a first ``system`` message (blocks joined with a blank line) |
| a ``system`` message inside ``messages`` (Claude Code sends one after the first user message) | a ``system`` message in its place, or a ``user`` message where the served template takes system messages only first (``inner_system_role``) |
| user ``text`` blocks (consecutive ones joined with a blank line) | a ``user`` message |
| user ``tool_result`` block (string or text-block ``content``; ``is_error`` accepted) | a ``tool`` message, ``tool_call_id`` = ``tool_use_id`` |
| assistant ``text`` blocks | ``content`` (concatenated as they are: the pieces of one recorded text; ``null`` when there are none) |
| assistant ``tool_use`` block | a ``tool_calls`` entry: the same ``id``, ``function.name``, ``function.arguments`` = ``input`` |
| assistant ``thinking`` block with this proxy's ``signature`` | ``reasoning_content``: the reasoning the signature carries (the block's displayed text is not read: it is empty under ``display: "omitted"``) |
| assistant ``thinking`` block signed elsewhere, ``redacted_thinking`` block | dropped (another model's reasoning) |
| ``tools`` (custom tools: ``name``, ``description``, ``input_schema``, ``strict``) | ``tools`` (function tools) |
| ``tool_choice`` ``auto`` / ``any`` / ``tool`` / ``none``; ``disable_parallel_tool_use`` | ``auto`` / ``required`` / named / ``none``; ``parallel_tool_calls: false`` |
| ``thinking`` ``{"type": "enabled", "budget_tokens"}`` or ``adaptive`` / ``disabled`` | ``chat_template_kwargs.enable_thinking`` true / false (absent: the template's default) |
| ``stop_sequences``, ``temperature`` ([0, 1]), ``top_p``, ``top_k`` | ``stop``, ``temperature``, ``top_p``, ``top_k`` |
| ``stream`` | ``stream`` with ``stream_options.include_usage`` |
| ``session_id``, ``instance_id``, ``turn_id``, ``chat_template_kwargs`` (the proxy's own body fields) | the same (``thinking`` sets ``enable_thinking`` over the kwargs) |

Decisions:

- **Echo rule.** What a client echoes of an answer (its ``thinking``, ``text`` and ``tool_use`` blocks) becomes
  exactly the assistant message the proxy recorded: reasoning from the thinking block, content from the text
  block, tool calls with the same ids and arguments. So a multi-turn conversation continues its checkpoint (one
  segment).
- **Thinking signatures.** The proxy signs its thinking blocks (``messages_output.thinking_signature``: the
  reasoning and a hash of it). A thinking block whose signature is not this proxy's carries another model's reasoning (a
  conversation begun with a real Claude model), which the served template must not render as its own; it is dropped,
  as are ``redacted_thinking`` blocks, which this proxy never produces. Dropping reasoning never breaks the
  trajectory: reasoning is not part of the session trie's message key (``docs/sessions.md``).
- **Server tools** (``web_search_*``, ``bash_*``, ``code_execution_*``, ``text_editor_*``, ``computer_*``, ...,
  any tool with a ``type`` other than ``custom``) and non-text content (images, documents, search results) are
  400 ``unsupported_parameter``: the proxy serves a text model and executes nothing.
- **A final assistant message** (Anthropic's prefill) is refused: the chat templates start a new assistant turn
  after it, so the answer would not continue it.
- **Ignored**: ``metadata``, ``cache_control`` (top level and on blocks), ``service_tier``, ``context_management``
  (server-side context editing: the proxy records the full history), ``inference_geo``, ``speed``,
  ``diagnostics``, ``output_config.effort``, ``citations`` on text blocks, ``thinking.budget_tokens`` (the
  thinking switch is the template's; thinking counts toward ``max_tokens`` as in Anthropic's API), and unknown
  fields. ``thinking.display: "omitted"`` (Claude Code's) is honoured by the answer (:func:`shows_thinking`).
  ``output_config.format``, ``container`` and ``mcp_servers`` change what the answer would be and are refused.
"""

from __future__ import annotations

from typing import Any

import anthropic.types as sdk
from pydantic import TypeAdapter, ValidationError

from proxy.api.errors import ApiError
from proxy.api.fields import INT32_MAX, json_type, optional_bool, optional_float, optional_int, require_object, shown
from proxy.frontends.messages_output import reasoning_from_signature

#: how consecutive text blocks of one message (and the blocks of ``system``) are joined into one string
BLOCK_SEPARATOR = "\n\n"
#: the proxy's own body fields, passed on to the chat body as they are (``proxy/api/session_identity.py``)
PASSED_FIELDS = ("session_id", "instance_id", "turn_id")
#: top-level fields whose non-null value asks for something the proxy cannot do
REFUSED_FIELDS = {
    "container": "code-execution containers are not served (the proxy executes no tools)",
    "mcp_servers": "server-side MCP servers are not served (the proxy executes no tools)",
}

_BLOCKS = {
    "text": TypeAdapter(sdk.TextBlockParam),
    "tool_use": TypeAdapter(sdk.ToolUseBlockParam),
    "tool_result": TypeAdapter(sdk.ToolResultBlockParam),
    "thinking": TypeAdapter(sdk.ThinkingBlockParam),
    "redacted_thinking": TypeAdapter(sdk.RedactedThinkingBlockParam),
}
_TOOL = TypeAdapter(sdk.ToolParam)
# The members of the SDK's unions, by their "type" (a union would report an error for every member).
_TOOL_CHOICES = {
    "auto": TypeAdapter(sdk.ToolChoiceAutoParam),
    "any": TypeAdapter(sdk.ToolChoiceAnyParam),
    "tool": TypeAdapter(sdk.ToolChoiceToolParam),
    "none": TypeAdapter(sdk.ToolChoiceNoneParam),
}
_THINKING = {
    "enabled": TypeAdapter(sdk.ThinkingConfigEnabledParam),
    "adaptive": TypeAdapter(sdk.ThinkingConfigAdaptiveParam),
    "disabled": TypeAdapter(sdk.ThinkingConfigDisabledParam),
}
_METADATA = TypeAdapter(sdk.MetadataParam)


def chat_body(body: Any, *, require_max_tokens: bool = True, inner_system_role: str = "system") -> dict[str, Any]:
    """The chat-completions body equivalent to the Messages body ``body`` (``require_max_tokens=False``: the
    ``count_tokens`` body, which has none). ``inner_system_role`` is the role a system message inside ``messages``
    becomes: ``system`` where the served template renders one anywhere (Qwen3), ``user`` where it refuses a system
    message after the first (Qwen3.5: "System message must be at the beginning"): kept in its place either way, so
    the conversation's prefix never changes (folding it into the system prompt would rewrite the prompt's start
    whenever one more came)."""
    body = require_object(body)
    out: dict[str, Any] = {}
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError.invalid_request(f"model: a non-empty string is required, not {shown(model)}", "model")
    out["model"] = model
    max_tokens = optional_int(body, "max_tokens", 0, INT32_MAX)
    if max_tokens is None and require_max_tokens:
        raise ApiError.invalid_request("max_tokens: Field required", "max_tokens")
    if max_tokens == 0 and require_max_tokens:
        raise ApiError.unsupported_parameter(
            "max_tokens: 0 (prompt-cache pre-warming) is not served; ask for at least 1 token", "max_tokens"
        )
    if max_tokens:
        out["max_tokens"] = max_tokens
    for name, why in REFUSED_FIELDS.items():
        if body.get(name) is not None:
            raise ApiError.unsupported_parameter(f"{name}: {why}", name)
    output_config = body.get("output_config")
    if isinstance(output_config, dict) and output_config.get("format") is not None:
        raise ApiError.unsupported_parameter(
            "output_config.format (structured outputs) is not served on /v1/messages", "output_config.format"
        )
    if body.get("metadata") is not None:
        _validated(_METADATA, body["metadata"], "metadata")
    messages = _system(body.get("system"))
    messages.extend(_messages(body.get("messages"), inner_system_role))
    out["messages"] = messages
    tools = body.get("tools")
    if tools is not None:
        out["tools"] = _tools(tools)
    choice = body.get("tool_choice")
    if choice is not None:
        out["tool_choice"], parallel = _tool_choice(choice)
        if parallel is False:
            out["parallel_tool_calls"] = False
    kwargs = body.get("chat_template_kwargs")  # the proxy's extension, as on the chat path
    if kwargs is not None:
        out["chat_template_kwargs"] = dict(kwargs) if isinstance(kwargs, dict) else kwargs
    thinking = body.get("thinking")
    if thinking is not None:
        config = _validated(_member(_THINKING, thinking, "thinking"), thinking, "thinking")
        enabled = config["type"] != "disabled"
        out["chat_template_kwargs"] = {**(out.get("chat_template_kwargs") or {}), "enable_thinking": enabled}
    stop = body.get("stop_sequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(item, str) for item in stop):
            raise ApiError.invalid_request("stop_sequences must be an array of strings", "stop_sequences")
        if stop:
            out["stop"] = stop
    temperature = optional_float(body, "temperature", 0.0, 1.0)
    if temperature is not None:
        out["temperature"] = temperature
    for name in ("top_p", "top_k"):
        if body.get(name) is not None:
            out[name] = body[name]  # the chat validation checks them (and names them)
    if optional_bool(body, "stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    for name in PASSED_FIELDS:
        if name in body:
            out[name] = body[name]
    return out


def shows_thinking(body: dict[str, Any]) -> bool:
    """Whether the answer shows its thinking text: not when ``thinking.display`` is ``"omitted"`` (the block is
    still sent, its text empty, its signature carrying the reasoning)."""
    thinking = body.get("thinking")
    return not (isinstance(thinking, dict) and thinking.get("display") == "omitted")


# -- system and messages -----------------------------------------------------------------------------------------------


def _system(system: Any) -> list[dict[str, Any]]:
    if system is None:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}] if system else []
    if not isinstance(system, list):
        raise ApiError.invalid_request(
            f"system must be a string or an array of text blocks, not {json_type(system)}", "system"
        )
    texts = [_block(block, f"system[{index}]", ("text",))["text"] for index, block in enumerate(system)]
    return [{"role": "system", "content": BLOCK_SEPARATOR.join(texts)}] if texts else []


def _messages(value: Any, inner_system_role: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise ApiError.invalid_request(f"messages must be an array, not {json_type(value)}", "messages")
    if not value:
        raise ApiError.invalid_request("messages: at least one message is required", "messages")
    out: list[dict[str, Any]] = []
    for index, message in enumerate(value):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise ApiError.invalid_request(f"{where} must be an object, not {json_type(message)}", where)
        role = message.get("role")
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        elif not isinstance(content, list):
            raise ApiError.invalid_request(
                f"{where}.content must be a string or an array of content blocks, not {json_type(content)}",
                f"{where}.content",
            )
        if role == "user":
            out.extend(_user_messages(content, f"{where}.content"))
        elif role == "system":
            texts = [_block(block, f"{where}.content[{i}]", ("text",))["text"] for i, block in enumerate(content)]
            out.append({"role": inner_system_role, "content": BLOCK_SEPARATOR.join(texts)})
        elif role == "assistant":
            if index == len(value) - 1:
                raise ApiError.unsupported_parameter(
                    f"{where}: a final assistant message (prefill) is not supported: the answer would not continue "
                    "it; end with a user message",
                    where,
                )
            out.append(_assistant_message(content, f"{where}.content"))
        else:
            raise ApiError.invalid_request(
                f"{where}.role must be user, assistant or system, not {shown(role)}", f"{where}.role"
            )
    return out


def _user_messages(content: list[Any], where: str) -> list[dict[str, Any]]:
    """A user turn: each ``tool_result`` a tool message, each run of text blocks a user message, in order."""
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for index, raw in enumerate(content):
        block = _block(raw, f"{where}[{index}]", ("text", "tool_result"))
        if block["type"] == "text":
            texts.append(block["text"])
            continue
        if texts:
            out.append({"role": "user", "content": BLOCK_SEPARATOR.join(texts)})
            texts = []
        out.append({
            "role": "tool", "tool_call_id": block["tool_use_id"],
            "content": _tool_result_text(raw.get("content"), f"{where}[{index}].content"),
        })
    if texts or not out:
        out.append({"role": "user", "content": BLOCK_SEPARATOR.join(texts)})
    return out


def _tool_result_text(content: Any, where: str) -> str:
    """A tool result's content as text (``is_error`` adds nothing: the chat templates have no error flag, and
    clients write the error into the content)."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise ApiError.invalid_request(
            f"{where} must be a string or an array of text blocks, not {json_type(content)}", where
        )
    return BLOCK_SEPARATOR.join(
        _block(block, f"{where}[{index}]", ("text",))["text"] for index, block in enumerate(content)
    )


def _assistant_message(content: list[Any], where: str) -> dict[str, Any]:
    """An assistant turn: text blocks -> content, tool_use blocks -> tool_calls, this proxy's thinking -> reasoning
    (the recorded message exactly, module docstring: the echo rule)."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for index, raw in enumerate(content):
        block = _block(raw, f"{where}[{index}]", ("text", "tool_use", "thinking", "redacted_thinking"))
        kind = block["type"]
        if kind == "text":
            texts.append(block["text"])
        elif kind == "tool_use":
            calls.append({
                "id": block["id"], "type": "function",
                "function": {"name": block["name"], "arguments": raw["input"]},
            })
        elif kind == "thinking" and (recorded := reasoning_from_signature(block["signature"])) is not None:
            reasoning.append(recorded)
        # else: another model's thinking, or redacted thinking: dropped (module docstring)
    # Concatenated as they are: an answer whose text a stream split into blocks (text, thinking, text) echoes back
    # as exactly the recorded content.
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message


def _block(raw: Any, where: str, kinds: tuple[str, ...]) -> dict[str, Any]:
    """One content block of a type in ``kinds``, checked against the SDK's type for it."""
    if not isinstance(raw, dict):
        raise ApiError.invalid_request(f"{where} must be a content block object, not {json_type(raw)}", where)
    kind = raw.get("type")
    if kind not in kinds:
        if isinstance(kind, str) and kind:
            raise ApiError.unsupported_parameter(
                f"{where}: a {kind} block is not supported here (this proxy serves a text model; accepted: "
                f"{', '.join(kinds)})",
                f"{where}.type",
            )
        raise ApiError.invalid_request(f"{where}.type must be one of {', '.join(kinds)}, not {shown(kind)}", where)
    return _validated(_BLOCKS[kind], raw, where)


# -- tools -------------------------------------------------------------------------------------------------------------


def _tools(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise ApiError.invalid_request(f"tools must be an array, not {json_type(value)}", "tools")
    out = []
    for index, tool in enumerate(value):
        where = f"tools[{index}]"
        if isinstance(tool, dict) and tool.get("type") not in (None, "custom"):
            raise ApiError.unsupported_parameter(
                f"{where}: the server tool {shown(tool.get('type'))} is not supported: this proxy executes no "
                "tools; declare custom tools (name, description, input_schema) and run them in the client",
                f"{where}.type",
            )
        checked = _validated(_TOOL, tool, where)
        # OpenAI's key order (name, description, parameters): the template renders the tool as JSON, so the same
        # tool declared through any protocol is the same prompt text (tests/e2e/test_protocols_agree.py).
        function: dict[str, Any] = {"name": checked["name"]}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        function["parameters"] = tool["input_schema"]
        if tool.get("strict") is True:
            function["strict"] = True
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(value: Any) -> tuple[Any, bool | None]:
    """The chat ``tool_choice`` and ``parallel_tool_calls`` (None: not said)."""
    choice = _validated(_member(_TOOL_CHOICES, value, "tool_choice"), value, "tool_choice")
    kind = choice["type"]
    parallel = None if "disable_parallel_tool_use" not in choice else not choice["disable_parallel_tool_use"]
    mapped: Any = {"auto": "auto", "any": "required", "none": "none"}.get(kind)
    if kind == "tool":
        mapped = {"type": "function", "function": {"name": choice["name"]}}
    return mapped, parallel


# -- the SDK's types ---------------------------------------------------------------------------------------------------


def _validated(adapter: TypeAdapter[Any], value: Any, where: str) -> Any:
    """``value`` checked against an ``anthropic.types`` TypedDict (strict: no coercion of "1" to 1); the first
    problem becomes a 400 naming its path. Lists inside (typed ``Iterable`` by the SDK) are validated lazily by
    pydantic, so the translators above walk them themselves."""
    try:
        return adapter.validate_python(value, strict=True)
    except ValidationError as exc:
        raise _validation_error(exc, where) from None


def _validation_error(exc: ValidationError, where: str) -> ApiError:
    first = exc.errors(include_url=False, include_input=False)[0]
    path = where
    for part in first["loc"]:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return ApiError.invalid_request(f"{path}: {first['msg']}", path)


def _member(members: dict[str, TypeAdapter[Any]], value: Any, where: str) -> TypeAdapter[Any]:
    """The SDK type of a union member named by ``value``'s ``type``."""
    if not isinstance(value, dict):
        raise ApiError.invalid_request(f"{where} must be an object, not {json_type(value)}", where)
    kind = value.get("type")
    if not isinstance(kind, str) or kind not in members:
        raise ApiError.invalid_request(
            f"{where}.type must be one of {', '.join(members)}, not {shown(kind)}", f"{where}.type"
        )
    return members[kind]


__all__ = ["BLOCK_SEPARATOR", "chat_body", "shows_thinking"]
