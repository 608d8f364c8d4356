"""``dressage-engine``: run the embedded SGLang stand-in on its own port.

``add_engine_arguments`` / ``engine_config_from_args`` let another CLI (``dressage-proxy``) offer the same options;
destinations are prefixed ``engine_`` so they never collide with the host CLI's own flags.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import trio

from serving.log_format import LOG_FORMATS, LOG_LEVELS, configure_logging

from .config import DEFAULT_MODEL_PATH, EngineConfig
from .serve import EngineHandle, serve_engine


def add_engine_arguments(parser: argparse.ArgumentParser, *, include_server: bool = True) -> argparse._ArgumentGroup:
    """Add the engine's flags to ``parser`` (in an "embedded engine" group).

    ``include_server=False`` leaves out ``--host``, ``--port`` and ``--tokenizer-path``, which a host CLI (the
    proxy) defines for itself; pass them to :func:`engine_config_from_args` as overrides instead.
    """
    group = parser.add_argument_group("embedded engine", "the in-process SGLang stand-in (docs/engine.md)")
    if include_server:
        group.add_argument("--host", dest="engine_host", default="127.0.0.1", help="bind address (default: %(default)s)")
        group.add_argument("--port", dest="engine_port", type=int, default=30000,
                           help="port; 0 picks a free one (default: %(default)s)")
        group.add_argument("--tokenizer-path", dest="engine_tokenizer_path", type=Path, default=None,
                           help="folder with tokenizer.json + tokenizer_config.json (default: the cached official "
                                "Qwen3 files, see dressage-tokenizers)")
    group.add_argument("--script", dest="engine_script", type=Path, default=None, metavar="FILE",
                       help='JSON lines {"session": KEY|"*", "output": RAW_MODEL_TEXT, ...} to generate verbatim')
    group.add_argument("--seed", dest="engine_seed", type=int, default=0,
                       help="seed of the default policy, logprobs and routed experts (default: %(default)s)")
    group.add_argument("--token-rate", dest="engine_token_rate", type=float, default=0.0, metavar="TOKENS_PER_SECOND",
                       help="decode speed per request; 0 = as fast as possible (default: %(default)s)")
    group.add_argument("--weight-version", dest="engine_weight_version", default="default",
                       help="initial weight version (default: %(default)s)")
    group.add_argument("--model-path", dest="engine_model_path", default=DEFAULT_MODEL_PATH,
                       help="model path reported by /model_info (default: %(default)s)")
    group.add_argument("--served-model-name", dest="engine_served_model_name", default=None,
                       help="id in /v1/models (default: the model path)")
    group.add_argument("--context-length", dest="engine_context_length", type=int, default=32768,
                       help="context window in tokens (default: %(default)s)")
    group.add_argument("--incremental-streaming-output", "--stream-output", dest="engine_incremental_streaming_output",
                       action="store_true", help="stream deltas instead of SGLang's default cumulative chunks")
    group.add_argument("--enable-return-routed-experts", dest="engine_enable_return_routed_experts",
                       action=argparse.BooleanOptionalAction, default=True,
                       help="honour return_routed_experts (default: on)")
    group.add_argument("--num-layers", dest="engine_num_layers", type=int, default=4,
                       help="routed-experts layer axis (default: %(default)s)")
    group.add_argument("--num-experts", dest="engine_num_experts", type=int, default=16,
                       help="experts per layer (default: %(default)s)")
    group.add_argument("--experts-per-token", "--moe-topk", dest="engine_experts_per_token", type=int, default=2,
                       help="routed-experts top-k (default: %(default)s)")
    group.add_argument("--first-token-latency", dest="engine_first_token_latency", type=float, default=0.0,
                       metavar="SECONDS", help="added latency before every first token (default: %(default)s)")
    group.add_argument("--fault-error-every", dest="engine_fault_error_every", type=int, default=0, metavar="K",
                       help="answer every K-th /generate with --fault-error-status; 0 = off")
    group.add_argument("--fault-error-status", dest="engine_fault_error_status", type=int, default=503,
                       choices=(408, 429, 500, 502, 503, 504), help="status of injected errors (default: %(default)s)")
    group.add_argument("--fault-drop-stream-after", dest="engine_fault_drop_stream_after", type=int, default=0,
                       metavar="TOKENS", help="cut streams (no [DONE]) after this many tokens; 0 = off")
    group.add_argument("--fault-drop-stream-every", dest="engine_fault_drop_stream_every", type=int, default=1,
                       metavar="K", help="apply the stream drop to every K-th stream (default: %(default)s)")
    group.add_argument("--abort-blocked-requests", dest="engine_abort_blocked_requests", action="store_true",
                       help="let /abort_request reach requests still blocked by a pause (SGLang ignores them)")
    group.add_argument("--fault-ignore-aborts", dest="engine_fault_ignore_aborts", action="store_true",
                       help="fault: /abort_request answers 200 and aborts nothing")
    return group


def engine_config_from_args(args: argparse.Namespace, **overrides: Any) -> EngineConfig:
    """Build an :class:`EngineConfig` from parsed flags; ``overrides`` (e.g. ``tokenizer_path``) win."""
    values: dict[str, Any] = {}
    for name, value in vars(args).items():
        if name.startswith("engine_"):
            values[name[len("engine_"):]] = value
    values.update(overrides)
    return EngineConfig(**values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dressage-engine",
        description="A deterministic, scriptable stand-in for an SGLang server (native /generate protocol, "
        "abort/pause, weight versions, routed experts), backed by a real Qwen tokenizer.",
    )
    add_engine_arguments(parser)
    parser.add_argument("--log-level", default="warning", choices=LOG_LEVELS,
                        help="the least severe log lines written (default: %(default)s)")
    parser.add_argument("--log-format", default="auto", choices=LOG_FORMATS,
                        help="one JSON object per line, or text; auto: text on a terminal, JSON otherwise (the "
                        "proxy's format, serving/log_format.py)")
    args = parser.parse_args(argv)
    configure_logging(args.log_format, args.log_level, ("engine",))
    try:
        config = engine_config_from_args(args)
    except (ValueError, OSError) as exc:
        parser.error(str(exc))

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            handle: EngineHandle = await nursery.start(serve_engine, config)
            print(f"dressage-engine listening on {handle.url}", flush=True)

    try:
        trio.run(run)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
