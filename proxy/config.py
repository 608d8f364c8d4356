"""Flags and ``DRESSAGE_PROXY_*`` environment variables -> one frozen configuration object.

Precedence: a command-line flag beats its environment variable, which beats the built-in default. Every flag
``--foo-bar`` has the variable ``DRESSAGE_PROXY_FOO_BAR``; boolean variables accept 1/0, true/false, yes/no, on/off.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Callable

import attrs

ENV_PREFIX = "DRESSAGE_PROXY_"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(ValueError):
    """A setting from the environment could not be understood."""


def env_name(flag: str) -> str:
    """``--sglang-router-url`` -> ``DRESSAGE_PROXY_SGLANG_ROUTER_URL``."""
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def parse_bool(text: str, name: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={text!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def parse_url_list(text: str) -> tuple[str, ...]:
    """Comma- or space-separated URLs; trailing slashes dropped so paths can be appended."""
    return tuple(part.rstrip("/") for part in text.replace(",", " ").split() if part)


def add_env_argument(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    flag: str,
    *,
    convert: Callable[[str], Any] = str,
    default: Any = None,
    help: str,
    flag_is_bool: bool = False,
    **kwargs: Any,
) -> None:
    """Add ``flag`` whose default comes from its ``DRESSAGE_PROXY_*`` variable when that is set."""
    name = env_name(flag)
    raw = os.environ.get(name)
    if raw is not None:
        try:
            default = parse_bool(raw, name) if flag_is_bool else convert(raw)
        except ValueError as exc:
            raise ConfigError(f"{name}={raw!r}: {exc}") from None
    help_text = f"{help} [env {name}]"
    if flag_is_bool:
        parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=bool(default), help=help_text)
    else:
        parser.add_argument(flag, type=convert, default=default, help=help_text, **kwargs)


@attrs.frozen
class ProxyConfig:
    """Everything the proxy process needs to know, fixed at start-up."""

    host: str = "127.0.0.1"
    port: int = 8800
    #: folder with tokenizer.json / tokenizer_config.json (and chat_template.jinja for Qwen3.5)
    tokenizer_path: Path | None = None
    #: SGLang router or server base URL; None starts the embedded engine in-process
    sglang_router_url: str | None = None
    #: SGLang worker URLs, for /abort_request and /pause_generation (the gateway has neither)
    sglang_worker_urls: tuple[str, ...] = ()
    #: maximum concurrent upstream connections (sized above the expected concurrency, stack-notes 4)
    upstream_max_connections: int = 512

    @property
    def uses_embedded_engine(self) -> bool:
        return self.sglang_router_url is None

    def summary(self) -> dict[str, Any]:
        """A JSON-ready view for /health and the start-up log."""
        return {
            "host": self.host,
            "port": self.port,
            "tokenizer_path": str(self.tokenizer_path) if self.tokenizer_path else None,
            "sglang_router_url": self.sglang_router_url,
            "sglang_worker_urls": list(self.sglang_worker_urls),
            "embedded_engine": self.uses_embedded_engine,
        }


def add_proxy_arguments(parser: argparse.ArgumentParser) -> None:
    add_env_argument(parser, "--host", default="127.0.0.1", help="address to listen on")
    add_env_argument(parser, "--port", convert=int, default=8800, help="port to listen on")
    add_env_argument(
        parser, "--tokenizer-path", convert=Path, default=None,
        help="tokenizer folder (default: the verified Qwen3 files from dressage-tokenizers)",
    )
    add_env_argument(
        parser, "--sglang-router-url", default=None,
        help="SGLang router or server URL; without it the embedded engine runs in-process",
    )
    add_env_argument(
        parser, "--sglang-worker-urls", convert=parse_url_list, default=(),
        help="SGLang worker URLs (comma-separated) for abort and pause, which the router does not forward",
    )
    add_env_argument(
        parser, "--upstream-max-connections", convert=int, default=512,
        help="connection pool size towards SGLang",
    )


def proxy_config_from_args(args: argparse.Namespace) -> ProxyConfig:
    router = args.sglang_router_url.rstrip("/") if args.sglang_router_url else None
    return ProxyConfig(
        host=args.host,
        port=args.port,
        tokenizer_path=args.tokenizer_path,
        sglang_router_url=router,
        sglang_worker_urls=tuple(args.sglang_worker_urls),
        upstream_max_connections=args.upstream_max_connections,
    )
