"""Flags and ``DRESSAGE_PROXY_*`` environment variables -> one frozen configuration object.

Precedence: a command-line flag beats its environment variable, which beats the built-in default. Every flag
``--foo-bar`` has the variable ``DRESSAGE_PROXY_FOO_BAR``; boolean variables accept 1/0, true/false, yes/no, on/off.
"""

from __future__ import annotations

import argparse
import os
import re
import ssl
from pathlib import Path
from typing import Any, Callable, TypeVar

import attrs

T = TypeVar("T")

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


BUILD_MODES = ("concat", "last_step")
PARSE_BACKENDS = ("local", "sglang_api", "hybrid")


@attrs.frozen
class ProxyConfig:
    """Everything the proxy process needs to know, fixed at start-up (spec section 13)."""

    host: str = "127.0.0.1"
    port: int = 8800
    #: folder with tokenizer.json / tokenizer_config.json (and chat_template.jinja for Qwen3.5)
    tokenizer_path: Path | None = None
    #: SGLang router or server base URL; None starts the embedded engine in-process
    sglang_router_url: str | None = None
    #: SGLang worker URLs, for /abort_request and /pause_generation (the gateway has neither)
    sglang_worker_urls: tuple[str, ...] = ()
    #: PEM file of the CA certificates trusted for https:// SGLang URLs, instead of the system store
    sglang_ca_file: Path | None = None
    #: maximum concurrent upstream connections (sized above the expected concurrency, stack-notes 4)
    upstream_max_connections: int = 512
    #: concat (TITO concatenation along the path) or last_step (re-render the last step at finalize)
    trajectory_build_mode: str = "concat"
    #: the model family (--model-family, alias --trajectory-build-model; proxy/families/): selects the TITO
    #: tokenizer, the tool-call format and the reasoning format together
    trajectory_build_model: str = "qwen3"
    #: overrides the TITO family of the build model
    tito_model: str | None = None
    #: how the family was chosen: flag, default, template_sha256, structure or unrecognised
    #: (proxy/families/detection.py)
    model_family_source: str = "default"
    #: the one start-up warning about the family (a template that is not a family's official one), or None
    model_family_warning: str | None = None
    #: tokens of the model's context window; None: the upstream's own limit decides
    context_window: int | None = None
    #: clamp a request's max_tokens to what is left of the context window
    dynamic_max_tokens: bool = True
    #: overrides every request's sampling temperature upstream
    rollout_temperature: float | None = None
    record_token_versions: bool = False
    mask_nonlast_version_tokens: bool = False
    #: continue interrupted generations after resume instead of regenerating them
    partial_rollout: bool = False
    tool_call_parse_backend: str = "sglang_api"
    reasoning_parse_backend: str = "sglang_api"
    #: SGLang tool-call parser name (qwen25 or qwen3_coder); None: the family's
    model_tool_call_type: str | None = None
    #: SGLang reasoning parser name (qwen3); None: the build model's
    model_reasoning_type: str | None = None
    use_rollout_routing_replay: bool = False
    export_all_checkpoints: bool = False
    ignore_cch_for_prefix_hash: bool = False
    #: steps a session may hold; None: unlimited (DRESSAGE_PROXY_MAX_STEPS_PER_SESSION)
    max_steps_per_session: int | None = None
    #: seconds a request may wait for a resume before it gets 503 with Retry-After
    pause_wait_timeout: float = 600.0
    #: seconds a pause waits for the upstream to confirm its aborts before it cuts the requests itself
    pause_abort_timeout: float = 30.0
    #: add prompt_token_ids, token_ids, token_logprobs, weight_versions to every response
    return_token_ids: bool = False
    #: the headers a request's session id is read from, in precedence order (then the body field, then the
    #: X-SMG-Routing-Key header)
    session_id_headers: tuple[str, ...] = ("X-Session-Id",)
    #: the body field read after the headers; None: never read from the body
    session_id_body_field: str | None = "session_id"
    # -- the service's limits, budget, shutdown and access (proxy/service_flags.py, docs/operations.md)
    #: largest request body in bytes (413 request_too_large beyond)
    max_body_bytes: int = 32 * 1024**2
    #: most messages (or input items) in one request (400 too_many_messages beyond)
    max_messages: int = 10_000
    #: largest request head (request line and headers) in bytes
    max_header_bytes: int = 64 * 1024
    #: seconds to receive a request's head, and its whole body (408 beyond)
    header_read_timeout: float = 30.0
    body_read_timeout: float = 120.0
    #: seconds an idle keep-alive connection stays open
    keep_alive_timeout: float = 120.0
    #: seconds to connect to SGLang; seconds SGLang may stay silent within one request (None: unbounded)
    upstream_connect_timeout: float = 10.0
    upstream_read_timeout: float | None = None
    #: auto (each worker's /server_info at start), cumulative or incremental (proxy/upstream/stream_mode.py)
    upstream_stream_mode: str = "auto"
    #: seconds without a request before a session is finalized (reason idle_timeout); None: never
    session_idle_timeout: float | None = 3600.0
    #: seconds a finalized session's tombstone and a drained record are kept
    tombstone_ttl: float = 86400.0
    #: approximate bytes sessions and the store may hold before /health is degraded; None: no budget
    memory_budget: int | None = 8 * 1024**3
    #: seconds between glibc malloc_trim calls (proxy/controllers/malloc_trim.py); None: never
    malloc_trim_interval: float | None = 60.0
    #: seconds in-flight generations get to finish on SIGTERM/SIGINT
    shutdown_grace: float = 30.0
    #: bearer keys of the agent API and of the admin (rollout control, trajectories); never shown or logged
    api_key: str | None = attrs.field(default=None, repr=False)
    admin_key: str | None = attrs.field(default=None, repr=False)
    #: origins that get CORS headers; empty: none
    cors_origins: tuple[str, ...] = ()
    #: log lines as JSON objects or text; auto: text on a terminal, JSON otherwise (docs/observability.md)
    log_format: str = "auto"
    log_level: str = "info"
    #: Prometheus metrics at GET /metrics; off: nothing is counted and /metrics is 404 (the bench's baseline)
    metrics: bool = True
    #: where journals and segments are kept (``proxy/trajectory/stores/``): memory here, for programs that build a
    #: configuration in code (tests); the command line's default is ``sqlite`` (a file in the data folder)
    store: str = "memory"
    #: seconds a draining read's lease lasts before its unacknowledged segments are readable again
    read_lease_seconds: float = 300.0
    #: this proxy's name in a fleet's session leases (None: host:port:pid, chosen at start)
    proxy_id: str | None = None
    #: seconds a fleet session's lease outlives its owner's last sign of life (shared stores only)
    session_lease_seconds: float = 15.0

    @property
    def uses_embedded_engine(self) -> bool:
        return self.sglang_router_url is None

    @property
    def effective_tito_model(self) -> str:
        """The canonical name of the family whose TITO tokenizer is loaded."""
        from proxy.families import family_name  # noqa: PLC0415 - the registry loads the tokenizer code

        return family_name(self.tito_model or self.trajectory_build_model)

    @property
    def effective_tool_call_type(self) -> str | None:
        from proxy.families import get_family  # noqa: PLC0415

        return self.model_tool_call_type or get_family(self.trajectory_build_model).tool_call_parser

    @property
    def effective_reasoning_type(self) -> str | None:
        from proxy.families import get_family  # noqa: PLC0415

        return self.model_reasoning_type or get_family(self.trajectory_build_model).reasoning_parser

    def summary(self) -> dict[str, Any]:
        """A JSON-ready view for /health and the start-up log."""
        view = attrs.asdict(self)
        view["tokenizer_path"] = str(self.tokenizer_path) if self.tokenizer_path else None
        view["sglang_ca_file"] = str(self.sglang_ca_file) if self.sglang_ca_file else None
        view["sglang_worker_urls"] = list(self.sglang_worker_urls)
        # whether a key is set, never the key
        view["api_key"] = self.api_key is not None
        view["admin_key"] = self.admin_key is not None
        view["cors_origins"] = list(self.cors_origins)
        view["embedded_engine"] = self.uses_embedded_engine
        view["tito_model"] = self.effective_tito_model
        view["model_tool_call_type"] = self.effective_tool_call_type
        view["model_reasoning_type"] = self.effective_reasoning_type
        return view


def sglang_ssl_context(ca_file: Path | None) -> ssl.SSLContext | None:
    """The TLS context for https:// SGLang URLs: None (the client's default: system CAs, hostname verification)
    without a CA file; with one, only the CA certificates of that PEM file are trusted (hostnames still checked).
    Raises ConfigError if the file cannot be loaded."""
    if ca_file is None:
        return None
    try:
        context = ssl.create_default_context(cafile=str(ca_file))
    except (OSError, ValueError) as exc:  # missing file, not PEM (ssl.SSLError is an OSError)
        raise ConfigError(f"--sglang-ca-file {str(ca_file)!r}: cannot load CA certificates ({exc})") from None
    context.set_alpn_protocols(["http/1.1"])
    return context


def _model_family(args: argparse.Namespace) -> tuple[str, str, str | None]:
    """(family name, how it was chosen, the start-up warning): ``--model-family`` (or its older spelling
    ``--trajectory-build-model``), else the family of the template at ``--tokenizer-path`` (qwen3 without one)."""
    from proxy.families import detect_family, family_name  # noqa: PLC0415 - loads tokenizers; only when needed
    from proxy.tokenization.tito import TemplateMismatchError  # noqa: PLC0415

    chosen = args.model_family or args.trajectory_build_model
    if chosen is not None:
        return family_name(chosen), "flag", None
    if args.tokenizer_path is None:
        return "qwen3", "default", None
    try:
        detection = detect_family(args.tokenizer_path)
    except (TemplateMismatchError, FileNotFoundError) as exc:
        raise ConfigError(f"--tokenizer-path: {exc}; choose --model-family") from None
    return detection.family.name, detection.how, detection.warning


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"{value} is not a positive integer")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{text} is not a positive number of seconds")
    return value


def zero_means_unset(convert: Callable[[str], T]) -> Callable[[str], T | None]:
    """``convert``, except that 0 or an empty string means unset (None): the flags whose 0 means "no limit"."""

    def optional(text: str) -> T | None:
        return convert(text) if text.strip() not in ("", "0") else None

    optional.__name__ = f"optional {convert.__name__}"
    return optional


optional_positive_int = zero_means_unset(positive_int)


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an RFC 9110 token


def header_names(text: str) -> tuple[str, ...]:
    """Comma- or space-separated HTTP header names (at least one)."""
    names = tuple(text.replace(",", " ").split())
    if not names:
        raise ValueError("give at least one header name")
    for name in names:
        if not _HEADER_NAME.match(name):
            raise ValueError(f"{name!r} is not an HTTP header name")
    return names


def optional_body_field(text: str) -> str | None:
    """A top-level body field name; empty: none."""
    return text.strip() or None


class _AppendToEnvDefault(argparse.Action):
    """A repeatable flag whose values (each a list) replace its default (the built-in or the env var's) at the
    first use on the command line and extend it after that: ``--x A --x B`` is ``(A, B)`` whatever the env says."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: Any = None) -> None:
        current = getattr(namespace, self.dest)
        setattr(namespace, self.dest, (() if current is self.default else tuple(current)) + tuple(values))


def choice(*options: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in options:
            raise ValueError(f"{text!r} is not one of {', '.join(options)}")
        return text

    convert.__name__ = "choice"
    return convert


def add_proxy_arguments(parser: argparse.ArgumentParser) -> None:
    server = parser.add_argument_group("server and upstream")
    add_env_argument(server, "--host", default="127.0.0.1", help="address to listen on")
    add_env_argument(server, "--port", convert=int, default=8800, help="port to listen on")
    add_env_argument(
        server, "--tokenizer-path", convert=Path, default=None,
        help="tokenizer folder (default: the verified files of the build model's family, from dressage-tokenizers)",
    )
    add_env_argument(
        server, "--sglang-router-url", default=None,
        help="SGLang router or server URL; without it the embedded engine runs in-process",
    )
    add_env_argument(
        server, "--sglang-worker-urls", convert=parse_url_list, default=(),
        help="SGLang worker URLs (comma-separated) for abort and pause, which the router does not forward",
    )
    add_env_argument(
        server, "--sglang-ca-file", convert=Path, default=None, metavar="PEM",
        help="CA certificates (PEM) to trust for https:// SGLang URLs instead of the system store",
    )
    add_env_argument(
        server, "--upstream-max-connections", convert=positive_int, default=512,
        help="connection pool size towards SGLang",
    )

    identity = parser.add_argument_group("session identity")
    add_env_argument(
        identity, "--session-id-header", convert=header_names, default=("X-Session-Id",), metavar="HEADER",
        action=_AppendToEnvDefault,
        help="a header that carries the session id; repeat it (or give a comma-separated list) in precedence "
        "order, e.g. --session-id-header X-Rollout-Session --session-id-header X-Session-Id to make your own "
        "header win over one the agent sends (default: X-Session-Id; then the body field, then X-SMG-Routing-Key)",
    )
    add_env_argument(
        identity, "--session-id-body-field", convert=optional_body_field, default="session_id", metavar="FIELD",
        help="the request body field read for the session id when none of the headers is present (an empty value: "
        "never read the body; default: session_id)",
    )

    from proxy.families import family_names  # noqa: PLC0415 - the registry loads the tokenizer code

    families = family_names()
    model = parser.add_argument_group("model, tokenization and parsing")
    add_env_argument(
        model, "--model-family", convert=choice(*families), default=None,
        help=f"model family ({', '.join(families)}; dressage-proxy families describes them): sets the TITO "
        "tokenizer and the parsers unless overridden; generic: any template, a full render every step, each step "
        "its own segment (default: detected from the chat template at --tokenizer-path; qwen3 without one)",
    )
    add_env_argument(model, "--trajectory-build-model", convert=choice(*families), default=None,
                     help="the older name of --model-family (--model-family wins when both are given)")
    add_env_argument(model, "--tito-model", convert=choice(*families), default=None,
                     help="TITO tokenizer family (default: the model family's)")
    add_env_argument(model, "--model-tool-call-type", convert=choice("qwen25", "qwen3_coder"), default=None,
                     help="tool-call format / SGLang parser name (default: the build model's)")
    add_env_argument(model, "--model-reasoning-type", convert=choice("qwen3"), default=None,
                     help="reasoning format / SGLang parser name (default: qwen3)")
    add_env_argument(model, "--tool-call-parse-backend", convert=choice(*PARSE_BACKENDS), default="sglang_api",
                     help="who parses tool calls: local, sglang_api (/parse_function_call) or hybrid (SGLang, "
                     "local on failure)")
    add_env_argument(model, "--reasoning-parse-backend", convert=choice(*PARSE_BACKENDS), default="sglang_api",
                     help="who separates reasoning: local, sglang_api (/separate_reasoning) or hybrid")

    generation = parser.add_argument_group("generation")
    add_env_argument(generation, "--context-window", convert=optional_positive_int, default=None,
                     help="the model's context window in tokens: a prompt that fills it gets 400 context_overflow")
    add_env_argument(generation, "--dynamic-max-tokens", flag_is_bool=True, default=True,
                     help="clamp max_tokens to what is left of the context window (--no-dynamic-max-tokens: off)")
    add_env_argument(generation, "--rollout-temperature", convert=float, default=None,
                     help="override every request's temperature upstream")
    add_env_argument(generation, "--return-token-ids", flag_is_bool=True, default=False,
                     help="add prompt_token_ids, token_ids, token_logprobs, weight_versions to every response")
    add_env_argument(generation, "--dressage-partial-rollout", flag_is_bool=True, default=False,
                     help="continue generations interrupted by a pause after resume (otherwise regenerate them)")
    add_env_argument(generation, "--pause-wait-timeout", convert=float, default=600.0,
                     help="seconds a request may wait for a resume before it gets 503 with Retry-After")
    add_env_argument(generation, "--pause-abort-timeout", convert=positive_float, default=30.0,
                     help="seconds a pause waits for the upstream to confirm its aborts; then the proxy cuts its "
                     "own requests (keeping what they delivered) and acknowledges (default 30)")
    add_env_argument(generation, "--use-rollout-routing-replay", flag_is_bool=True, default=False,
                     help="request and record MoE routed experts (R3)")

    trajectory = parser.add_argument_group("trajectories")
    add_env_argument(trajectory, "--trajectory-build-mode", convert=choice(*BUILD_MODES), default="concat",
                     help="concat: TITO concatenation along each chain; last_step: re-render the last step")
    add_env_argument(trajectory, "--record-token-versions", flag_is_bool=True, default=False,
                     help="store the weight version of every generated token")
    add_env_argument(trajectory, "--mask-nonlast-version-tokens", flag_is_bool=True, default=False,
                     help="at export, mask generated tokens whose version is not the segment's last")
    add_env_argument(trajectory, "--export-all-checkpoints", flag_is_bool=True, default=False,
                     help="export intermediate checkpoints too, not only the terminal ones")
    add_env_argument(trajectory, "--ignore-cch-for-prefix-hash", flag_is_bool=True, default=False,
                     help="normalize cch=... billing hashes when matching messages (stored messages unchanged)")
    add_env_argument(trajectory, "--max-steps-per-session", convert=optional_positive_int, default=None,
                     help="steps a session may hold before new requests get 400 max_steps_exceeded (0: unlimited)")


def proxy_config_from_args(args: argparse.Namespace) -> ProxyConfig:
    """Raises ConfigError for a setting that cannot be used (a CA file that does not load). The service flags
    (``proxy/service_flags.py``) are added by ``proxy/cli.py:config_from_args``."""
    router = args.sglang_router_url.rstrip("/") if args.sglang_router_url else None
    sglang_ssl_context(args.sglang_ca_file)  # fail at start-up, with the flag's name, not at the first request
    family, source, warning = _model_family(args)
    return ProxyConfig(
        host=args.host,
        port=args.port,
        tokenizer_path=args.tokenizer_path,
        sglang_router_url=router,
        sglang_worker_urls=tuple(args.sglang_worker_urls),
        sglang_ca_file=args.sglang_ca_file,
        upstream_max_connections=args.upstream_max_connections,
        trajectory_build_mode=args.trajectory_build_mode,
        trajectory_build_model=family,
        tito_model=args.tito_model,
        model_family_source=source,
        model_family_warning=warning,
        context_window=args.context_window,
        dynamic_max_tokens=args.dynamic_max_tokens,
        rollout_temperature=args.rollout_temperature,
        record_token_versions=args.record_token_versions,
        mask_nonlast_version_tokens=args.mask_nonlast_version_tokens,
        partial_rollout=args.dressage_partial_rollout,
        tool_call_parse_backend=args.tool_call_parse_backend,
        reasoning_parse_backend=args.reasoning_parse_backend,
        model_tool_call_type=args.model_tool_call_type,
        model_reasoning_type=args.model_reasoning_type,
        use_rollout_routing_replay=args.use_rollout_routing_replay,
        export_all_checkpoints=args.export_all_checkpoints,
        ignore_cch_for_prefix_hash=args.ignore_cch_for_prefix_hash,
        max_steps_per_session=args.max_steps_per_session,
        pause_wait_timeout=args.pause_wait_timeout,
        pause_abort_timeout=args.pause_abort_timeout,
        return_token_ids=args.return_token_ids,
        session_id_headers=tuple(args.session_id_header),
        session_id_body_field=args.session_id_body_field,
    )
