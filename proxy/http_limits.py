"""The proxy's flags as the HTTP server's limits (``serving/http_limits.py:HTTPLimits``), refused in the proxy's
own error table (``proxy/api/errors.py``): a 413, 408 or 431 reads like every other error of the API, with the request
id when the app has one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.api.errors import ApiError
from proxy.config import ProxyConfig
from serving.http_limits import HTTPLimits


def api_error_body(status: int, code: str, message: str, details: Mapping[str, Any]) -> bytes:
    """The body of ``code``'s row of the error table (its status is the table's; ``status`` agrees)."""
    return ApiError.of(code, message, details=details).to_body()


def http_limits(config: ProxyConfig) -> HTTPLimits:
    return HTTPLimits(
        max_body_bytes=config.max_body_bytes,
        max_header_bytes=config.max_header_bytes,
        header_read_timeout=config.header_read_timeout,
        body_read_timeout=config.body_read_timeout,
        keep_alive_timeout=config.keep_alive_timeout,
        error_body=api_error_body,
    )
