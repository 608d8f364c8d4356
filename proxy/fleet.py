"""``ProxyFleet``: pause and resume every proxy of a fleet at once, and know which ones did.

A trainer in front of several proxies (``docs/storage.md`` "Fleet") must pause all of them before it updates the
weights, and resume all of them with the new version. ``ProxyFleet`` holds one :class:`~proxy.client.ProxyClient`
per proxy URL, sends the call to every proxy concurrently, waits for every answer, and returns one
:class:`FleetResult`: each proxy's outcome (its answer, or its error), the weight version the fleet reports, and the
proxies that failed. It runs under asyncio and trio alike (anyio task groups over httpx clients)::

    async with ProxyFleet(["http://10.0.0.1:8800", "http://10.0.0.2:8800"]) as fleet:
        paused = await fleet.pause()
        if not paused.ok: ...            # paused.failed names the proxies that did not confirm
        ...update the weights...
        resumed = await fleet.resume(weight_version="step-42")

A proxy that is down is a failed outcome (``proxy_unreachable``), not an exception: the caller decides (retry it,
or drop it from the fleet). A proxy that joins while the fleet is paused starts paused on its own (the pause state
is kept in the shared store), so a resume that lists it reaches it like the others. The command line is
``dressage-proxy fleet pause|resume --urls URL,URL`` (``proxy/fleet_command.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any

import anyio
import attrs

from proxy.client import DEFAULT_TIMEOUT, ProxyClient, ProxyError


@attrs.frozen
class ProxyOutcome:
    """One proxy's answer to a fleet call."""

    url: str
    ok: bool
    #: the proxy's JSON answer when ok
    answer: dict[str, Any] | None = None
    #: the error when not ok: HTTP status (0: unreachable), stable code, message
    status: int | None = None
    code: str | None = None
    message: str | None = None

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class FleetResult:
    """Every proxy's outcome of one call (in the order of the URLs)."""

    action: str
    outcomes: tuple[ProxyOutcome, ...]

    @property
    def ok(self) -> bool:
        """True when every proxy confirmed."""
        return all(outcome.ok for outcome in self.outcomes)

    @property
    def failed(self) -> tuple[str, ...]:
        """The URLs of the proxies that did not confirm."""
        return tuple(outcome.url for outcome in self.outcomes if not outcome.ok)

    @property
    def weight_versions(self) -> tuple[str | None, ...]:
        """The distinct weight versions the confirming proxies report (one when the fleet agrees)."""
        return tuple(dict.fromkeys(o.answer.get("weight_version") for o in self.outcomes if o.ok and o.answer))

    @property
    def weight_version(self) -> str | None:
        """The fleet's weight version when every confirming proxy reports the same one, else None."""
        versions = self.weight_versions
        return versions[0] if len(versions) == 1 else None

    def as_json(self) -> dict[str, Any]:
        return {
            "action": self.action, "ok": self.ok, "weight_version": self.weight_version,
            "weight_versions_agree": len(self.weight_versions) <= 1, "failed": list(self.failed),
            "proxies": [outcome.as_json() for outcome in self.outcomes],
        }


@attrs.define(eq=False)
class ProxyFleet:
    """Clients of every proxy of a fleet (see the module docstring). Use ``async with`` or call :meth:`aclose`."""

    urls: Sequence[str] = attrs.field(converter=tuple)
    #: the proxies' ``--admin-key`` (default: ``DRESSAGE_ADMIN_KEY``, as :class:`ProxyClient` reads it)
    admin_key: str | None = attrs.field(default=None, repr=False)
    timeout: Any = DEFAULT_TIMEOUT
    _clients: tuple[ProxyClient, ...] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        if not self.urls:
            raise ValueError("a fleet needs at least one proxy URL")
        key = {"admin_key": self.admin_key} if self.admin_key is not None else {}
        self._clients = tuple(ProxyClient(url, timeout=self.timeout, **key) for url in self.urls)

    async def __aenter__(self) -> ProxyFleet:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()

    async def pause(self) -> FleetResult:
        """``POST /v1/rollout/pause`` on every proxy; returns once every proxy answered (each returns only once
        nothing generates there)."""
        return await self._everywhere("pause", lambda client: client.pause())

    async def resume(self, weight_version: str | None = None) -> FleetResult:
        """``POST /v1/rollout/resume`` on every proxy, announcing ``weight_version`` (None: keep each one's)."""
        return await self._everywhere("resume", lambda client: client.resume(weight_version))

    async def _everywhere(
        self, action: str, call: Callable[[ProxyClient], Awaitable[dict[str, Any]]]
    ) -> FleetResult:
        outcomes: list[ProxyOutcome | None] = [None] * len(self._clients)

        async def one(index: int, client: ProxyClient) -> None:
            try:
                outcomes[index] = ProxyOutcome(client.base_url, True, await call(client))
            except ProxyError as exc:
                outcomes[index] = ProxyOutcome(client.base_url, False, status=exc.status, code=exc.code,
                                               message=exc.message)

        async with anyio.create_task_group() as group:
            for index, client in enumerate(self._clients):
                group.start_soon(one, index, client)
        return FleetResult(action, tuple(outcome for outcome in outcomes if outcome is not None))


__all__ = ["FleetResult", "ProxyFleet", "ProxyOutcome"]
