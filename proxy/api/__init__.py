"""The HTTP API layer: request parsing and validation, response and SSE rendering, errors.

Pure, synchronous and I/O-free: the app's routes call it and wrap what it returns (dicts, bytes, header maps) in
responses.

- :mod:`proxy.api.errors`: :class:`ApiError` and the stable error codes (with the status table).
- :mod:`proxy.api.fields`: the shared field readers, and :func:`parse_json_body` for raw bodies.
- :mod:`proxy.api.chat_request`: :class:`ChatCompletionRequest` (``POST /v1/chat/completions``), with its parts
  :mod:`proxy.api.session_identity`, :mod:`proxy.api.chat_messages` and :mod:`proxy.api.chat_tools`.
- :mod:`proxy.api.rollout_requests`: finalize, trajectory-read and resume bodies.
- :mod:`proxy.api.render`: ``chat.completion`` objects, ``chat.completion.chunk`` events, SSE framing.
"""

from proxy.api.chat_request import ChatCompletionRequest
from proxy.api.chat_tools import ToolChoice
from proxy.api.errors import ERROR_TABLE, ApiError, ErrorCode
from proxy.api.fields import parse_json_body
from proxy.api.render import (
    SSE_DONE,
    AssistantTurn,
    ChunkFormat,
    CompletionMeta,
    Delta,
    FinishReason,
    TokenExtras,
    TokenLogprob,
    ToolCall,
    ToolCallDelta,
    TopLogprob,
    Usage,
    dumps,
    render_completion,
    report_json,
    sse_error,
    sse_event,
    sse_events,
)
from proxy.api.rollout_requests import FinalizeRequest, ResumeRequest, TrajectoryReadRequest

__all__ = [
    "ERROR_TABLE", "SSE_DONE", "ApiError", "AssistantTurn", "ChatCompletionRequest", "ChunkFormat", "CompletionMeta",
    "Delta", "ErrorCode", "FinalizeRequest", "FinishReason", "ResumeRequest", "TokenExtras", "TokenLogprob",
    "ToolCall", "ToolCallDelta", "ToolChoice", "TopLogprob", "TrajectoryReadRequest", "Usage", "dumps", "report_json",
    "parse_json_body", "render_completion", "sse_error", "sse_event", "sse_events",
]
