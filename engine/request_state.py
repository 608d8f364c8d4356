"""The live state of one ``/generate`` request inside the engine, and the record it leaves in the request log.

Theory of operation: a request is BLOCKED at the pause gate until admitted (SGLang's tokenizer manager waiting on
``is_pause_cond``), then RUNNING in its own generation task, possibly WAITING again after a retract-mode pause,
and finally FINISHED exactly once. The response side never touches the generation: it waits for ``revision`` to
move and reads a consistent snapshot (trio only switches tasks at ``await``).
"""

from __future__ import annotations

import enum
import time
from array import array
from typing import Any

import attrs
import trio

from .generate_request import GenerateRequest
from .planner import Plan


class Phase(enum.Enum):
    """Where a request is in its life."""

    #: Not admitted yet: waiting for the pause to end (or a weight update to finish).
    BLOCKED = "blocked"
    #: Admitted but not scheduled: retracted by a retract-mode pause (SGLang's waiting queue).
    WAITING = "waiting"
    #: Scheduled: producing tokens (or frozen by an in-place pause).
    RUNNING = "running"
    #: Done; ``finish_reason`` is set.
    FINISHED = "finished"


#: ``finish_reason`` of a user abort of a running request (sglang-protocol.md §2.2).
ABORTED = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
#: ``finish_reason`` of an abort while waiting or retracted (§2.2, ``_handle_abort_req``).
ABORTED_IN_QUEUE = {"type": "abort", "message": "Abort in waiting queue"}


@attrs.frozen
class RequestRecord:
    """One finished request, as kept in ``Engine.request_log`` for tests to inspect."""

    rid: str
    #: The routing key (``X-SMG-Routing-Key`` header, else the body's ``routing_key``), or None.
    routing_key: str | None
    #: The key script entries were looked up with (routing key, else rid).
    session_key: str
    #: The prompt, stored compactly (int32); read it as ``input_ids``.
    input_array: array = attrs.field(repr=False)
    output_ids: tuple[int, ...]
    #: ``weight_version`` in effect when each output token was generated (same length as ``output_ids``).
    token_versions: tuple[str, ...]
    finish_reason: dict[str, Any] | None
    client_disconnected: bool
    #: The stream was cut on purpose by a drop fault.
    dropped_by_fault: bool
    num_retractions: int
    stream: bool
    #: "default", "script[<index>]", or "" when never admitted.
    source: str
    #: Phase when it finished (a BLOCKED one was never admitted).
    finished_in: Phase
    #: The request's ``sampling_params`` as received (constraints included), for tests to inspect.
    sampling_params: dict[str, Any] = attrs.field(factory=dict, repr=False)
    #: The request's sampling parameters as the engine read them (``logit_bias``, ``sampling_seed``, ``stop``...).
    sampling: Any = None

    @property
    def input_ids(self) -> tuple[int, ...]:
        return tuple(self.input_array)

    @property
    def input_len(self) -> int:
        return len(self.input_array)


@attrs.define(eq=False)
class RequestState:
    """Mutable state of one request; owned by the engine, read by the response builder."""

    request: GenerateRequest
    session_keys: tuple[str, ...]
    routing_key: str | None
    created_wall: float = attrs.field(factory=time.time)
    created_clock: float = attrs.field(factory=trio.current_time)
    phase: Phase = Phase.BLOCKED
    input_ids: tuple[int, ...] = ()
    max_new_tokens: int = 0
    plan: Plan | None = None
    output_ids: list[int] = attrs.field(factory=list)
    output_logprobs: list[float] = attrs.field(factory=list)
    token_versions: list[str] = attrs.field(factory=list)
    #: Weight version of the prefill step (routing rows of prompt positions).
    prefill_version: str | None = None
    finish_reason: dict[str, Any] | None = None
    #: Finished in the waiting-queue form (§2.2): fewer meta_info keys, streaming chunk with the last id only.
    waiting_form: bool = False
    abort_requested: bool = False
    num_retractions: int = 0
    client_disconnected: bool = False
    dropped_by_fault: bool = False
    #: Streaming fault: cut the connection once this many tokens were produced.
    drop_after: int | None = None
    #: The phase the request was in when it finished.
    finished_from: Phase | None = None
    #: The abort message of a constraint that did not compile (the request finishes with a 400 abort at once).
    grammar_error: str | None = None
    #: True while a decode step is in progress (between the gate and the token).
    in_step: bool = False
    step_scope: trio.CancelScope | None = None
    #: Bumped on every visible change; responses wait for it to move.
    revision: int = 0
    _changed: trio.Event = attrs.field(factory=trio.Event)

    @property
    def rid(self) -> str:
        return self.request.rid

    @property
    def finished(self) -> bool:
        return self.phase is Phase.FINISHED

    @property
    def session_key(self) -> str:
        return self.session_keys[0]

    def notify(self) -> None:
        """Publish a change to whoever waits on this request."""
        self.revision += 1
        self._changed.set()
        self._changed = trio.Event()

    async def wait_past(self, revision: int) -> None:
        """Return once ``self.revision > revision`` (immediately if it already is)."""
        while self.revision <= revision:
            await self._changed.wait()

    def record(self) -> RequestRecord:
        return RequestRecord(
            rid=self.rid,
            routing_key=self.routing_key,
            session_key=self.session_key,
            input_array=array("i", self.input_ids),
            output_ids=tuple(self.output_ids),
            token_versions=tuple(self.token_versions),
            finish_reason=self.finish_reason,
            client_disconnected=self.client_disconnected,
            dropped_by_fault=self.dropped_by_fault,
            num_retractions=self.num_retractions,
            stream=self.request.stream,
            source=self.plan.source if self.plan is not None else "",
            finished_in=self.finished_from or self.phase,
            sampling_params=self.request.sampling.received,
            sampling=self.request.sampling,
        )
