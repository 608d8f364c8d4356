"""Everything the routes need, built once at start-up from the configuration.

The routes are thin (parse, call a component, render); the components live here so that every route module
receives the same objects and the start-up order is in one place: tokenizer (the family's TITO tokenizer loaded
from ``--tokenizer-path``), the session registry with its trajectory store, the message parser (local or through
SGLang's parser endpoints via the upstream client), and the Prometheus metrics every controller reports to
(``proxy/observability/metrics.py``; hooks that do nothing with ``--no-metrics``).
"""

from __future__ import annotations

import attrs

from proxy.config import ProxyConfig
from proxy.controllers.context_window import ContextWindow
from proxy.controllers.gate import GateController
from proxy.controllers.generation import GenerationController
from proxy.controllers.lifecycle import LifecycleController
from proxy.controllers.session_registry import SessionRegistry
from proxy.controllers.store_leases import default_proxy_id, session_leases_for
from proxy.observability.metrics import NO_METRICS, MetricsHooks, metrics_for
from proxy.parsing import MessageParser, ParserConfig
from proxy.families import load_tito_tokenizer
from proxy.tokenization import TitoTokenizer
from proxy.trajectory.export import ExportOptions
from proxy.trajectory.session_config import SessionConfig
from proxy.trajectory.memory_store import InMemoryTrajectoryStore
from proxy.trajectory.store import TrajectoryStore
from proxy.upstream.client import SGLangClient


@attrs.define(eq=False)
class ProxyServices:
    """The proxy's long-lived components (one of each per process)."""

    config: ProxyConfig
    upstream: SGLangClient
    tokenizer: TitoTokenizer
    sessions: SessionRegistry
    parser: MessageParser
    #: the rollout gate (pause/resume around weight updates); every generation passes it
    gate: GateController
    #: the model's context window (--context-window, else the upstream's, else the tokenizer's)
    context_window: ContextWindow
    #: the process's life: serving, draining and stopping on SIGTERM/SIGINT (``proxy/controllers/lifecycle.py``)
    lifecycle: LifecycleController
    #: the Prometheus metrics (``--metrics``), or hooks that do nothing (``--no-metrics``)
    metrics: MetricsHooks = NO_METRICS

    @classmethod
    def build(cls, config: ProxyConfig, upstream: SGLangClient, store: TrajectoryStore | None = None) -> ProxyServices:
        if config.tokenizer_path is None:
            raise ValueError("ProxyConfig.tokenizer_path must be resolved before the services are built")
        tokenizer = load_tito_tokenizer(config.effective_tito_model, config.tokenizer_path)
        session_config = SessionConfig(
            max_steps_per_session=config.max_steps_per_session,
            export=ExportOptions(
                build_mode=config.trajectory_build_mode,
                export_all_checkpoints=config.export_all_checkpoints,
                record_token_versions=config.record_token_versions,
                mask_nonlast_version_tokens=config.mask_nonlast_version_tokens,
            ),
            ignore_cch_for_prefix_hash=config.ignore_cch_for_prefix_hash,
        )
        metrics = metrics_for(config.metrics)
        store = store or InMemoryTrajectoryStore()
        # A shared store (a fleet): sessions are leased in it; else every session is this process's.
        leases = session_leases_for(store, config.proxy_id or default_proxy_id(config.host, config.port),
                                    config.session_lease_seconds)
        sessions = SessionRegistry(tokenizer, store, session_config, metrics=metrics, leases=leases)
        parser = MessageParser(
            ParserConfig(
                tool_call_type=config.effective_tool_call_type,
                reasoning_type=config.effective_reasoning_type,
                tool_call_backend=config.tool_call_parse_backend,
                reasoning_backend=config.reasoning_parse_backend,
            ),
            upstream,
        )
        return cls(
            config=config, upstream=upstream, tokenizer=tokenizer, sessions=sessions, parser=parser,
            gate=GateController.new(abort_timeout=config.pause_abort_timeout, metrics=metrics),
            context_window=ContextWindow(upstream, config.context_window, config.tokenizer_path),
            lifecycle=LifecycleController(config.shutdown_grace, sessions.store), metrics=metrics,
        )

    def generation_controller(self) -> GenerationController:
        """A generation controller over these services (the chat route's; tests build their own)."""
        return GenerationController(
            self.config, self.sessions, self.upstream, self.parser, self.tokenizer, self.gate, self.context_window,
            self.lifecycle, self.metrics,
        )
