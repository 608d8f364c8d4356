"""Self-contained copies of the SGLang parsers behind ``/parse_function_call`` and ``/separate_reasoning``.

Only the Qwen family is implemented (sglang-protocol.md §5.1, §5.2, §5.4). The proxy has its own local parsers;
these exist so that the engine answers the parser endpoints like SGLang does.
"""

from .function_call import TOOL_CALL_PARSERS, ToolCallItem, parse_function_call
from .reasoning import REASONING_PARSERS, ReasoningResult, separate_reasoning

__all__ = [
    "REASONING_PARSERS",
    "TOOL_CALL_PARSERS",
    "ReasoningResult",
    "ToolCallItem",
    "parse_function_call",
    "separate_reasoning",
]
