"""The HTTP library behind the SGLang client: the only module that imports it or catches its exceptions.

The library is ``httpx2`` (an API-compatible maintained fork of httpx, stack-notes.md pitfall 5), chosen by
benchmark (``bench/overhead.py``): under 64 concurrent generations httpx 0.28.1's connection pool scanned every
pooled connection (a ``select()`` each) on every request, about half of the proxy's CPU, and httpx2 halved the
proxy's CPU per request. It is imported under the name ``httpx`` so the rest of this module (and the tests that
import ``httpx`` from here) read the same; nothing else in the project names the upstream library.

Settings (stack-notes.md pitfalls 3-5): no read timeout (a prefill, a token gap or a request blocked behind a
pause can last minutes), pool limits well above the expected concurrency, keep-alive for every pooled
connection. Callers read streams to their end after ``[DONE]`` so connections return to the pool.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from types import TracebackType
from typing import Any

import httpx2 as httpx

from proxy.upstream.errors import (
    TimeoutPhase,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStreamCut,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from proxy.upstream.events import Partial

__all__ = ["HTTPErrorTranslator", "close_response", "httpx", "make_async_client", "make_timeout"]


def make_async_client(
    *,
    max_connections: int,
    connect_timeout: float | None,
    write_timeout: float | None,
    pool_timeout: float | None,
    keepalive_expiry: float | None,
) -> httpx.AsyncClient:
    """An ``AsyncClient`` for SGLang: read timeout None, ``max_connections`` pooled and kept alive."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=connect_timeout, read=None, write=write_timeout, pool=pool_timeout),
        limits=httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=keepalive_expiry,
        ),
        # SGLang and the gateway are plain HTTP/1.1 services; no proxies from the environment.
        trust_env=False,
        follow_redirects=False,
    )


def make_timeout(
    *, connect: float | None, read: float | None, write: float | None, pool: float | None
) -> httpx.Timeout:
    """A per-request timeout (control calls may have a read timeout; generation requests never do)."""
    return httpx.Timeout(connect=connect, read=read, write=write, pool=pool)


class HTTPErrorTranslator:
    """Context manager turning httpx exceptions into :class:`UpstreamError` subclasses: the only such place.

    ``partial`` is set for the body of a stream (after the response headers): a connection lost there is an
    :class:`UpstreamStreamCut` carrying ``partial()``; before the headers it is :class:`UpstreamUnavailable`.
    Only ``httpx.HTTPError`` is caught; ``trio.Cancelled`` and every other exception pass through unchanged.
    Reusable and cheap, so a stream enters it once per read.
    """

    __slots__ = ("url", "partial")

    def __init__(self, url: str, *, partial: Callable[[], Partial] | None = None) -> None:
        self.url = url
        self.partial = partial

    def __enter__(self) -> HTTPErrorTranslator:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None or not isinstance(exc, httpx.HTTPError):
            return
        raise self.translate(exc) from exc

    def translate(self, exc: httpx.HTTPError) -> UpstreamError:
        url = self.url
        partial = self.partial() if self.partial is not None else None
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, httpx.TimeoutException):
            phase: TimeoutPhase = (
                "connect"
                if isinstance(exc, httpx.ConnectTimeout)
                else "write"
                if isinstance(exc, httpx.WriteTimeout)
                else "pool"
                if isinstance(exc, httpx.PoolTimeout)
                else "read"
            )
            return UpstreamTimeout(f"SGLang {phase} timeout ({detail})", phase=phase, url=url, partial=partial)
        if isinstance(exc, httpx.ConnectError):
            return UpstreamUnavailable(f"cannot connect to SGLang ({detail})", url=url)
        if isinstance(exc, (httpx.DecodingError, httpx.LocalProtocolError)):
            return UpstreamProtocolError(f"HTTP protocol error ({detail})", url=url, partial=partial)
        if isinstance(exc, (httpx.ReadError, httpx.WriteError, httpx.CloseError, httpx.RemoteProtocolError)):
            if partial is not None:
                return UpstreamStreamCut(f"SGLang stream cut ({detail})", url=url, partial=partial)
            return UpstreamUnavailable(f"connection to SGLang lost ({detail})", url=url)
        return UpstreamUnavailable(f"SGLang request failed ({detail})", url=url, partial=partial)


async def close_response(response: Any, chunks: AsyncGenerator[bytes, None] | None) -> None:
    """Close a streamed response now (the server sees the disconnect) and unwind its body iterator.

    httpx's body iterator is a chain of six nested async generators, and closing the outer one leaves the inner
    ones suspended until garbage collection, where trio warns about each of them (encode/httpx#3686). Once the
    response is closed, one more step of the iterator fails at once (the socket is gone) and that exception
    finishes every generator of the chain. Errors are irrelevant here: the response is being thrown away.
    Call it inside a shielded scope; nothing here waits on the network.
    """
    try:
        await response.aclose()
    finally:
        if chunks is not None:
            for _ in range(10_000):  # bounded: only chunks h11 already buffered can come back
                try:
                    await chunks.__anext__()
                except StopAsyncIteration:
                    break
                except Exception:  # httpx.ReadError "socket was already closed", or similar
                    break
            await chunks.aclose()
