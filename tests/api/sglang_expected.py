"""The constrained-decoding ``sampling_params`` SGLang 0.5.23's OpenAI server sends, pinned from reading its source
(the ``sglang`` 0.5.23 wheel, ``sglang/srt/...``, and ``xgrammar`` 0.2.7, which it pins). Shared by the API and the
end-to-end tests."""

from __future__ import annotations

import json
from typing import Any

#: the calculator tools' parameters (tests/e2e/harness.py CALCULATOR_TOOLS)
PARAMETERS = {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"],
}


# The qwen25 (Qwen3) tag: FunctionCallParser.get_legacy_structural_tag (sglang/srt/function_call/
# function_call_parser.py L260-310) over every declared tool, with Qwen25Detector.structure_info
# (function_call/qwen25_detector.py L115-120); schema {} unless the tool is strict (L288-292); at_least_one for
# required / named (L407-414); dumped by protocol.py L1276-1279 (json.dumps of model_dump(by_alias=True)).
def qwen25_tag(names: list[str], *, at_least_one: bool, schemas: dict[str, Any] | None = None) -> str:
    return json.dumps({
        "type": "structural_tag",
        "structures": [
            {"begin": '<tool_call>\n{"name":"' + name + '", "arguments":', "schema": (schemas or {}).get(name, {}),
             "end": "}\n</tool_call>"}
            for name in names
        ],
        "triggers": ["<tool_call>"],
        "at_least_one": at_least_one,
    })


# The qwen3_coder (Qwen3.5) tag: xgrammar 0.2.7 get_model_structural_tag("qwen_3_coder", reasoning=False)
# (builtin_structural_tag.py L1298-1428: triggered tags for required / auto, one TagFormat for a named choice,
# stop_after_first = not parallel_tool_calls); the think tokens stripped from excludes because SGLang runs a
# reasoning parser (serving_chat.py L1887-1901); field order and defaults of xgrammar's structural_tag.py models.
def qwen3_coder_tag(names: list[str], *, forced: bool = False, at_least_one: bool = True, parallel: bool = True,
                    schemas: dict[str, Any] | None = None) -> str:
    tags = [
        {"type": "tag", "begin": f"<tool_call>\n<function={name}>\n",
         "content": {"type": "json_schema", "json_schema": (schemas or {}).get(name, PARAMETERS), "style": "qwen_xml",
                     "any_order": False, "max_whitespace_cnt": None},
         "end": "\n</function>\n</tool_call>"}
        for name in names
    ]
    if forced:
        return json.dumps({"type": "structural_tag", "format": tags[0]})
    return json.dumps({"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<tool_call>\n<function="], "tags": tags, "at_least_one": at_least_one,
        "stop_after_first": not parallel, "excludes": []}})
