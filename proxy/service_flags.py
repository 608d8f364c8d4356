"""The operator's flags of a long-running service: limits, timeouts, memory budget, shutdown, access keys.

Kept apart from ``proxy/config.py`` (the model, tokenization and trajectory flags) so that module stays one job;
both fill the one frozen :class:`proxy.config.ProxyConfig`. docs/operations.md is the operator's view of these.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from proxy.config import add_env_argument, choice, positive_float, positive_int, zero_means_unset
from serving.log_format import LOG_FORMATS, LOG_LEVELS
from proxy.trajectory.stores import DEFAULT_STORE, StoreUrlError, parse_store_url
from proxy.upstream.stream_mode import STREAM_MODES

#: 2**10 multiples; decimal suffixes too, since operators write both ("32MB" is not a typo for "32MiB" to them)
_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1000, "kib": 1024,
    "m": 1024**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1000**3, "gib": 1024**3,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")

#: the variables the keys are also read from (the names the issue and the SDK-style docs use), after the flag's own
#: DRESSAGE_PROXY_* variable
KEY_ENV_ALIASES = {"--api-key": "DRESSAGE_API_KEY", "--admin-key": "DRESSAGE_ADMIN_KEY"}


def byte_size(text: str) -> int:
    """``33554432``, ``32MiB``, ``64k``, ``1.5GB`` -> bytes (positive)."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size (bytes, or a number with K/KiB/KB/M/MiB/MB/G/GiB/GB)")
    value = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if value < 1:
        raise ValueError(f"{text!r} is not a positive size")
    return value


#: seconds, or a size; 0 or empty: off
optional_seconds = zero_means_unset(positive_float)
optional_byte_size = zero_means_unset(byte_size)


def optional_secret(text: str) -> str | None:
    """A key; empty: none."""
    return text or None


def origins(text: str) -> tuple[str, ...]:
    """Comma- or space-separated origins such as ``https://ui.example.org`` (``*`` for any)."""
    return tuple(text.replace(",", " ").split())


def add_service_arguments(parser: argparse.ArgumentParser) -> None:
    limits = parser.add_argument_group("limits and timeouts (docs/operations.md)")
    add_env_argument(limits, "--max-body-bytes", convert=byte_size, default=32 * 1024**2, metavar="SIZE",
                     help="largest request body; a larger one gets 413 request_too_large (default 32MiB)")
    add_env_argument(limits, "--max-messages", convert=positive_int, default=10_000,
                     help="most messages (or input items) in one request; more get 400 too_many_messages")
    add_env_argument(limits, "--max-header-bytes", convert=byte_size, default=64 * 1024, metavar="SIZE",
                     help="largest request head (request line and headers) (default 64KiB)")
    add_env_argument(limits, "--header-read-timeout", convert=positive_float, default=30.0,
                     help="seconds a client has to send a request's head; then 408 and the connection is closed")
    add_env_argument(limits, "--body-read-timeout", convert=positive_float, default=120.0,
                     help="seconds a client has to send a request's whole body; then 408 request_timeout")
    add_env_argument(limits, "--keep-alive-timeout", convert=positive_float, default=120.0,
                     help="seconds an idle keep-alive connection stays open (longer than usual client pools, so "
                     "the client closes first)")
    add_env_argument(limits, "--upstream-connect-timeout", convert=positive_float, default=10.0,
                     help="seconds to connect to SGLang; then 502 upstream_unavailable")
    add_env_argument(limits, "--upstream-read-timeout", convert=optional_seconds, default=None,
                     help="seconds SGLang may stay silent between two reads of one request (0: unbounded, the "
                     "default: a long prefill or a queue is not a fault)")
    add_env_argument(limits, "--upstream-stream-mode", convert=choice(*STREAM_MODES), default="auto",
                     help="how SGLang streams: incremental (its --incremental-streaming-output: O(new tokens) per "
                     "chunk), cumulative (its default), or auto: read from each worker's /server_info at start")

    memory = parser.add_argument_group("memory budget")
    add_env_argument(memory, "--session-idle-timeout", convert=optional_seconds, default=3600.0,
                     help="seconds without a request after which a session is finalized automatically (reason "
                     "idle_timeout; its segments wait in the store) (0: never; default 3600)")
    add_env_argument(memory, "--tombstone-ttl", convert=positive_float, default=86400.0,
                     help="seconds a finalized session's id is remembered (late steps rejected) and a drained "
                     "record is kept (default 86400)")
    add_env_argument(memory, "--memory-budget", convert=optional_byte_size, default=8 * 1024**3, metavar="SIZE",
                     help="approximate bytes sessions and the store may hold before /health says degraded "
                     "(0: no budget; default 8GiB)")
    add_env_argument(memory, "--malloc-trim-interval", convert=optional_seconds, default=60.0,
                     help="seconds between returns of freed memory to the OS (glibc malloc_trim: large requests "
                     "leave their peak in worker threads' arenas otherwise) (0: never; default 60)")

    lifecycle = parser.add_argument_group("shutdown")
    add_env_argument(lifecycle, "--shutdown-grace", convert=positive_float, default=30.0,
                     help="on SIGTERM or SIGINT, seconds in-flight generations may take to finish before they are "
                     "ended with an error (default 30)")

    access = parser.add_argument_group("access control")
    for flag, what in (("--api-key", "the agent API (chat completions, models)"),
                       ("--admin-key", "rollout control and trajectory endpoints (pause, resume, finalize, read, "
                        "drain, stats)")):
        alias = KEY_ENV_ALIASES[flag]
        add_env_argument(access, flag, convert=optional_secret, default=os.environ.get(alias) or None,
                         metavar="KEY", help=f"bearer key that protects {what}; prefer the variable (or {alias}) "
                         "over the flag, which other users can read in the process list")
    add_env_argument(access, "--cors-origin", convert=origins, default=(), metavar="ORIGIN",
                     help="origins browsers may call the proxy from (default: none, no CORS headers)")


    observability = parser.add_argument_group("observability (docs/observability.md)")
    add_env_argument(observability, "--log-format", default="auto", choices=LOG_FORMATS,
                     help="one JSON object per log line, or text; auto: text on a terminal, JSON otherwise")
    add_env_argument(observability, "--log-level", default="info", choices=LOG_LEVELS,
                     help="the least severe log lines written (default info)")
    add_env_argument(observability, "--metrics", default=True, flag_is_bool=True,
                     help="Prometheus metrics at GET /metrics (admin key when one is set); --no-metrics counts "
                     "nothing")


    storage = parser.add_argument_group("storage (docs/storage.md)")
    add_env_argument(storage, "--store", convert=store_url, default=DEFAULT_STORE, metavar="URL",
                     help="where journals and finalized segments are kept: sqlite (default: "
                     "$DRESSAGE_DATA_DIR/trajectories.sqlite3, else ./dressage-data/), sqlite:///PATH, "
                     "postgresql://USER@HOST/DB (a fleet of proxies), or memory (lost on exit)")
    add_env_argument(storage, "--read-lease-seconds", convert=positive_float, default=300.0,
                     help="seconds a draining /trajectory/read holds its segments for the reader's acknowledgement "
                     "before they are readable again (default 300)")
    add_env_argument(storage, "--proxy-id", default=None,
                     help="this proxy's name in a fleet's session leases (default host:port:pid)")
    add_env_argument(storage, "--session-lease-seconds", convert=positive_float, default=15.0,
                     help="with a shared store: seconds a session stays with a proxy that stopped answering before "
                     "another proxy may take it over (default 15)")


def store_url(text: str) -> str:
    """``--store``: checked here (a clear error at start), kept as text."""
    try:
        parse_store_url(text)
    except StoreUrlError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def service_settings_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`proxy.config.ProxyConfig` fields these flags set."""
    return {
        "max_body_bytes": args.max_body_bytes,
        "max_messages": args.max_messages,
        "max_header_bytes": args.max_header_bytes,
        "header_read_timeout": args.header_read_timeout,
        "body_read_timeout": args.body_read_timeout,
        "keep_alive_timeout": args.keep_alive_timeout,
        "upstream_connect_timeout": args.upstream_connect_timeout,
        "upstream_read_timeout": args.upstream_read_timeout,
        "upstream_stream_mode": args.upstream_stream_mode,
        "session_idle_timeout": args.session_idle_timeout,
        "tombstone_ttl": args.tombstone_ttl,
        "memory_budget": args.memory_budget,
        "malloc_trim_interval": args.malloc_trim_interval,
        "shutdown_grace": args.shutdown_grace,
        "api_key": args.api_key,
        "admin_key": args.admin_key,
        "cors_origins": tuple(args.cors_origin),
        "log_format": args.log_format,
        "log_level": args.log_level,
        "metrics": args.metrics,
        "store": args.store,
        "read_lease_seconds": args.read_lease_seconds,
        "proxy_id": args.proxy_id,
        "session_lease_seconds": args.session_lease_seconds,
    }
