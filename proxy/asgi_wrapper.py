"""The shape every ASGI wrapper of the proxy shares: act on HTTP exchanges, pass anything else (lifespan) through.

``proxy/app.py`` stacks them around the quart app: ``proxy/request_id.py`` (outermost),
``proxy/observability/exchanges.py``, ``proxy/request_end.py``, ``proxy/access.py``, and innermost
``proxy/lean_http.py`` (the hot POSTs, served without quart).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, MutableMapping
from typing import Any


class HttpExchangeWrapper(ABC):
    """ASGI middleware base: :meth:`exchange` runs for each HTTP exchange; every other scope goes to ``app``."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        await self.exchange(scope, receive, send)

    @abstractmethod
    async def exchange(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        """Serve one HTTP exchange (each subclass's own job), calling ``self.app`` to pass it on."""


__all__ = ["HttpExchangeWrapper"]
