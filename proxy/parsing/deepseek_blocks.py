"""What the body of a DeepSeek tool-call block means (SGLang parsers ``deepseekv31``, ``deepseekv32``, ``deepseekv4``).

DeepSeek-V3.1 (``deepseekv31``) writes calls as its official chat template renders them::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{JSON}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>

(the block's tags: ``proxy/parsing/formats.py:ToolCallFormat``). Read by these rules: one or more ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>`` elements with only
whitespace around them; the name is stripped (non-empty, no quotes, angle brackets or line breaks); ``ARGS`` is strict
JSON for an object (anything else: ``malformed_tool_call``). The arguments are written back as SGLang writes them
(``json.dumps(..., ensure_ascii=False)``, ``tool_blocks.dump_arguments``), so a model that writes that style (the
template renders the client's ``arguments`` string verbatim) echoes back to the same tokens.

DeepSeek-V3.2 (``deepseekv32``) and V4 (``deepseekv4``) write DSML, as V4's official encoder
(``encoding_dsv4.py``: ``encode_arguments_to_dsml``, ``tool_calls_template``) renders it; V3.2 names the block
``function_calls``, V4 ``tool_calls``::

    <｜DSML｜tool_calls>
    <｜DSML｜invoke name="NAME">
    <｜DSML｜parameter name="K" string="true">raw text</｜DSML｜parameter>
    <｜DSML｜parameter name="K2" string="false">JSON</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls>

Read as the official encoder's own parser (``parse_tool_calls``) reads it, with whitespace between elements
tolerated: ``<｜DSML｜invoke name="...">`` elements, each holding ``<｜DSML｜parameter name="..." string="true|false">``
elements; ``string="true"`` values are kept verbatim, ``string="false"`` values must be strict JSON; a repeated
parameter name, any other text, or any other attribute is ``malformed_tool_call``. SGLang 0.5.23's
``DeepSeekV32Detector`` differs on purpose (docs/parsing.md, "DeepSeek"): it strips string values, keeps a
``string="false"`` value that is not JSON as a string, lets the last of repeated parameters win, accepts an invoke
whose body is a JSON object and a self-closing ``<｜DSML｜invoke name="x"/>``, and ignores text between parameters.
"""

from __future__ import annotations

from typing import Any

from proxy.parsing.formats import strict_json_loads
from proxy.parsing.minimax_blocks import invoke_elements, named_element

V31_CALL_START, V31_CALL_END, V31_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"

DSML = "｜DSML｜"
DSML_INVOKE_START, DSML_INVOKE_END = f'<{DSML}invoke name="', f"</{DSML}invoke>"
DSML_PARAMETER_START, DSML_PARAMETER_END = f'<{DSML}parameter name="', f"</{DSML}parameter>"
_STRING_ATTRIBUTE = '" string="'
_KINDS = {'true">': True, 'false">': False}


class DeepSeekMalformed(ValueError):
    """The block body is not DeepSeek calls."""


def v31_calls(inner: str) -> list[tuple[str, dict[str, Any]]]:
    """The calls a V3.1 block body holds, as ``[(name, arguments)]``; :class:`DeepSeekMalformed` (or another
    ``ValueError``) otherwise."""
    calls: list[tuple[str, dict[str, Any]]] = []
    pos = 0
    while (call := named_element(inner, pos, V31_CALL_START, V31_CALL_END, V31_SEP)) is not None:
        name, arguments_text, pos = call
        if V31_CALL_START in arguments_text or V31_SEP in arguments_text:
            raise DeepSeekMalformed(f"nested tags in {arguments_text[:40]!r}")
        arguments = strict_json_loads(arguments_text)
        if not isinstance(arguments, dict):
            raise DeepSeekMalformed("the arguments are not a JSON object")
        calls.append((name, arguments))
    return calls


def dsml_calls(inner: str) -> list[tuple[str, dict[str, Any]]]:
    """The calls a DSML block body holds (V3.2 and V4 alike), as ``[(name, arguments)]``; :class:`DeepSeekMalformed`
    (or another ``ValueError``) otherwise."""
    calls: list[tuple[str, dict[str, Any]]] = []
    invokes = invoke_elements(inner, (DSML_INVOKE_START, DSML_INVOKE_END), (DSML_PARAMETER_START, DSML_PARAMETER_END),
                              _STRING_ATTRIBUTE)
    for name, parameters in invokes:
        arguments: dict[str, Any] = {}
        for key, rest in parameters:  # rest: 'true">VALUE' or 'false">VALUE'
            kind = next((k for k in _KINDS if rest.startswith(k)), None)
            if kind is None or key in arguments:
                raise DeepSeekMalformed(f"bad parameter {key!r}")
            value = rest[len(kind) :]
            if DSML in value:
                raise DeepSeekMalformed(f"nested tags in {value[:40]!r}")
            arguments[key] = value if _KINDS[kind] else strict_json_loads(value)
        calls.append((name, arguments))
    return calls
