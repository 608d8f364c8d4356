"""The embedded engine's configuration: one frozen value, built by tests directly or by the CLI from flags.

Every knob of the engine lives here, including the injected faults, so that a test states in one place what kind
of SGLang server it is talking to. Field names follow SGLang's server flags where one exists
(``--weight-version``, ``--context-length``, ``--incremental-streaming-output``, ``--enable-return-routed-experts``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

#: The model path reported by ``/model_info`` and ``/v1/models`` unless configured otherwise.
DEFAULT_MODEL_PATH = "dressage/embedded-engine"


def _tuple_of_dicts(value: Any) -> tuple[dict[str, Any], ...]:
    return tuple(dict(item) for item in value)


@attrs.frozen(kw_only=True)
class EngineConfig:
    """How the embedded SGLang stand-in behaves. All fields have defaults except, in practice, the tokenizer.

    ``tokenizer_path=None`` means "the cached official Qwen3 tokenizer" (``serving.tokenizer_files``).
    """

    host: str = "127.0.0.1"
    #: 0 binds a free port; ``serve_engine`` reports the bound one.
    port: int = 30000
    tokenizer_path: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    #: JSON-lines script file (see docs/engine.md); entries are consumed per session.
    script: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    #: In-memory script entries (same keys as one line of a script file), appended after the file's.
    script_lines: tuple[dict[str, Any], ...] = attrs.field(default=(), converter=_tuple_of_dicts)
    #: Seeds every deterministic choice: default-policy text, logprobs, routed experts.
    seed: int = 0
    #: Tokens per second per request; 0 = as fast as possible (still yielding to the scheduler per token).
    token_rate: float = 0.0
    weight_version: str = "default"
    model_path: str = DEFAULT_MODEL_PATH
    #: ``/v1/models`` id; defaults to ``model_path`` like SGLang.
    served_model_name: str | None = None
    context_length: int = 32768
    #: SGLang's ``--incremental-streaming-output``: stream deltas instead of cumulative state.
    incremental_streaming_output: bool = False
    #: SGLang's ``--enable-return-routed-experts``; without it ``return_routed_experts`` is silently ignored.
    enable_return_routed_experts: bool = True
    num_layers: int = 4
    num_experts: int = 16
    experts_per_token: int = 2
    #: Added latency before the first token of every request ("prefill time"), in seconds.
    first_token_latency: float = 0.0
    #: Fault: every k-th ``/generate`` request (1-based count) is answered with ``fault_error_status``; 0 = off.
    fault_error_every: int = 0
    fault_error_status: int = 503
    #: Fault: a stream is cut (connection closed, no ``[DONE]``) once it has produced this many tokens; 0 = off.
    fault_drop_stream_after: int = 0
    #: ... applied to every k-th streaming request (1 = every stream).
    fault_drop_stream_every: int = 1
    #: SGLang ignores an abort for a request still blocked at the pause gate (its rid is not registered yet).
    #: True makes such a request abortable by explicit rid (finishing in the waiting-queue form).
    abort_blocked_requests: bool = False
    #: Fault: ``/abort_request`` answers 200 but aborts nothing (an upstream that never confirms a pause's aborts).
    fault_ignore_aborts: bool = False
    #: How many finished requests ``Engine.request_log`` keeps (oldest dropped first).
    request_log_size: int = 1000

    def __attrs_post_init__(self) -> None:
        if self.token_rate < 0:
            raise ValueError("token_rate must be >= 0")
        if self.context_length < 1:
            raise ValueError("context_length must be >= 1")
        if self.num_layers < 1 or self.experts_per_token < 1 or self.num_experts < self.experts_per_token:
            raise ValueError("routed experts need num_layers >= 1 and num_experts >= experts_per_token >= 1")
        if self.fault_error_every < 0 or self.fault_drop_stream_after < 0 or self.fault_drop_stream_every < 1:
            raise ValueError("fault counts must be >= 0 (fault_drop_stream_every >= 1)")
        if self.fault_error_status not in (500, 502, 503, 504, 429, 408):
            raise ValueError("fault_error_status must be one of 408, 429, 500, 502, 503, 504")

    @property
    def model_name(self) -> str:
        """The id served by ``/v1/models``."""
        return self.served_model_name or self.model_path

    def resolved_tokenizer_path(self) -> Path:
        """The tokenizer folder, fetching the default Qwen3 files into the cache if needed."""
        if self.tokenizer_path is not None:
            return self.tokenizer_path
        from serving.tokenizer_files import model_tokenizer_path

        return model_tokenizer_path("qwen3")
