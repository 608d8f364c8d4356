"""``dressage-proxy``: parse flags, start the embedded engine when no SGLang URL is given, serve the app."""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import logging
import os
import signal
import sys
from collections.abc import AsyncIterable
from typing import Any

import attrs
import trio

# transformers without torch prints a warning when it is imported (by the proxy's tokenizer), before main() could
# configure anything: a bare line in a JSON log stream. The proxy never needs torch.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from engine import EngineConfig, EngineHandle, serve_engine
from engine.cli import add_engine_arguments, engine_config_from_args
from proxy.access import bind_warning
from proxy.app import create_proxy_app
from proxy.config import ConfigError, ProxyConfig, add_proxy_arguments, proxy_config_from_args, sglang_ssl_context
from proxy.controllers.fleet_control import join_fleet
from proxy.controllers.lifecycle import LifecycleController
from proxy.controllers.malloc_trim import run_malloc_trim
from proxy.controllers.store_leases import run_lease_renewal
from proxy.export_command import export_main
from proxy.families_command import families_main
from proxy.http_limits import http_limits
from proxy.observability.logs import configure_proxy_logging
from proxy.controllers.session_reaper import expiry_policy, run_reaper
from proxy.service_flags import add_service_arguments, service_settings_from_args
from proxy.services import ProxyServices
from proxy.trajectory.store import TrajectoryStore
from proxy.trajectory.stores import open_store
from proxy.fleet_command import fleet_main
from proxy.ui.view_command import view_main
from proxy.upstream.client import SGLangClient
from proxy.upstream.stream_mode import decide_stream_mode
from serving.http_server import serve_app
from serving.tokenizer_files import TokenizerFilesError, model_tokenizer_path

#: the process's own lines (start, stop): in the format and at the level of every other line (--log-format,
#: --log-level; proxy/observability/logs.py), so a JSON stream stays all JSON
log = logging.getLogger("dressage_proxy.main")

#: the signals that stop the proxy gracefully (docs/operations.md, "Shutdown and signals")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: past the shutdown grace, how long the cut generations' answers may take to be written before hypercorn cancels
#: the connections still open (a client that stopped reading)
CUT_ANSWER_BOUND = 10.0


@attrs.frozen
class ProxyHandle:
    """What :func:`run_proxy` reports once it listens."""

    url: str
    #: the in-process engine when no router URL was given, else None
    engine: EngineHandle | None
    #: the running proxy's components (tests and embedding programs reach the sessions and the gate here)
    services: ProxyServices


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dressage-proxy",
        description="Trajectory-recording OpenAI-compatible proxy in front of SGLang. Without "
        "--sglang-router-url it runs on its embedded SGLang-protocol engine (docs/engine.md).",
        epilog="dressage-proxy view EXPORT.jsonl|.parquet opens the trajectory viewer on an exported file "
        "(dressage-proxy view --help); dressage-proxy export --store URL --out PATH writes a store's segments to "
        "one (dressage-proxy export --help); dressage-proxy fleet pause|resume --urls URL,... pauses or resumes "
        "every proxy of a fleet (dressage-proxy fleet --help); dressage-proxy families lists the supported model "
        "families (dressage-proxy families --help).",
    )
    add_proxy_arguments(parser)
    add_service_arguments(parser)
    add_engine_arguments(parser, include_server=False)
    return parser


def config_from_args(args: argparse.Namespace) -> ProxyConfig:
    """The whole configuration from :func:`build_parser`'s arguments (ConfigError for an unusable setting)."""
    return attrs.evolve(proxy_config_from_args(args), **service_settings_from_args(args))


async def run_proxy(
    config: ProxyConfig, engine_config: EngineConfig | None = None, *,
    stop_requests: AsyncIterable[object] | None = None, task_status: Any = trio.TASK_STATUS_IGNORED,
    store: TrajectoryStore | None = None,
) -> None:
    """Run until stopped, or cancelled (which ends everything at once). Without a router URL the embedded engine
    serves on an ephemeral loopback port first, and the proxy talks to it over HTTP exactly as it would to SGLang
    (one code path for both).

    Stopping is graceful (``proxy/controllers/lifecycle.py``): each item of ``stop_requests`` (``main``'s SIGTERM and
    SIGINT), or a call of the handle's ``services.lifecycle.request_stop()``, asks for it; this returns once every
    generation ended, the store was flushed and the server closed its last connection."""
    async with trio.open_nursery() as nursery:
        engine_handle: EngineHandle | None = None
        if config.uses_embedded_engine:
            engine_config = attrs.evolve(
                engine_config or EngineConfig(tokenizer_path=config.tokenizer_path),
                host="127.0.0.1",
                port=0,
                tokenizer_path=config.tokenizer_path,
            )
            engine_handle = await nursery.start(serve_engine, engine_config)
            log.info("no --sglang-router-url given: embedded engine started in-process at %s", engine_handle.url,
                     extra={"engine_url": engine_handle.url})
            router_url, worker_urls = engine_handle.url, (engine_handle.url,)
        else:
            router_url, worker_urls = config.sglang_router_url, config.sglang_worker_urls
        ssl_context = sglang_ssl_context(config.sglang_ca_file)
        async with contextlib.AsyncExitStack() as stack, SGLangClient(
            router_url, worker_urls, max_connections=config.upstream_max_connections, ssl_context=ssl_context,
            connect_timeout=config.upstream_connect_timeout, generation_read_timeout=config.upstream_read_timeout,
        ) as upstream:
            await _decide_stream_mode(upstream, config.upstream_stream_mode)
            if store is None:  # else the caller's (tests: several proxies over one shared store), not closed here
                store = await stack.enter_async_context(open_store(config.store))
            # Loading the tokenizer takes about a second; keep the event loop (and the engine) responsive.
            services = await trio.to_thread.run_sync(ProxyServices.build, config, upstream, store)
            app = create_proxy_app(services)
            nursery.start_soon(run_reaper, services.sessions, expiry_policy(config))
            if config.malloc_trim_interval is not None:
                nursery.start_soon(run_malloc_trim, config.malloc_trim_interval)
            # A shared store: start paused when the fleet is, and keep the leases of busy sessions alive.
            await join_fleet(services.gate, store)
            nursery.start_soon(run_lease_renewal, services.sessions.leases)
            # Known from the start when the upstream can say; otherwise asked again when a request needs it.
            await services.context_window.refresh()
            lifecycle = services.lifecycle
            if warning := bind_warning(config):
                log.warning(warning)
            if config.model_family_warning:  # an unrecognised or edited chat template (proxy/families/detection.py)
                log.warning(config.model_family_warning, extra={"model_family": config.trajectory_build_model})
            async with trio.open_nursery() as serving:
                url = await serving.start(functools.partial(
                    serve_app, app, config.host, config.port, limits=http_limits(config),
                    shutdown_trigger=lifecycle.wait_stop_accepting,
                    graceful_timeout=config.shutdown_grace + CUT_ANSWER_BOUND,
                ))
                log.info("listening on %s (upstream %s)", url, router_url, extra={"url": url, "upstream": router_url})
                task_status.started(ProxyHandle(url=url, engine=engine_handle, services=services))
                await _until_stopped(lifecycle, stop_requests, config.shutdown_grace)
        # Every connection is closed: the embedded engine goes too.
        nursery.cancel_scope.cancel()


async def _decide_stream_mode(upstream: SGLangClient, requested: Any) -> None:
    """Decode the upstream's streams in the mode it runs (``proxy/upstream/stream_mode.py``); one warning when that
    is SGLang's cumulative default. Workers in both modes stop the start (``MixedStreamModes``)."""
    decision = await decide_stream_mode(upstream, requested)
    upstream.incremental_streaming = decision.incremental
    if note := decision.note():
        log.info(note)
    if warning := decision.warning():
        log.warning(warning, extra={"upstream_stream_mode": decision.mode})
    else:
        log.info("upstream stream mode: %s (%s)", decision.mode, decision.source,
                 extra={"upstream_stream_mode": decision.mode})


async def _until_stopped(
    lifecycle: LifecycleController, stop_requests: AsyncIterable[object] | None, grace: float
) -> None:
    """Forward the stop requests to the lifecycle until it stopped (the store is flushed)."""
    async with trio.open_nursery() as nursery:
        if stop_requests is not None:
            nursery.start_soon(_forward_stop_requests, stop_requests, lifecycle, grace)
        await lifecycle.run()
        nursery.cancel_scope.cancel()


async def _forward_stop_requests(stop_requests: AsyncIterable[object], lifecycle: LifecycleController,
                                 grace: float) -> None:
    """Each stop request (a signal number) asks the lifecycle to stop, and says so on stderr."""
    received = 0
    async for signum in stop_requests:
        received += 1
        name = signal.Signals(signum).name if isinstance(signum, int) else str(signum)
        if received == 1:
            log.info("%s: stopping; new requests get 503 shutting_down, generations in flight have %g s to finish "
                     "(--shutdown-grace; a second signal cuts them at once)", name, grace,
                     extra={"signal": name, "grace_seconds": grace})
        else:
            log.info("%s again: cutting the generations still in flight", name, extra={"signal": name})
        lifecycle.request_stop()


async def serve_until_signalled(config: ProxyConfig, engine_config: EngineConfig | None = None) -> None:
    """``main``'s: :func:`run_proxy`, stopped gracefully by SIGTERM or SIGINT (both alike); the start-up heap frozen
    once it serves (:func:`freeze_startup_heap`)."""
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(run_proxy, config, engine_config, stop_requests=signals))
            freeze_startup_heap()


#: The youngest generation is collected once this many more tracked objects were made than freed (CPython's default
#: is 700). The requests in flight hold ~120 tracked objects each for a moment, so at 700 nearly every young
#: collection found in-flight requests' objects and freed almost nothing (570 objects in 3,000 requests): ~40 µs a
#: request, 2.5% of its CPU (issue 21 item 2, docs/benchmarks.md). At 10,000 the same load collects ~10x less often
#: and spends a tenth of that; the few cycles that are garbage wait a little longer.
YOUNG_COLLECTION_THRESHOLD = 10_000


def freeze_startup_heap() -> int:
    """Move every object alive now out of the garbage collector's sight for good (``gc.freeze``), after one last
    collection, and collect the youngest generation less often (:data:`YOUNG_COLLECTION_THRESHOLD`); how many
    objects were frozen.

    Why: the tokenizer, the chat templates, transformers and the app leave ~230k tracked objects that live as long
    as the process, and every full collection walked them all: ~120 ms of CPU each (issue 21 item 4; one fell in
    the last turns of the growth bench and read as +1 ms a request). Frozen, a full collection walks what the
    sessions hold. Only the CLI's process does it: a test process running proxies in-process keeps its own heap."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *gc.get_threshold()[1:])
    log.debug("froze the start-up heap: %d objects; young collections every %d net new objects", frozen,
              YOUNG_COLLECTION_THRESHOLD, extra={"frozen_objects": frozen, "gc_threshold": gc.get_threshold()})
    return frozen


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
    except ConfigError as exc:
        print(f"dressage-proxy: error: {exc}", file=sys.stderr)
        return 2
    argv = sys.argv[1:] if argv is None else argv
    # Subcommands beside serving: the trajectory viewer on an exported file (proxy/ui/view_command.py), the export
    # of a store to such a file (proxy/export_command.py), and pause/resume of a fleet (proxy/fleet_command.py).
    subcommands = {"view": view_main, "export": export_main, "fleet": fleet_main, "families": families_main}
    if argv[:1] and argv[0] in subcommands:
        return subcommands[argv[0]](argv[1:])
    try:
        args = parser.parse_args(argv)
        config = config_from_args(args)
        # Before anything logs (fetching the tokenizer files may): every line of the process in one format.
        configure_proxy_logging(config)
        if config.tokenizer_path is None:
            config = attrs.evolve(config, tokenizer_path=model_tokenizer_path(config.effective_tito_model))
        engine_config = engine_config_from_args(args, tokenizer_path=config.tokenizer_path)
    except (ConfigError, TokenizerFilesError) as exc:
        parser.error(str(exc))
    try:
        trio.run(serve_until_signalled, config, engine_config)
    except KeyboardInterrupt:
        pass  # a Ctrl-C before the signal handlers were installed: nothing was served yet
    except Exception as exc:
        # A crash is a log line too (its traceback a field of it), not a bare traceback in a JSON stream.
        cause = _first_leaf(exc)
        log.critical("the proxy stopped on an error: %s: %s", type(cause).__name__, cause, exc_info=True)
        return 1
    log.info("stopped")
    return 0


def _first_leaf(exc: BaseException) -> BaseException:
    """The first exception that is not a group (trio's nurseries wrap a failure in one group per level)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


if __name__ == "__main__":
    raise SystemExit(main())
