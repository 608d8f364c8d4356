"""The SGLang client: ``/generate`` streamed into token events, abort, pause, versions and parser endpoints.

Trio + the HTTP/1.1 client of ``_httplib`` (trio sockets and h11). Decoding is the sans-IO
``chunks.ChunkDecoder``; every socket, h11 or timeout error is translated by ``_http_connection.translate`` and
every error status by ``errors.error_from_response``, so callers only ever see ``errors.UpstreamError`` subclasses (or
``trio.Cancelled``, which is never caught).

URLs. ``router_url`` serves generation, ``/model_info`` and ``/v1/models``: a gateway, or a single SGLang server.
The gateway has no abort, pause, continue, weight-update or ``/parse_function_call`` routes
(sglang-protocol.md §4.1), so those go to ``worker_urls``: abort, pause, continue and updates are sent to
**every** worker (a rid lives on only one of them; SGLang ignores unknown rids), the parser endpoints to the
first worker (or the router when there are none). Without worker URLs, ``abort`` sends nothing and returns
False: the caller then aborts by closing the stream (SGLang aborts a disconnected stream about 2 s later);
pause, continue and updates raise ``UpstreamNotConfigured``. For one server without a gateway use
``SGLangClient.single_server(url)``.

Connections. Generation (``/generate``, streamed or not) and the parser endpoints share one pool of
``max_connections``; control calls (abort, pause, continue, flush, weight updates, and the information routes
``/model_info``, ``/server_info``, ``/v1/models`` that health checks read) have a pool of their own, so that an
abort or a pause is never queued behind the open streams holding every generation connection (issue 21 item 3).

Streams. ``generate_stream`` returns a :class:`~proxy.upstream.generate_stream.GenerateStream`, used as
``async with ... as events: async for event in events`` (that module has its lifecycle).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from proxy.upstream import wire_json
from proxy.upstream._httplib import HTTPClient, PoolStatistics
from proxy.upstream.chunks import ChunkDecoder
from proxy.upstream.errors import (
    UpstreamError,
    UpstreamHTTPError,
    UpstreamNotConfigured,
    UpstreamProtocolError,
    error_from_response,
)
from proxy.upstream.events import (
    ClientStatistics,
    Finished,
    FunctionCallParse,
    ModelCard,
    ModelInfo,
    ReasoningParse,
    WeightUpdateResult,
)
from proxy.upstream.generate_stream import ClientCounters, GenerateStream
from proxy.upstream.request_ids import check_rid, new_rid

if TYPE_CHECKING:
    from proxy.upstream._httplib import SSLContext

PauseMode = Literal["abort", "retract", "in_place"]
PAUSE_MODES: tuple[PauseMode, ...] = ("abort", "retract", "in_place")
ROUTING_KEY_HEADER = "X-SMG-Routing-Key"
_CONTROL = object()  # "use the control-call timeout"


class SGLangClient:
    """One pooled HTTP client for an SGLang deployment. Use as ``async with SGLangClient(...) as client``."""

    def __init__(
        self,
        router_url: str,
        worker_urls: Sequence[str] = (),
        *,
        max_connections: int = 1024,
        connect_timeout: float | None = 10.0,
        write_timeout: float | None = 60.0,
        pool_timeout: float | None = 60.0,
        control_timeout: float | None = 60.0,
        generation_read_timeout: float | None = None,
        keepalive_expiry: float | None = 60.0,
        drain_timeout: float = 5.0,
        control_connections: int = 64,
        incremental_streaming: bool = False,
        ssl_context: SSLContext | None = None,
    ) -> None:
        """
        ``max_connections``: pool size, i.e. the most concurrent requests (streams hold one each).
        ``connect_timeout`` / ``write_timeout`` / ``pool_timeout``: timeouts for every request (connecting,
        sending, waiting for a pool slot).
        ``generation_read_timeout``: the longest SGLang may stay silent between two reads of one ``/generate``
        (the response head, then each piece of a stream); past it the generation fails with an
        ``UpstreamTimeout`` of phase ``read`` carrying its ``partial``. None (the default): unbounded, since long
        prefills, token gaps and requests held by a pause are no fault; set it above the longest of those.
        ``keepalive_expiry``: how long an idle connection is kept for reuse.
        ``control_timeout``: read timeout of short calls (abort, model info, parsers); pause, continue and
        weight updates wait without one, since SGLang answers them only once in-flight requests have returned.
        ``drain_timeout``: how long to read a finished stream to its end before dropping the connection.
        ``control_connections``: size of the separate pool of the control calls (abort, pause, continue, flush,
        weight updates, information routes): they never wait for a generation connection.
        ``incremental_streaming``: True if the server runs with ``--incremental-streaming-output`` (delta chunks);
        SGLang's default is cumulative chunks. ``stream_mode.decide_stream_mode`` finds it out; set the attribute
        before the first stream.
        ``ssl_context``: for ``https://`` URLs (an SGLang behind a TLS gateway); None means
        ``ssl.create_default_context()``: the system CA store, certificate and hostname verification. Pass one
        made with ``ssl.create_default_context(cafile=...)`` to trust a private CA.
        """
        if max_connections < 1 or control_connections < 1:
            raise ValueError("max_connections and control_connections must be at least 1")
        self.router_url = _base(router_url)
        self.worker_urls = tuple(_base(u) for u in worker_urls)
        self.incremental_streaming = incremental_streaming
        self.drain_timeout = drain_timeout

        def pool(size: int) -> HTTPClient:
            return HTTPClient(
                max_connections=size,
                connect_timeout=connect_timeout,
                write_timeout=write_timeout,
                pool_timeout=pool_timeout,
                keepalive_expiry=keepalive_expiry,
                ssl_context=ssl_context,
            )

        self._http, self._control_http = pool(max_connections), pool(control_connections)
        self._control_timeout = control_timeout
        self._generation_read_timeout = generation_read_timeout
        self._counters = ClientCounters()

    @classmethod
    def single_server(cls, url: str, **kwargs: Any) -> SGLangClient:
        """A client for one SGLang server without a gateway: it is both the router and the only worker."""
        return cls(url, (url,), **kwargs)

    async def __aenter__(self) -> SGLangClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection, pooled or in use (a stream still being read then fails as cut). Closing
        sockets is synchronous, so a cancelled caller still closes them all; later requests raise RuntimeError."""
        self._http.close()
        self._control_http.close()
        await trio.lowlevel.cancel_shielded_checkpoint()  # a scheduling point that never raises Cancelled

    def statistics(self) -> ClientStatistics:
        counters = self._counters
        return ClientStatistics(
            open_streams=counters.open_streams,
            streams_started=counters.streams_started,
            requests_sent=counters.requests_sent,
        )

    def pool_statistics(self, *, control: bool | None = None) -> PoolStatistics:
        """The connection pools: idle and active connections, connections opened and reused, stale ones
        discarded, stale keep-alive retries. Both pools summed; ``control=False`` / ``True``: one of them."""
        if control is not None:
            return (self._control_http if control else self._http).statistics()
        generation, controls = self._http.statistics(), self._control_http.statistics()
        return PoolStatistics(*(a + b for a, b in zip(attrs.astuple(generation), attrs.astuple(controls),
                                                      strict=True)))

    # -- generation ------------------------------------------------------------------------------------------

    def generate_stream(
        self,
        input_ids: Sequence[int],
        sampling_params: Mapping[str, Any] | None = None,
        *,
        rid: str | None = None,
        routing_key: str | None = None,
        return_logprob: bool = True,
        return_routed_experts: bool = False,
        routed_experts_start_len: int | None = None,
        base_url: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        vocab_size: int | None = None,
    ) -> GenerateStream:
        """Stream ``POST /generate`` with ``input_ids``; see :class:`GenerateStream`.

        ``rid`` defaults to a fresh :func:`~proxy.upstream.request_ids.new_rid` (others are refused).
        ``routing_key`` is sent as ``X-SMG-Routing-Key``. ``base_url`` targets a worker instead of the router.
        ``extra_body`` adds top-level request fields (``logprob_start_len``, ``return_text_in_logprobs``, ...).
        ``vocab_size`` (the tokenizer's): a generated id at or above it is an ``UpstreamProtocolError``.
        """
        rid, url, body = self._generate_request(
            input_ids, sampling_params, rid, base_url, stream=True, return_logprob=return_logprob,
            return_routed_experts=return_routed_experts, routed_experts_start_len=routed_experts_start_len,
            extra_body=extra_body,
        )
        decoder = ChunkDecoder(
            rid=rid,
            incremental=self.incremental_streaming,
            routed_experts_start_len=routed_experts_start_len,
            url=url,
            vocab_size=vocab_size,
        )
        return GenerateStream(
            self._http, self._counters, self.drain_timeout, url, body, _routing_headers(routing_key), decoder,
            read_timeout=self._generation_read_timeout,
        )

    async def generate(
        self,
        input_ids: Sequence[int],
        sampling_params: Mapping[str, Any] | None = None,
        *,
        rid: str | None = None,
        routing_key: str | None = None,
        return_logprob: bool = True,
        return_routed_experts: bool = False,
        routed_experts_start_len: int | None = None,
        base_url: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        vocab_size: int | None = None,
    ) -> Finished:
        """Non-streaming ``POST /generate``: the same :class:`Finished` value a stream ends with (``vocab_size`` as
        for :meth:`generate_stream`).

        SGLang notices a disconnected non-streaming request only on a 4 s poll; prefer the stream when the
        request may be cancelled.
        """
        rid, url, body = self._generate_request(
            input_ids, sampling_params, rid, base_url, stream=False, return_logprob=return_logprob,
            return_routed_experts=return_routed_experts, routed_experts_start_len=routed_experts_start_len,
            extra_body=extra_body,
        )
        reply = await self._call(
            "POST", url, body, headers=_routing_headers(routing_key), timeout=self._generation_read_timeout,
            control=False,
        )
        decoder = ChunkDecoder(
            rid=rid, routed_experts_start_len=routed_experts_start_len, url=url, vocab_size=vocab_size
        )
        decoder.feed_chunk(reply)
        if decoder.result is None:
            raise UpstreamProtocolError("non-streaming /generate reply has no finish reason", url=url)
        return decoder.result

    def _generate_request(
        self,
        input_ids: Sequence[int],
        sampling_params: Mapping[str, Any] | None,
        rid: str | None,
        base_url: str | None,
        **fields: Any,
    ) -> tuple[str, str, dict[str, Any]]:
        """The rid (a fresh one, or the caller's checked), the URL and the body of one ``/generate``."""
        rid = new_rid() if rid is None else check_rid(rid)
        url = (self.router_url if base_url is None else _base(base_url)) + "/generate"
        return rid, url, _generate_body(input_ids, sampling_params, rid=rid, **fields)

    # -- abort, pause, weights (workers) ---------------------------------------------------------------------

    async def abort(self, rid: str) -> bool:
        """``POST /abort_request {"rid"}`` on every worker. False (nothing sent) when there are no workers:
        then close the request's stream instead. The request's stream still ends normally, with an abort finish
        reason and its partial tokens."""
        check_rid(rid)
        if not self.worker_urls:
            return False
        await self._broadcast("/abort_request", {"rid": rid}, timeout=self._control_timeout)
        return True

    async def abort_all(self) -> bool:
        """``POST /abort_request {"abort_all": true}`` on every worker; False when there are no workers."""
        if not self.worker_urls:
            return False
        await self._broadcast("/abort_request", {"abort_all": True}, timeout=self._control_timeout)
        return True

    async def pause_generation(self, mode: PauseMode = "abort") -> None:
        """``POST /pause_generation {"mode"}`` on every worker; returns once every worker has paused."""
        if mode not in PAUSE_MODES:
            raise ValueError(f"pause mode must be one of {PAUSE_MODES}, got {mode!r}")
        await self._broadcast("/pause_generation", {"mode": mode}, timeout=None)

    async def continue_generation(self) -> None:
        """``POST /continue_generation`` on every worker."""
        await self._broadcast("/continue_generation", {}, timeout=None)

    async def update_weight_version(
        self, new_version: str, *, abort_all_requests: bool = False
    ) -> tuple[WeightUpdateResult, ...]:
        """``POST /update_weight_version`` on every worker. Note SGLang's own default for
        ``abort_all_requests`` is true; this client sends false unless asked."""
        bodies = await self._broadcast(
            "/update_weight_version",
            {"new_version": str(new_version), "abort_all_requests": abort_all_requests},
            timeout=None,
        )
        return self._update_results(bodies)

    async def update_weights_from_disk(
        self,
        model_path: str,
        *,
        weight_version: str | None = None,
        abort_all_requests: bool = False,
        flush_cache: bool = True,
        extra_body: Mapping[str, Any] | None = None,
    ) -> tuple[WeightUpdateResult, ...]:
        """``POST /update_weights_from_disk`` on every worker (``flush_cache`` must be false after an
        ``in_place`` pause). A failed update is an ``UpstreamHTTPError`` (SGLang answers 400)."""
        body: dict[str, Any] = {
            "model_path": model_path,
            "abort_all_requests": abort_all_requests,
            "flush_cache": flush_cache,
        }
        if weight_version is not None:
            body["weight_version"] = str(weight_version)
        body.update(extra_body or {})
        return self._update_results(await self._broadcast("/update_weights_from_disk", body, timeout=None))

    async def flush_cache(self) -> None:
        """``POST /flush_cache`` on every worker (SGLang refuses with 400 while requests run or wait)."""
        await self._broadcast("/flush_cache", None, timeout=self._control_timeout)

    # -- information and parsers -----------------------------------------------------------------------------

    async def model_info(self, base_url: str | None = None) -> ModelInfo:
        """``GET /model_info`` of the router (which answers for its first worker) or of ``base_url``; the deprecated
        ``/get_model_info`` when that is 404 (the SGLang Model Gateway ``smg`` serves only the old name)."""
        return ModelInfo.from_json(await self._info(base_url, "/model_info", "/get_model_info"))

    async def context_length(self) -> int | None:
        """The model's context window in tokens, as the upstream reports it; None when it does not say.

        ``/v1/models`` (``max_model_len``: SGLang's own server), then ``/model_info`` (no such field in SGLang
        0.5.23, but read where one is present), then ``/server_info`` (the server args' ``context_length``: what
        ``smg`` relays, its ``/v1/models`` dropping ``max_model_len``); deprecated names where the new are 404.
        Raises the ``UpstreamError`` when no endpoint could be reached at all (worth asking again soon)."""
        unreachable: UpstreamError | None = None
        answered = False
        try:
            for card in await self.models():
                if card.max_model_len:
                    return card.max_model_len
            answered = True
        except (UpstreamHTTPError, UpstreamProtocolError):
            answered = True
        except UpstreamError as error:
            unreachable = error
        for names in (("/model_info", "/get_model_info"), ("/server_info", "/get_server_info")):
            try:
                body = await self._info(None, *names)
            except (UpstreamHTTPError, UpstreamProtocolError):
                answered = True
                continue
            except UpstreamError as error:
                unreachable = unreachable or error
                continue
            answered = True
            for field in ("max_model_len", "context_length", "max_context_length"):
                value = body.get(field)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
        if not answered and unreachable is not None:
            raise unreachable
        return None

    async def _info(self, base_url: str | None, path: str, deprecated: str) -> Mapping[str, Any]:
        """A JSON object from ``path``, or from its ``deprecated`` name when the upstream answers 404."""
        base = self.router_url if base_url is None else _base(base_url)
        try:
            return _expect_object(await self._call("GET", base + path, control=True), path)
        except UpstreamHTTPError as error:
            if error.status != 404:
                raise
        return _expect_object(await self._call("GET", base + deprecated, control=True), deprecated)

    async def server_info(self, base_url: str | None = None) -> Mapping[str, Any]:
        """``GET /server_info`` (the deprecated ``/get_server_info`` where that is 404) of ``base_url`` or the router:
        SGLang's server args (``incremental_streaming_output``, ``context_length``...)."""
        return await self._info(base_url, "/server_info", "/get_server_info")

    async def weight_version(self, base_url: str | None = None) -> str | None:
        """The current weight version, from ``/model_info``."""
        return (await self.model_info(base_url)).weight_version

    async def models(self) -> tuple[ModelCard, ...]:
        """``GET /v1/models`` of the router."""
        body = _expect_object(await self._call("GET", self.router_url + "/v1/models", control=True), "/v1/models")
        data = body.get("data")
        if not isinstance(data, list) or not all(isinstance(m, Mapping) and "id" in m for m in data):
            raise UpstreamProtocolError("/v1/models reply has no list of models", url=self.router_url)
        return tuple(ModelCard.from_json(m) for m in data)

    async def parse_function_call(
        self, text: str, parser: str, tools: Iterable[Mapping[str, Any]]
    ) -> FunctionCallParse:
        """``POST /parse_function_call``: normal text and calls (``parameters`` stay JSON strings)."""
        body = {"text": text, "tool_call_parser": parser, "tools": list(tools)}
        reply = await self._call("POST", self._parser_url() + "/parse_function_call", body, control=False)
        return FunctionCallParse.from_json(_expect_object(reply, "/parse_function_call"))

    async def separate_reasoning(self, text: str, parser: str) -> ReasoningParse:
        """``POST /separate_reasoning``: the reasoning text and the normal text."""
        body = {"text": text, "reasoning_parser": parser}
        reply = await self._call("POST", self._parser_url() + "/separate_reasoning", body, control=False)
        return ReasoningParse.from_json(_expect_object(reply, "/separate_reasoning"))

    # -- plumbing --------------------------------------------------------------------------------------------

    def _parser_url(self) -> str:
        return self.worker_urls[0] if self.worker_urls else self.router_url

    async def _call(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: Any = _CONTROL,
        control: bool,
    ) -> Any:
        """One non-streaming request; the parsed JSON reply (None for an empty body).

        ``timeout`` is the read timeout: the control-call one by default, None for none. ``control`` picks the
        pool: the control calls' own, or the generation one (generation and parser requests)."""
        read_timeout = self._control_timeout if timeout is _CONTROL else timeout
        self._counters.requests_sent += 1
        http = self._control_http if control else self._http
        response = await http.request(method, url, body, headers=headers, read_timeout=read_timeout)
        if response.status >= 400:
            raise error_from_response(response.status, response.content, url=url)
        content = response.content
        if not content.strip():
            return None
        try:
            return wire_json.loads(content)
        except ValueError:
            if "json" in (response.header("content-type") or ""):
                raise UpstreamProtocolError(f"reply is not JSON: {content[:200]!r}", url=url) from None
            return content.decode("utf-8", "replace")  # e.g. /flush_cache answers in plain text

    async def _broadcast(self, path: str, body: Any, *, timeout: Any) -> list[Any]:
        """Send one request to every worker concurrently; the replies in worker order.

        Every worker is tried; if any failed, the first failure is raised (the others noted on it)."""
        if not self.worker_urls:
            raise UpstreamNotConfigured(f"{path} needs worker URLs (the gateway does not serve it)")
        replies: list[Any] = [None] * len(self.worker_urls)
        failures: list[UpstreamError] = []

        async def one(index: int, url: str) -> None:
            try:
                replies[index] = await self._call("POST", url + path, body, timeout=timeout, control=True)
            except UpstreamError as exc:
                failures.append(exc)

        async with trio.open_nursery() as nursery:
            for index, url in enumerate(self.worker_urls):
                nursery.start_soon(one, index, url)
        if failures:
            first = failures[0]
            for other in failures[1:]:
                first.add_note(f"also failed: {other}")
            raise first
        return replies

    def _update_results(self, bodies: list[Any]) -> tuple[WeightUpdateResult, ...]:
        return tuple(
            WeightUpdateResult.from_json(url, body if isinstance(body, Mapping) else {})
            for url, body in zip(self.worker_urls, bodies, strict=True)
        )


# --------------------------------------------------------------------------------------------------------------


def _base(url: str) -> str:
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"SGLang URL must start with http:// or https://, got {url!r}")
    HTTPClient.check_url(url)
    return url


def _routing_headers(routing_key: str | None) -> dict[str, str] | None:
    return None if routing_key is None else {ROUTING_KEY_HEADER: routing_key}


def _generate_body(
    input_ids: Sequence[int],
    sampling_params: Mapping[str, Any] | None,
    *,
    rid: str,
    stream: bool,
    return_logprob: bool,
    return_routed_experts: bool,
    routed_experts_start_len: int | None,
    extra_body: Mapping[str, Any] | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        # An array('i') (the session's) is kept as it is: wire_json.dumps_body writes it without a Python int per id.
        "input_ids": input_ids if type(input_ids) is array else list(input_ids),
        "sampling_params": dict(sampling_params or {}),
        "rid": rid,
        "stream": stream,
        "return_logprob": return_logprob,
    }
    if return_routed_experts:
        body["return_routed_experts"] = True
        if routed_experts_start_len is not None:
            body["routed_experts_start_len"] = routed_experts_start_len
    if extra_body:
        body.update(extra_body)
    return body


def _expect_object(body: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise UpstreamProtocolError(f"{what} reply is not a JSON object: {str(body)[:200]!r}")
    return body
