"""The embedded SGLang engine: speaks SGLang's HTTP protocol (shared/docs/sglang-protocol.md) in-process.

Contract used by the rest of the project::

    from engine import EngineConfig, serve_engine, create_engine_app

    handle = await nursery.start(serve_engine, EngineConfig(port=0, tokenizer_path=path))
    handle.url      # "http://127.0.0.1:<port>"
    handle.engine   # Engine: request_log, statistics(), weight_version, version_history, ...

See docs/engine.md.
"""

from .app import create_engine_app
from .config import EngineConfig
from .request_state import Phase, RequestRecord
from .routed_experts import decode_routed_experts, expected_row
from .scheduler import Engine, EngineStatistics
from .script import ScriptEntry
from .serve import EngineHandle, serve_engine

__all__ = [
    "Engine",
    "EngineConfig",
    "EngineHandle",
    "EngineStatistics",
    "Phase",
    "RequestRecord",
    "ScriptEntry",
    "create_engine_app",
    "decode_routed_experts",
    "expected_row",
    "serve_engine",
]
