"""The tools a chat request declares (``tools``) and its ``tool_choice``, validated.

Tool names are checked only where ``tool_choice`` needs them: a named choice must name a declared tool, and
``required`` or a named choice without tools is refused. What the choice means for the template, the parser and
constrained decoding is :class:`~proxy.api.chat_request.ChatCompletionRequest`'s (``template_tools``,
``parse_tools``) and :mod:`proxy.api.constraints`'.
"""

from __future__ import annotations

from typing import Any

import attrs

from proxy.api.errors import ApiError
from proxy.api.fields import check_json, json_type, optional_str, shown


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


def tools_from_json(value: Any) -> tuple[dict[str, Any], ...] | None:
    """The request's ``tools`` (None when absent or empty): function tools, names non-empty and unique."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ApiError.invalid_request(f"tools must be an array, not {json_type(value)}", "tools")
    seen: set[str] = set()
    tools = []
    for index, tool in enumerate(value):
        where = f"tools[{index}]"
        function, name = function_of(tool, where, "function tools")
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


def function_of(item: Any, where: str, supported: str) -> tuple[dict[str, Any], str]:
    """The ``function`` object of a tool or a tool call at ``where``, and its name: ``item`` must be an object whose
    ``type``, when present, is ``"function"`` (else ``unsupported_parameter``, saying only ``supported`` are),
    holding a ``function`` object with a non-empty ``name``."""
    if not isinstance(item, dict):
        raise ApiError.invalid_request(f"{where} must be an object, not {json_type(item)}", where)
    kind = item.get("type")
    if kind is not None and kind != "function":
        raise ApiError.unsupported_parameter(
            f"{where} has type {shown(kind)}; only {supported} are supported", f"{where}.type"
        )
    function = item.get("function")
    if not isinstance(function, dict):
        raise ApiError.invalid_request(
            f"{where}.function must be an object, not {json_type(function)}", f"{where}.function"
        )
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ApiError.invalid_request(f"{where}.function.name must be a non-empty string", f"{where}.function.name")
    return function, name


__all__ = ["ToolChoice", "function_of", "tools_from_json"]
