"""Parsing model outputs into OpenAI assistant messages: reasoning, content and tool calls (spec §10).

Contract used by the request path::

    from proxy.parsing import MessageParser, ParserConfig

    parser = MessageParser(ParserConfig(tool_call_type="qwen25", reasoning_type="qwen3",
                                        tool_call_backend="sglang_api", reasoning_backend="sglang_api"),
                           client=sglang_client)
    # non-streaming
    message = await parser.parse_final(text, body.get("tools"), session_id=sid, step_index=k,
                                       reasoning_open_at_start=thinking_prefix_in_prompt)
    # streaming
    stream = parser.stream(body.get("tools"), session_id=sid, step_index=k, reasoning_open_at_start=...)
    for delta in stream.feed(text_delta): ...          # as tokens arrive; delta.to_openai() -> chunk delta
    for delta in await stream.finish(): ...            # at the end
    message = stream.message                           # what the client has assembled; record it
    finish_reason = message.finish_reason("stop")      # "tool_calls" when calls were made

See docs/parsing.md.
"""

from proxy.parsing.formats import (
    REASONING_TYPES,
    TOOL_CALL_TYPES,
    MessageFormat,
    ToolCallFormat,
    ToolSpecs,
)
from proxy.parsing.local import parse_local
from proxy.parsing.parsed import (
    ContentDelta,
    MessageDelta,
    ParsedMessage,
    ParseFlag,
    ReasoningDelta,
    ToolCall,
    ToolCallDelta,
    merge_deltas,
)
from proxy.parsing.parser import (
    BACKENDS,
    DEFAULT_BACKEND,
    Backend,
    MessageParser,
    MessageStream,
    ParserClient,
    ParserConfig,
    ParserStatistics,
)
from proxy.parsing.streaming import StreamingMessageParser
from proxy.parsing.tool_blocks import BlockDecision, decide_block
from proxy.parsing.tool_call_ids import tool_call_id

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "REASONING_TYPES",
    "TOOL_CALL_TYPES",
    "Backend",
    "BlockDecision",
    "ContentDelta",
    "MessageDelta",
    "MessageFormat",
    "MessageParser",
    "MessageStream",
    "ParseFlag",
    "ParsedMessage",
    "ParserClient",
    "ParserConfig",
    "ParserStatistics",
    "ReasoningDelta",
    "StreamingMessageParser",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallFormat",
    "ToolSpecs",
    "decide_block",
    "merge_deltas",
    "parse_local",
    "tool_call_id",
]
