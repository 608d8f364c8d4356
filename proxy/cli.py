"""``dressage-proxy``: parse flags, start the embedded engine when no SGLang URL is given, serve the app."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import attrs
import trio

from engine import EngineConfig, EngineHandle, serve_engine
from engine.cli import add_engine_arguments, engine_config_from_args
from proxy.app import create_proxy_app
from proxy.config import ConfigError, ProxyConfig, add_proxy_arguments, proxy_config_from_args, sglang_ssl_context
from proxy.controllers.session_reaper import expiry_policy, run_reaper
from proxy.service_flags import add_service_arguments, service_settings_from_args
from proxy.services import ProxyServices
from proxy.upstream.client import SGLangClient
from serving.http_server import serve_app
from serving.tokenizer_files import TokenizerFilesError, model_tokenizer_path


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
    )
    add_proxy_arguments(parser)
    add_service_arguments(parser)
    add_engine_arguments(parser, include_server=False)
    return parser


def config_from_args(args: argparse.Namespace) -> ProxyConfig:
    """The whole configuration from :func:`build_parser`'s arguments (ConfigError for an unusable setting)."""
    return attrs.evolve(proxy_config_from_args(args), **service_settings_from_args(args))


def say(message: str) -> None:
    print(f"dressage-proxy: {message}", file=sys.stderr, flush=True)


async def run_proxy(
    config: ProxyConfig, engine_config: EngineConfig | None = None, *, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    """Run until cancelled. Without a router URL the embedded engine serves on an ephemeral loopback port first,
    and the proxy talks to it over HTTP exactly as it would to SGLang (one code path for both)."""
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
            say(f"no --sglang-router-url given: embedded engine started in-process at {engine_handle.url}")
            router_url, worker_urls = engine_handle.url, (engine_handle.url,)
        else:
            router_url, worker_urls = config.sglang_router_url, config.sglang_worker_urls
        ssl_context = sglang_ssl_context(config.sglang_ca_file)
        async with SGLangClient(
            router_url, worker_urls, max_connections=config.upstream_max_connections, ssl_context=ssl_context
        ) as upstream:
            # Loading the tokenizer takes about a second; keep the event loop (and the engine) responsive.
            services = await trio.to_thread.run_sync(ProxyServices.build, config, upstream)
            app = create_proxy_app(services)
            nursery.start_soon(run_reaper, services.sessions, expiry_policy(config))
            # Known from the start when the upstream can say; otherwise asked again when a request needs it.
            await services.context_window.refresh()
            url = await nursery.start(serve_app, app, config.host, config.port)
            say(f"listening on {url} (upstream {router_url})")
            task_status.started(ProxyHandle(url=url, engine=engine_handle, services=services))
            await trio.sleep_forever()


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        parser = build_parser()
    except ConfigError as exc:
        print(f"dressage-proxy: error: {exc}", file=sys.stderr)
        return 2
    try:
        args = parser.parse_args(argv)
        config = config_from_args(args)
        if config.tokenizer_path is None:
            config = attrs.evolve(config, tokenizer_path=model_tokenizer_path(config.effective_tito_model))
        engine_config = engine_config_from_args(args, tokenizer_path=config.tokenizer_path)
    except (ConfigError, TokenizerFilesError) as exc:
        parser.error(str(exc))
    try:
        trio.run(run_proxy, config, engine_config)
    except KeyboardInterrupt:
        say("stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
