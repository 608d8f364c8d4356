"""``ProxyClient``: the proxy's HTTP API for Python rollout and training code (spec 4), async, over httpx.

It runs under **asyncio and trio** alike: httpx's ``AsyncClient`` picks the running event loop's backend (through
sniffio), so the same object works in an asyncio agent loop and in a trio trainer (one client per event loop: a
connection pool belongs to the loop that opened it)::

    async with ProxyClient("http://127.0.0.1:8800") as proxy:
        answer = await proxy.chat_completions({"messages": [...], "tools": [...]}, session_id="s1")
        result = await proxy.finalize_session("s1", reward_info={"reward": 1.0})
        async with proxy.drain_trajectories(session_id="s1") as segments:
            train_on(segments)      # acknowledged only when this block succeeds

| method | endpoint | returns |
|---|---|---|
| ``chat_completions(payload, session_id=, instance_id=, turn_id=)`` | ``POST /v1/chat/completions`` | the ``chat.completion`` dict |
| ``stream_chat_completions(...)`` (async context manager) | the same with ``stream: true`` | an async iterator of ``chat.completion.chunk`` dicts |
| ``finalize_session(session_id, instance_id=, reward_info=, rollout_id=)`` | ``POST /session/finalize`` | :class:`FinalizeResult` |
| ``read_trajectory(session_id=, trajectory_id=, drain=)`` | ``POST /trajectory/read`` | :class:`TrajectoryRead` (a ``list`` of segment dicts with ``lease_id``, ``lease_seconds``) |
| ``acknowledge(lease)`` | ``POST /trajectory/ack`` | segments deleted (``int``) |
| ``drain_trajectories(session_id=, trajectory_id=)`` (async context manager) | read with drain, then ack | the :class:`TrajectoryRead` |
| ``stats()`` | ``GET /trajectory/stats`` | :class:`TrajectoryStats` |
| ``session_debug(session_id)`` | ``GET /session/<id>`` | the debug view dict |
| ``health()`` | ``GET /health`` | the health dict |
| ``models()`` | ``GET /v1/models`` | ``list`` of model cards (dicts) |
| ``pause()``, ``resume(weight_version=)`` | ``POST /v1/rollout/pause``, ``/v1/rollout/resume`` | the answer dict |
| ``pause_state()`` | ``GET /v1/rollout/pause_state`` | :class:`PauseState` |

**Draining is two-phase** (``docs/api.md``, "Exactly once"): ``read_trajectory(..., drain=True)`` leases the
segments it returns and deletes nothing; ``acknowledge(read)`` deletes them. Use :meth:`ProxyClient.drain_trajectories`,
which acknowledges only when the caller's block succeeds: if the block raises, or the acknowledgement is lost, the
lease expires and the same segments come again, so the trainer keeps the ``trajectory_id`` values it consumed and
skips them (at-least-once delivery + deduplication = exactly once).

The ``/v1/rollout/*`` methods drive the rollout gate (``docs/partial-rollout.md``); a refused resume raises
:class:`ProxyError` with status 409 and code ``resume_refused``.

Errors: every HTTP error answer is raised as :class:`ProxyError` (``status``, ``code``, ``message``, ``param``,
``type``, and the whole ``body``), parsed from the OpenAI error shape ``{"error": {"message", "type", "param",
"code"}}``; an answer that is not in that shape still becomes a ``ProxyError`` (code ``http_<status>``). Transport
failures (connection refused, reset, a timeout) are translated here, in one place, into
:class:`ProxyConnectionError` (a ``ProxyError`` with ``status`` 0 and code ``proxy_unreachable``), chained to the
httpx exception.

Keys: a proxy run with ``--admin-key`` wants it on rollout control and trajectory endpoints; give it as
``ProxyClient(url, admin_key=...)`` or in the ``DRESSAGE_ADMIN_KEY`` variable (read when the client is made). It is
sent as ``Authorization: Bearer <key>`` on every request (the admin key also opens the agent API); an
``Authorization`` in ``headers`` wins. A missing or wrong key is a :class:`ProxyError` with status 401 and code
``unauthorized``.

Timeouts: by default only connecting is bounded (30 s). Reads are not, on purpose: a generation can run for minutes,
a request waits while the rollout gate is paused, and ``pause()`` returns only once nothing generates. Pass
``timeout=`` (anything httpx accepts) to bound them.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import Any
from urllib.parse import quote

import attrs
import httpx

from proxy.api.errors import ERROR_TABLE, ErrorCode
from proxy.api.trajectory_read import TrajectoryRead

#: connect within 30 s; reads, writes and pool waits unbounded (see the module docstring)
DEFAULT_TIMEOUT = httpx.Timeout(None, connect=30.0)

SESSION_HEADER = "X-Session-Id"
INSTANCE_HEADER = "X-Instance-Id"
TURN_HEADER = "X-Turn-Id"
#: where the admin key comes from when none is given
ADMIN_KEY_ENV = "DRESSAGE_ADMIN_KEY"


class ProxyError(Exception):
    """An error answer of the proxy (or a failure to reach it), parsed from the OpenAI error shape."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        param: str | None = None,
        type: str | None = None,  # noqa: A002 - the OpenAI field name
        body: Any = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.type = type
        # The whole error body as JSON when it was JSON (extra members such as ``expected``/``got`` live in
        # ``body["error"]``), else its text.
        self.body = body

    def __repr__(self) -> str:
        return f"ProxyError({self.status}, {self.code!r}, {self.message!r})"

    @classmethod
    def from_response(cls, status: int, content: bytes) -> ProxyError:
        """The error of an HTTP answer with ``status`` >= 400 and body ``content``."""
        text = content.decode("utf-8", errors="replace")
        try:
            body: Any = json.loads(text)
        except ValueError:
            body = text
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            message = error.get("message")
            code = error.get("code")
            return cls(
                status,
                str(code) if code is not None else f"http_{status}",
                message if isinstance(message, str) else text,
                param=error.get("param") if isinstance(error.get("param"), str) else None,
                type=error.get("type") if isinstance(error.get("type"), str) else None,
                body=body,
            )
        return cls(status, f"http_{status}", text.strip() or f"HTTP {status}", body=body)


class ProxyConnectionError(ProxyError):
    """The proxy could not be reached or the connection failed mid-way (``status`` 0)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "proxy_unreachable", message)


@attrs.frozen
class FinalizeResult:
    """What ``POST /session/finalize`` exported (the same answer for every finalize of the session)."""

    session_id: str
    #: segments exported to the store
    segments: int
    #: steps (model calls) the session committed
    steps: int
    trajectory_ids: tuple[str, ...]

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> FinalizeResult:
        return cls(body["session_id"], body["segments"], body["steps"], tuple(body["trajectory_ids"]))


@attrs.frozen
class TrajectoryStats:
    """``GET /trajectory/stats``: what the trajectory store holds, and its lifetime counters."""

    sessions: int
    segments: int
    tokens: int
    #: JSON size of the stored segments
    bytes: int
    written_sessions: int
    drained_segments: int
    cleaned_sessions: int
    #: segments leased to a draining read and not acknowledged yet
    leased_segments: int = 0
    #: failed export attempts since the proxy started (each one a logged bug; the session keeps its steps)
    export_failures: int = 0
    #: sessions whose export failed and waits for a finalize to retry it (most recent last, bounded)
    export_failed_sessions: tuple[str, ...] = ()
    #: the session registry beside the store (docs/operations.md, "Memory budget"): sessions it holds, of which
    #: tombstones, their approximate bytes, and with the store's bytes what --memory-budget bounds
    registry_sessions: int = 0
    registry_tombstones: int = 0
    registry_bytes: int = 0
    approximate_bytes: int = 0
    #: lifetime counters: sessions finalized for idleness (reason idle_timeout), tombstones forgotten
    idle_finalized_sessions: int = 0
    expired_tombstones: int = 0

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> TrajectoryStats:
        failed = tuple(str(session_id) for session_id in body.get("export_failed_sessions") or ())
        counts = {field.name: int(body.get(field.name, 0)) for field in attrs.fields(cls)
                  if field.name != "export_failed_sessions"}
        return cls(**counts, export_failed_sessions=failed)


@attrs.frozen
class PauseState:
    """``GET /v1/rollout/pause_state``: the rollout gate (spec 4, 7). ``raw`` is the whole answer."""

    #: RUNNING, PAUSING or PAUSED
    state: str
    epoch: int
    weight_version: str | None
    in_flight: int
    waiting: int
    raw: Mapping[str, Any] = attrs.field(factory=dict, repr=False, eq=False)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> PauseState:
        return cls(
            str(body.get("state")), int(body.get("epoch") or 0), body.get("weight_version"),
            int(body.get("in_flight") or 0), int(body.get("waiting") or 0), dict(body),
        )


def session_headers(
    session_id: str | None, instance_id: str | None = None, turn_id: str | None = None
) -> dict[str, str]:
    """The session headers of a chat-completions request (absent ids left out)."""
    headers = {}
    for name, value in ((SESSION_HEADER, session_id), (INSTANCE_HEADER, instance_id), (TURN_HEADER, turn_id)):
        if value is not None:
            headers[name] = str(value)
    return headers


def _path_segment(value: str) -> str:
    """``value`` as one URL path segment: everything reserved percent-encoded, and dots too (so ``..`` stays an id
    instead of being resolved as a dot segment)."""
    return quote(value, safe="").replace(".", "%2E")


@attrs.define(eq=False)
class ProxyClient:
    """Async client of one proxy (see the module docstring). Use ``async with`` or call :meth:`aclose`."""

    base_url: str = attrs.field(converter=lambda url: str(url).rstrip("/"))
    timeout: Any = DEFAULT_TIMEOUT
    #: headers sent with every request
    headers: Mapping[str, str] = attrs.field(factory=dict)
    #: an httpx transport (``httpx.MockTransport`` in tests), else httpx's default
    transport: httpx.AsyncBaseTransport | None = None
    #: the proxy's ``--admin-key`` (default: the ``DRESSAGE_ADMIN_KEY`` variable; none when unset or empty)
    admin_key: str | None = attrs.field(factory=lambda: os.environ.get(ADMIN_KEY_ENV) or None, repr=False)
    _http: httpx.AsyncClient | None = attrs.field(default=None, init=False)

    async def __aenter__(self) -> ProxyClient:
        self._client()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool (the client can be used again afterwards: a new pool opens)."""
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            auth = {"Authorization": f"Bearer {self.admin_key}"} if self.admin_key else {}
            self._http = httpx.AsyncClient(
                base_url=self.base_url, timeout=self.timeout, headers={**auth, **self.headers},
                transport=self.transport,
            )
        return self._http

    # -- the one place HTTP happens ---------------------------------------------------------------------------------

    async def _request(
        self, method: str, path: str, *, json_body: Any = None, headers: Mapping[str, str] | None = None
    ) -> Any:
        """Send, translate transport failures, raise error answers, return the parsed JSON body."""
        try:
            response = await self._client().request(method, path, json=json_body, headers=headers)
        except httpx.TransportError as exc:
            raise ProxyConnectionError(f"{method} {self.base_url}{path}: {type(exc).__name__}: {exc}") from exc
        return _parse(response.status_code, response.content)

    # -- agent-facing -----------------------------------------------------------------------------------------------

    async def chat_completions(
        self,
        payload: Mapping[str, Any],
        *,
        session_id: str | None = None,
        instance_id: str | None = None,
        turn_id: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """``POST /v1/chat/completions`` (non-streaming): the ``chat.completion`` object.

        The ids become the ``X-Session-Id`` / ``X-Instance-Id`` / ``X-Turn-Id`` headers (the payload's body fields
        ``session_id``... are the proxy's fallback). For ``stream: true`` use :meth:`stream_chat_completions`.
        """
        if payload.get("stream"):
            raise ValueError("chat_completions is non-streaming; use stream_chat_completions for stream: true")
        headers = {**session_headers(session_id, instance_id, turn_id), **(extra_headers or {})}
        return await self._request("POST", "/v1/chat/completions", json_body=dict(payload), headers=headers)

    @asynccontextmanager
    async def stream_chat_completions(
        self,
        payload: Mapping[str, Any],
        *,
        session_id: str | None = None,
        instance_id: str | None = None,
        turn_id: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """``POST /v1/chat/completions`` with ``stream: true``::

            async with proxy.stream_chat_completions(payload, session_id="s1") as chunks:
                async for chunk in chunks:
                    ...

        A context manager (not a bare async generator) so the response is closed when the block exits, on either
        event loop, even if the caller stops iterating early. An error answer before the stream raises
        :class:`ProxyError` on entry; an ``error`` event inside the stream raises it while iterating.
        """
        headers = {**session_headers(session_id, instance_id, turn_id), **(extra_headers or {})}
        body = {**payload, "stream": True}
        url = f"{self.base_url}/v1/chat/completions"
        async with AsyncExitStack() as stack:
            try:
                response = await stack.enter_async_context(
                    self._client().stream("POST", "/v1/chat/completions", json=body, headers=headers)
                )
                if response.status_code >= 400:
                    _parse(response.status_code, await response.aread())
            except httpx.TransportError as exc:
                raise ProxyConnectionError(f"POST {url}: {type(exc).__name__}: {exc}") from exc
            chunks = _sse_chunks(response)
            stack.push_async_callback(chunks.aclose)
            yield chunks

    # -- rollout-facing ---------------------------------------------------------------------------------------------

    async def finalize_session(
        self,
        session_id: str,
        instance_id: str | None = None,
        reward_info: Mapping[str, Any] | None = None,
        *,
        rollout_id: str | None = None,
    ) -> FinalizeResult:
        """``POST /session/finalize``: close the session and export its segments. Idempotent."""
        body: dict[str, Any] = {"session_id": session_id}
        if instance_id is not None:
            body["instance_id"] = instance_id
        if reward_info is not None:
            body["reward_info"] = reward_info  # validated by the proxy (a JSON object)
        if rollout_id is not None:
            body["rollout_id"] = rollout_id
        return FinalizeResult.from_json(await self._request("POST", "/session/finalize", json_body=body))

    async def read_trajectory(
        self, session_id: str | None = None, trajectory_id: str | None = None, drain: bool = False
    ) -> TrajectoryRead:
        """``POST /trajectory/read``: the finalized segments of a session (or one segment). ``drain`` leases them
        (other draining readers skip them) until :meth:`acknowledge` deletes them or the lease expires; prefer
        :meth:`drain_trajectories`, which acknowledges for you once your block succeeds."""
        body: dict[str, Any] = {"drain": drain}
        if session_id is not None:
            body["session_id"] = session_id
        if trajectory_id is not None:
            body["trajectory_id"] = trajectory_id
        return TrajectoryRead.from_json(await self._request("POST", "/trajectory/read", json_body=body))

    async def acknowledge(self, lease: TrajectoryRead | str | None) -> int:
        """``POST /trajectory/ack``: delete what a draining read leased (give the read or its ``lease_id``); returns
        how many segments were deleted. Idempotent: a lease already acknowledged, expired or unknown deletes
        nothing (0), and a read that leased nothing costs no request."""
        lease_id = lease.lease_id if isinstance(lease, TrajectoryRead) else lease
        if lease_id is None:
            return 0
        answer = await self._request("POST", "/trajectory/ack", json_body={"lease_id": lease_id})
        return int(answer["acknowledged"])

    @asynccontextmanager
    async def drain_trajectories(
        self, session_id: str | None = None, trajectory_id: str | None = None
    ) -> AsyncIterator[TrajectoryRead]:
        """Drain with the acknowledgement tied to your use of the segments::

            async with proxy.drain_trajectories(session_id="s1") as segments:
                fresh = [s for s in segments if s["trajectory_id"] not in consumed]
                write_durably(fresh)          # then remember their ids with them
            # here the segments are deleted from the proxy's store

        The block gets the leased segments; they are acknowledged (deleted) only when it ends without an exception.
        If it raises, nothing is acknowledged and the lease expires (``lease_seconds``), so the segments come again
        to a later drain. If the acknowledgement itself fails (:class:`ProxyError`, raised here after the block),
        the same happens: the trainer that keeps the ids it consumed skips them then (``docs/api.md``).
        """
        read = await self.read_trajectory(session_id, trajectory_id, drain=True)
        yield read
        await self.acknowledge(read)

    async def stats(self) -> TrajectoryStats:
        """``GET /trajectory/stats``."""
        return TrajectoryStats.from_json(await self._request("GET", "/trajectory/stats"))

    async def session_debug(self, session_id: str) -> dict[str, Any]:
        """``GET /session/<id>``: state, head, branches, in-flight generations, trie size (404 if unknown)."""
        return await self._request("GET", "/session/" + _path_segment(session_id))

    async def health(self) -> dict[str, Any]:
        """``GET /health``: status, upstream reachability and weight version, sessions, store, configuration."""
        return await self._request("GET", "/health")

    async def models(self) -> list[dict[str, Any]]:
        """``GET /v1/models``: the model cards (``data`` of the OpenAI list)."""
        return list((await self._request("GET", "/v1/models"))["data"])

    # -- the rollout gate (docs/partial-rollout.md) -----------------------------------------------------------------

    async def pause(self) -> dict[str, Any]:
        """``POST /v1/rollout/pause``: returns once no generation runs upstream. Idempotent."""
        return await self._request("POST", "/v1/rollout/pause")

    async def resume(self, weight_version: str | None = None) -> dict[str, Any]:
        """``POST /v1/rollout/resume``, optionally announcing the new weight version. Idempotent."""
        body = {"weight_version": weight_version} if weight_version is not None else {}
        return await self._request("POST", "/v1/rollout/resume", json_body=body)

    async def pause_state(self) -> PauseState:
        """``GET /v1/rollout/pause_state``: gate state, epoch, weight version, in-flight and waiting counts."""
        return PauseState.from_json(await self._request("GET", "/v1/rollout/pause_state"))


def _parse(status: int, content: bytes) -> Any:
    """The JSON of a 2xx answer; a :class:`ProxyError` for anything else."""
    if status >= 400:
        raise ProxyError.from_response(status, content)
    try:
        return json.loads(content)
    except ValueError:
        raise ProxyError(status, "invalid_response", f"the proxy answered {status} with a body that is not JSON",
                         body=content.decode("utf-8", errors="replace")) from None


async def _sse_chunks(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON events of an SSE body up to ``data: [DONE]``; an ``error`` event raises :class:`ProxyError`."""
    try:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return
            event = json.loads(data)
            if isinstance(event, dict) and isinstance(event.get("error"), dict):
                # The HTTP status was 200 (the stream had started): the status is the one the code stands for.
                code = event["error"].get("code")
                status = ERROR_TABLE[ErrorCode(code)][0] if code in ErrorCode._value2member_map_ else 500
                raise ProxyError.from_response(status, data.encode())
            yield event
    except httpx.TransportError as exc:
        raise ProxyConnectionError(f"the stream was cut: {type(exc).__name__}: {exc}") from exc


__all__ = [
    "DEFAULT_TIMEOUT", "FinalizeResult", "PauseState", "ProxyClient", "ProxyConnectionError", "ProxyError",
    "TrajectoryRead", "TrajectoryStats", "session_headers",
]
