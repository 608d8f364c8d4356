"""DeepSeek tool-call parsing for ``/parse_function_call`` as SGLang 0.5.23 does it: ``deepseekv31``
(``DeepSeekV31Detector``), ``deepseekv32`` (``DeepSeekV32Detector``) and ``deepseekv4`` (``DeepSeekV4Detector``, the
V3.2 detector with the block named ``tool_calls``). Written anew from the behaviour of those classes
(``function_call/deepseekv31_detector.py``, ``deepseekv32_detector.py``, ``deepseekv4_detector.py``,
``base_format_detector.py``) and held to it by recorded outputs of the classes themselves
(``tests/parsing/fixtures/sglang_deepseek_0_5_23.jsonl.gz``).

``deepseekv31``: with no ``<｜tool▁calls▁begin｜>`` the text comes back untouched. Otherwise ``normal_text`` is the
text before it, stripped; every ``<｜tool▁call▁begin｜>.*?<｜tool▁call▁end｜>`` is a call whose name is the text up
to the last ``<｜tool▁sep｜>`` (not stripped) and whose arguments, after it, are read with ``json.loads``. If any
call fails (no separator, arguments not JSON), the whole text comes back with no calls.

``deepseekv32`` / ``deepseekv4``: ``normal_text`` is the text before ``<｜DSML｜function_calls>`` (``tool_calls``)
without one trailing blank line (``\\n\\n``); without the block but with a bare ``<｜DSML｜invoke``, the text before
the first DSML tag, and the invokes from there on. Each closed ``<｜DSML｜invoke name="F">BODY</｜DSML｜invoke>`` (or
self-closing ``<｜DSML｜invoke name="F"/>``) is a call named ``F`` (stripped): a body that starts with ``{`` is a
JSON object; otherwise every ``<｜DSML｜parameter name="K" string="S">V</｜DSML｜parameter>`` is an argument (``V``
stripped; ``string="true"`` keeps it as text, anything else reads it as JSON and keeps the text if that fails); text
between parameters is ignored unless it holds a DSML tag (then the call is dropped, as is a body with no parameter
and other text). Calls to tools that were not offered are dropped (``parse_base_json``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .function_call import ToolCallItem

_V31_START = "<｜tool▁calls▁begin｜>"
_V31_CALL = re.compile(r"<｜tool▁call▁begin｜>.*?<｜tool▁call▁end｜>", re.DOTALL)
_V31_DETAIL = re.compile(r"<｜tool▁call▁begin｜>(.*)<｜tool▁sep｜>(.*)<｜tool▁call▁end｜>", re.DOTALL)

_DSML = "｜DSML｜"
_INVOKE_START = f"<{_DSML}invoke"
_INVOKE = re.compile(
    rf'<{_DSML}invoke\s+name="(?P<name>[^"]+)"\s*(?:(?P<self_close>/>)|>(?P<body>.*?)(?P<end>(?:</{_DSML}invoke>|$)))',
    re.DOTALL,
)
_PARAMETER = re.compile(rf'<{_DSML}parameter\s+name="([^"]+)"\s+string="([^"]+)"\s*>(.*?)</{_DSML}parameter>', re.DOTALL)


def _reject_constant(value: str) -> Any:
    raise ValueError(f"Invalid JSON constant: {value}")


def base_json_calls(name: Any, arguments: Any, tools: list[Any]) -> list[ToolCallItem]:
    """``BaseFormatDetector.parse_base_json`` for one call: dropped unless ``name`` is an offered tool (the index is
    the last tool of that name); the arguments written as ``json.dumps(parameters or {})``."""
    indices = {tool.name: index for index, tool in enumerate(tools) if tool.name}
    if not (name and name in indices):
        return []
    return [ToolCallItem(indices[name], name, json.dumps(arguments or {}, ensure_ascii=False))]


def parse_deepseekv31(text: str, tools: list[Any]) -> tuple[str, list[ToolCallItem]]:
    start = text.find(_V31_START)
    if start == -1:
        return text, []
    calls: list[ToolCallItem] = []
    try:
        for match in _V31_CALL.findall(text):
            detail = _V31_DETAIL.search(match)
            if detail is None:  # as SGLang: a call without a separator fails the whole parse
                raise ValueError("no <｜tool▁sep｜>")
            calls.extend(base_json_calls(detail.group(1), json.loads(detail.group(2)), tools))
    except Exception:  # noqa: BLE001 - SGLang logs and returns the whole text without calls
        return text, []
    return text[:start].strip(), calls


def _text_before_dsml(text: str) -> str:
    index = text.find(_DSML)
    if index == -1:
        return text
    if index >= 2 and text[index - 2 : index] == "</":
        index -= 2
    elif index >= 1 and text[index - 1] == "<":
        index -= 1
    return text[:index].removesuffix("\n\n")


def _dsml_arguments(body: str) -> Any:
    """``_parse_parameters_from_xml``, parsed back (SGLang dumps then loads it); ``ValueError`` drops the call."""
    stripped = body.strip()
    if stripped.startswith("{"):
        parsed = json.loads(stripped, parse_constant=_reject_constant)
        if not isinstance(parsed, dict):
            raise ValueError("DeepSeek tool arguments must be a JSON object")
        return parsed
    arguments: dict[str, Any] = {}
    leftover, last = [], 0
    matches = list(_PARAMETER.finditer(body))
    for match in matches:
        leftover.append(body[last : match.start()])
        key, kind, value = match.groups()
        last = match.end()
        if kind == "true":
            arguments[key] = value.strip()
            continue
        try:
            arguments[key] = json.loads(value.strip(), parse_constant=_reject_constant)
        except ValueError:
            arguments[key] = value.strip()
    leftover.append(body[last:])
    rest = "".join(leftover)
    if _DSML in rest or (not matches and rest.strip()):
        raise ValueError("Malformed DeepSeek tool parameter")
    return arguments  # SGLang's dumps-then-loads gives these same values back (strings, or values already loaded)


def _parse_dsml(text: str, tools: list[Any], block: str) -> tuple[str, list[ToolCallItem]]:
    opening, closing = f"<{_DSML}{block}>", f"</{_DSML}{block}>"
    start = text.find(opening)
    if start != -1:
        normal = text[:start].removesuffix("\n\n")
        sections = re.findall(re.escape(opening) + "(.*?)" + re.escape(closing), text, re.DOTALL)
    else:
        bare = text.find(_INVOKE_START)
        if bare == -1:
            return text, []
        normal, sections = _text_before_dsml(text), [text[bare:]]
    calls: list[ToolCallItem] = []
    try:
        for section in sections:
            for match in _INVOKE.finditer(section):
                name = match.group("name").strip()
                if not (match.group("self_close") or match.group("end")):
                    continue  # an unclosed invoke is dropped
                try:
                    arguments = _dsml_arguments(match.group("body") or "") if not match.group("self_close") else {}
                except ValueError:
                    continue
                calls.extend(base_json_calls(name, arguments, tools))
    except Exception:  # noqa: BLE001 - SGLang fails closed: the prose and the calls so far
        pass
    return normal, calls


def parse_deepseekv32(text: str, tools: list[Any]) -> tuple[str, list[ToolCallItem]]:
    return _parse_dsml(text, tools, "function_calls")


def parse_deepseekv4(text: str, tools: list[Any]) -> tuple[str, list[ToolCallItem]]:
    return _parse_dsml(text, tools, "tool_calls")
