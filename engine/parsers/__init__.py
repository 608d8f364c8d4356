"""The SGLang parsers behind ``/parse_function_call`` and ``/separate_reasoning``, as SGLang 0.5.23 has them.

The Qwen, GLM, MiniMax-M2 and DeepSeek families are implemented (sglang-protocol.md §5.1, §5.2, §5.4), written anew from the behaviour of
0.5.23 and held to it by recorded outputs of its own parser classes (``tests/parsing/fixtures/``). The proxy has
its own local parsers (``proxy/parsing/``); these exist so that the engine answers the parser endpoints like
SGLang does.
"""

from .function_call import TOOL_CALL_PARSERS, ParserCrash, ToolCallItem, parse_function_call
from .deepseek import parse_deepseekv4, parse_deepseekv31, parse_deepseekv32
from .glm import parse_glm45, parse_glm47
from .minimax import parse_minimax_m2, parse_minimax_m3
from .reasoning import REASONING_PARSERS, ReasoningResult, separate_reasoning

TOOL_CALL_PARSERS.update({"glm47": parse_glm47, "glm45": parse_glm45, "minimax-m2": parse_minimax_m2,
                          "minimax-m3": parse_minimax_m3})
TOOL_CALL_PARSERS.update({"deepseekv31": parse_deepseekv31, "deepseekv32": parse_deepseekv32,
                          "deepseekv4": parse_deepseekv4})

__all__ = [
    "REASONING_PARSERS",
    "ParserCrash",
    "TOOL_CALL_PARSERS",
    "ReasoningResult",
    "ToolCallItem",
    "parse_function_call",
    "separate_reasoning",
]
