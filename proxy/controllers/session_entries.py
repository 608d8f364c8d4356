"""The registry's records of one session and one prepared step, and its reports (``session_registry.py``)."""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import trio

from proxy.controllers.idempotency import IdempotencyKeys
from proxy.controllers.on_demand_lock import OnDemandLock
from proxy.trajectory.session import BranchHandle, Session
from proxy.trajectory.step_journal import JournaledRequest
from proxy.trajectory.tokens import WorkingTokens
from proxy.trajectory.encode_plan import EncodeKind


@attrs.frozen(eq=False)
class PreparedStep:
    """What prepare hands a generation: its opaque handle, its private token state and the encode decision."""

    handle: BranchHandle
    # The checkpoint it continues (shared, never copied) plus the context tokens this step adds.
    tokens: WorkingTokens
    encode: EncodeKind
    # Set when this step starts a new segment (a full encode): why (boundaries.py), and the TITO failure detail.
    boundary_reason: str | None
    boundary_detail: str | None
    # The incremental encode failed and the step fell back to a full encode.
    tito_failed: bool

    @property
    def generation_id(self) -> str:
        """``<session id>#g<n>``: unique within the session (the upstream request id is the generation's own)."""
        return self.handle.generation_id

    @property
    def prompt_token_count(self) -> int:
        """Tokens sent upstream."""
        return self.tokens.prompt_length

    @property
    def context_token_count(self) -> int:
        """Context tokens this step adds (the fragment, or the whole prompt of a full encode)."""
        return self.tokens.context.context_count

    def input_ids(self) -> list[int]:
        """The ``input_ids`` for SGLang: O(prompt length), built on demand outside any lock."""
        return self.tokens.input_ids()

    def input_array(self) -> array:
        """:meth:`input_ids` as the ``array('i')`` the request path sends (no Python int per token)."""
        return self.tokens.input_array()


@attrs.frozen
class RegistryStatistics:
    """A frozen report for /health."""

    sessions: int
    # Sessions per state name (ACTIVE, FINALIZING, FINALIZED, DRAINED, ABORTED).
    states: Mapping[str, int]
    in_flight: int
    steps: int
    # Sessions that freed their data and keep only a tombstone (finalized, drained, aborted).
    tombstones: int = 0
    # Approximate bytes the sessions hold (their committed steps, and the tombstones), without the store.
    approximate_bytes: int = 0
    # Lifetime counters: sessions finalized for idleness (--session-idle-timeout), tombstones expired
    # (--tombstone-ttl).
    idle_finalized: int = 0
    expired_tombstones: int = 0


@attrs.define(eq=False)
class LockedSession:
    """One session on trio: the sync core, its lock, the event that ends its export, and its Idempotency-Key
    records (created on first use; they live as long as the session's data, see ``idempotency_keys``)."""

    session: Session
    # (On demand: a trio.Lock only while held or awaited, see on_demand_lock.py.)
    lock: OnDemandLock = attrs.field(factory=OnDemandLock)
    # Set when the session's current export attempt ended; each attempt creates its own (None before the first: a
    # live session holds no event, issue 21 item 5).
    export_done: trio.Event | None = None
    idempotency: IdempotencyKeys | None = None
    # The registry's clock when a request of the session last arrived or a generation of it last ended.
    last_activity: float = 0.0
    # When the session released its data for good (nothing in the store either): its tombstone's age counts
    # from here. None while it holds steps or segments.
    released_at: float | None = None

    # The session was loaded from the store (or found new there) by its first use, under ``load_lock``: concurrent
    # first uses wait for the one load. Until then ``session`` is a new session no request has used. The lock exists
    # only while the load may run: created by the first use, dropped once loaded (about 340 bytes a live session).
    loaded: bool = False
    load_lock: trio.Lock | None = None
    # The lease epoch of this proxy's latest grant (the fence of ``append_step``; None: the store is not shared).
    epoch: int | None = None
    # Generations between prepare and their end, by generation id: the handle (a handle of another copy of the
    # session is refused) and the request, which the step journal records.
    requests: dict[str, tuple[BranchHandle, JournaledRequest]] = attrs.field(factory=dict)
    # Journal records not yet durable (a failed append), in step order: the next commit writes them first, so the
    # journal never has a gap.
    unjournaled: list[tuple[int, bytes]] = attrs.field(factory=list)
    # Serializes the session's journal appends, so they reach the store in step order.
    journal_lock: OnDemandLock = attrs.field(factory=OnDemandLock)

    def drop_idempotency_if_freed(self) -> None:
        """Drop the Idempotency-Key records once the session freed its data (finalized, aborted)."""
        if self.session.trie is None:
            self.idempotency = None


def text_size(messages: Any) -> int:
    """Characters of string content, to decide whether an encode is worth a worker thread. Total: it runs before
    the messages are validated (anything that is not text counts 0)."""
    # A parsed body's lists and dicts are tested by type first: an ABC's isinstance costs ~1 us inside the proxy.
    if type(messages) is not list and (isinstance(messages, (str, bytes, Mapping))
                                       or not isinstance(messages, Sequence)):
        return 0
    size = 0
    for message in messages:
        content = message.get("content") if type(message) is dict or isinstance(message, Mapping) else None
        if isinstance(content, str):
            size += len(content)
        elif isinstance(content, Sequence):
            size += sum(len(text) for part in content if isinstance(part, Mapping)
                        and isinstance(text := part.get("text"), str))
    return size


__all__ = ["LockedSession", "PreparedStep", "RegistryStatistics", "text_size"]
