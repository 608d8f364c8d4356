"""The proxy's log lines: where they go, in which format, from which level, and the ids every line carries.

``dressage-proxy`` calls :func:`configure_proxy_logging` first thing (``proxy/cli.py:main``): one handler on stderr,
formatted by ``serving/log_format.py`` (``--log-format auto|text|json``: one JSON object per line, or text; auto is
text on a terminal), at ``--log-level`` for the proxy's loggers (``dressage_proxy.*``) and the embedded engine's
(``engine.*``, which run in the same process and so come out in the same format); libraries only from ``warning``.

:class:`ExchangeIdsFilter` runs on every line the handler writes and adds the ``request_id`` of the HTTP exchange
the logging task serves (``proxy/request_id.py``) and its ``session_id`` once the route read it
(``proxy/session_context.py``), each only when there is one; a ``session_id`` the call gave itself with ``extra=``
(the reaper's lines, which serve no exchange) is kept. Python warnings and transformers' lines are routed through
the handler too, so that a JSON stream stays all JSON. docs/observability.md ("Logs") is the operator's view.
"""

from __future__ import annotations

import logging
from typing import TextIO

from transformers.utils import logging as transformers_logging

from proxy.config import ProxyConfig
from proxy.request_id import current_request_id
from proxy.session_context import current_session_id
from serving.log_format import configure_logging

#: the loggers that log at --log-level (everything else from warning): the proxy's and the embedded engine's
PROXY_NAMESPACES = ("dressage_proxy", "engine")


class ExchangeIdsFilter(logging.Filter):
    """Adds ``request_id`` and ``session_id`` to a record when the logging task serves an exchange (two context
    variable reads per line: the hot path's cost of the ids)."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = record.__dict__
        if "request_id" not in fields and (request_id := current_request_id()) is not None:
            record.request_id = request_id
        if "session_id" not in fields and (session_id := current_session_id()) is not None:
            record.session_id = session_id
        return True


def configure_proxy_logging(config: ProxyConfig, stream: TextIO | None = None) -> logging.Handler:
    """Install the proxy process's log handler (``config.log_format``, ``config.log_level``) on ``stream`` (default
    stderr); returns it."""
    handler = configure_logging(
        config.log_format, config.log_level, PROXY_NAMESPACES, filters=(ExchangeIdsFilter(),), stream=stream,
    )
    logging.captureWarnings(True)
    # transformers writes through a handler of its own ("[transformers] message"); through ours instead.
    transformers_logging.disable_default_handler()
    transformers_logging.enable_propagation()
    return handler


__all__ = ["PROXY_NAMESPACES", "ExchangeIdsFilter", "configure_proxy_logging"]
