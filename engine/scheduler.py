"""The engine: admission, per-request generation tasks, abort, pause/continue, weight versions.

Theory of operation (mirrors SGLang's tokenizer manager + scheduler, minus batching and KV cache):

* **Admission gate.** A new request waits while the engine is paused or a weight update holds the writer side of
  ``model_update_lock`` (writer preferred). Only then is it tokenized, validated (``prompt_check``: vocabulary,
  context length; then a duplicate rid) and registered: a request blocked at the gate is unknown to
  ``/abort_request``, as in SGLang.
* **Generation.** Each admitted request runs one task in the engine's nursery. A decode step takes
  ``1/token_rate`` seconds (plus ``first_token_latency`` before the first token) and appends one token stamped
  with the engine's *current* ``weight_version``.
* **Abort** (``/abort_request``, ``abort_all``, abort-mode pause, ``abort_all_requests`` of an update) marks the
  request: a running one finishes after **one more decode step** with ``{"type":"abort","message":"Aborted",...}``;
  a retracted one finishes at once in the waiting-queue form (§2.2).
* **Pause.** ``abort``: abort everything admitted and return once all of it has finished. ``retract``: interrupt
  the step in progress and move running requests to WAITING (``num_retractions`` += 1), connections stay open.
  ``in_place``: interrupt the step in progress and freeze. ``/continue_generation`` resumes all of them.
* **Weight updates** wait for every admitted request to finish unless the engine is paused (§3.3).

Invariants: a request is in ``_active`` iff it is admitted and not finished; it is finished exactly once, and the
finish appends exactly one record to ``request_log``; no exception from a generation task reaches the nursery.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from .config import EngineConfig
from .constraints import GrammarError
from .determinism import token_logprob
from .faults import InjectedHTTPError
from .generate_request import GenerateRequest
from .planner import Planner
from .prompt_check import check_prompt
from .request_state import ABORTED, ABORTED_IN_QUEUE, Phase, RequestRecord, RequestState
from .script import ScriptBook, load_script
from .tokenizer import EngineTokenizer

logger = logging.getLogger(__name__)

PAUSE_MODES = ("abort", "retract", "in_place")


@attrs.frozen
class EngineStatistics:
    """A snapshot of the engine (trio's ``statistics()`` convention)."""

    #: Admitted requests that are scheduled (including ones frozen by an in-place pause).
    running: int
    #: Admitted requests retracted by a retract-mode pause.
    waiting: int
    #: Requests waiting at the admission gate (pause or weight update).
    blocked: int
    #: The pause mode in effect, or None.
    paused: str | None
    weight_version: str
    #: Requests finished since start (== records ever appended to the request log).
    finished: int
    #: ``/generate`` calls received with a valid body.
    generate_requests: int
    #: Unused script entries per session key.
    script_remaining: dict[str, int]


class Engine:
    """State of the embedded engine; one per app. Attach a nursery before serving requests."""

    def __init__(self, config: EngineConfig, tokenizer: EngineTokenizer | None = None) -> None:
        self.config = config
        self.tokenizer = tokenizer or EngineTokenizer.from_path(config.resolved_tokenizer_path())
        self.weight_version: str = config.weight_version
        self.model_path: str = config.model_path
        book = ScriptBook.from_entries(load_script(config.script, config.script_lines))
        self.planner = Planner(self.tokenizer, config.seed, book)
        #: Finished requests, oldest first (bounded by ``config.request_log_size``).
        self.request_log: deque[RequestRecord] = deque(maxlen=config.request_log_size)
        #: Every weight version change as (trio time, new version), starting with the initial one.
        self.version_history: list[tuple[float, str]] = []
        self._active: dict[str, RequestState] = {}
        self._blocked: list[RequestState] = []
        self._paused: str | None = None
        self._writers = 0
        self._changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._finished_count = 0
        self._generate_count = 0
        self._stream_count = 0

    # ---- lifecycle -------------------------------------------------------------------------------------------

    def attach(self, nursery: trio.Nursery) -> None:
        """Run generation tasks in ``nursery`` (the app's). Must be called before the first request."""
        self._nursery = nursery
        if not self.version_history:
            self.version_history.append((trio.current_time(), self.weight_version))

    @property
    def paused(self) -> str | None:
        return self._paused

    def statistics(self) -> EngineStatistics:
        active = list(self._active.values())
        return EngineStatistics(
            running=sum(1 for s in active if s.phase is Phase.RUNNING),
            waiting=sum(1 for s in active if s.phase is Phase.WAITING),
            blocked=len(self._blocked),
            paused=self._paused,
            weight_version=self.weight_version,
            finished=self._finished_count,
            generate_requests=self._generate_count,
            script_remaining=self.planner.book.remaining(),
        )

    def active_requests(self) -> list[RequestState]:
        """Admitted, unfinished requests (for tests and debugging)."""
        return list(self._active.values())

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _wait_change(self) -> None:
        await self._changed.wait()

    async def wait_until(self, predicate: Any) -> None:
        """Wait until ``predicate()`` is true; re-checked after every engine state change (for tests)."""
        while not predicate():
            await self._wait_change()

    def _set_version(self, version: str) -> None:
        if version != self.weight_version:
            self.weight_version = version
            self.version_history.append((trio.current_time(), version))

    # ---- admission -------------------------------------------------------------------------------------------

    def new_request(self, request: GenerateRequest, routing_key_header: str | None) -> RequestState:
        """Create the state of a validated request and apply the per-request fault counters.

        Raises :class:`InjectedHTTPError` when the ``fault_error_every`` counter selects this request.
        """
        self._generate_count += 1
        routing_key = routing_key_header or request.routing_key
        keys = tuple(k for k in (routing_key, request.rid) if k)
        state = RequestState(request=request, session_keys=keys, routing_key=routing_key)
        every = self.config.fault_error_every
        if every and self._generate_count % every == 0:
            raise InjectedHTTPError(self.config.fault_error_status, "Injected fault (fault_error_every)")
        if request.stream:
            self._stream_count += 1
            after, every = self.config.fault_drop_stream_after, self.config.fault_drop_stream_every
            if after and self._stream_count % every == 0:
                state.drop_after = after
        return state

    async def admit(self, state: RequestState) -> None:
        """Wait at the gate, then tokenize, validate, register and start generating.

        Raises ``ValueError`` (a 400) for invalid input or a duplicate rid, :class:`InjectedHTTPError` for a
        script entry with ``error_status``. Returns early if the request was aborted while blocked.
        """
        self._blocked.append(state)
        self._notify()
        try:
            while self._paused is not None or self._writers > 0:
                await self._wait_change()
                if state.finished:
                    return
        except BaseException:
            # Cancelled: the client went away while the request was blocked.
            if not state.finished:
                state.client_disconnected = True
                self._finish(state, None)
            raise
        finally:
            if state in self._blocked:
                self._blocked.remove(state)
        self._prepare(state)
        assert self._nursery is not None, "Engine.attach(nursery) was not called"
        self._nursery.start_soon(self._generation_task, state)

    def _prepare(self, state: RequestState) -> None:
        """Check the prompt and the rid, compile the constraint, plan the output, register the request."""
        request = state.request
        prompt = check_prompt(request, self.tokenizer, self.config.context_length)
        if request.rid in self._active:
            raise ValueError("Duplicate request ID detected")
        state.input_ids, state.max_new_tokens = prompt.input_ids, prompt.max_new_tokens
        grammar = None
        constraint = request.sampling.constraint
        if constraint is not None:
            # SGLang compiles the grammar in the scheduler: a failure finishes the request with a 400 abort.
            try:
                grammar = constraint.compile()
            except GrammarError as exc:
                state.grammar_error = constraint.abort_message(exc)
        if state.grammar_error is None:
            state.plan = self.planner.plan(state.input_ids, state.session_keys, grammar)
            entry = state.plan.entry
            if entry is not None and entry.error_status is not None:
                raise InjectedHTTPError(entry.error_status, f"Injected fault (script entry {entry.index})")
            if entry is not None and entry.drop_after is not None and request.stream:
                state.drop_after = entry.drop_after
        state.phase = Phase.RUNNING
        self._active[request.rid] = state
        self._notify()

    # ---- generation ------------------------------------------------------------------------------------------

    async def _generation_task(self, state: RequestState) -> None:
        try:
            await self._generate(state)
        except Exception as exc:  # a bug must not take the server down; the client sees an internal error
            logger.exception("generation of %s failed", state.rid)
            self._finish(
                state,
                {"type": "abort", "message": f"Internal error: {exc}", "status_code": 500,
                 "err_type": "InternalServerError"},
            )
        finally:
            if not state.finished:  # engine shutting down
                self._finish(state, dict(ABORTED))

    def _bad_request_abort(self, message: str) -> dict[str, Any]:
        return {"type": "abort", "message": message, "status_code": 400, "err_type": "BadRequestError"}

    async def _generate(self, state: RequestState) -> None:
        request = state.request
        prompt_len = len(state.input_ids)
        if state.grammar_error is not None:
            await trio.lowlevel.checkpoint()
            self._finish(state, self._bad_request_abort(state.grammar_error))
            return
        if request.return_logprob and request.logprob_start_len > prompt_len:
            self._finish(state, self._bad_request_abort(
                f"logprob_start_len ({request.logprob_start_len}) is larger than prompt length ({prompt_len})"))
            return
        if self._routed_experts_wanted(state) and not 0 <= request.routed_experts_start_len <= prompt_len:
            self._finish(state, self._bad_request_abort(
                f"routed_experts_start_len ({request.routed_experts_start_len}) must be in [0, {prompt_len}]"))
            return
        if state.max_new_tokens == 0:
            await trio.lowlevel.checkpoint()
            self._finish(state, {"type": "length", "length": 0})
            return
        assert state.plan is not None
        entry = state.plan.entry
        rate = entry.token_rate if entry is not None and entry.token_rate is not None else self.config.token_rate
        step_time = 1.0 / rate if rate > 0 else 0.0
        first_latency = self.config.first_token_latency + (entry.latency if entry is not None else 0.0)
        while True:
            await self._schedule_gate(state)
            if state.finished:
                return
            delay = step_time + (first_latency if not state.output_ids else 0.0)
            state.in_step = True
            with trio.CancelScope() as scope:
                state.step_scope = scope
                if delay > 0:
                    await trio.sleep(delay)
                else:
                    await trio.lowlevel.checkpoint()
            state.step_scope = None
            state.in_step = False
            if scope.cancelled_caught:  # a retract / in-place pause interrupted the step: no token
                self._notify()
                continue
            self._emit_token(state)
            self._notify()
            if state.finished:
                return

    async def _schedule_gate(self, state: RequestState) -> None:
        """Return when ``state`` may run a decode step; handles retraction and aborts of retracted requests."""
        while not state.finished:
            mode = self._paused
            if state.abort_requested and state.phase is Phase.WAITING:
                self._finish(state, dict(ABORTED_IN_QUEUE), waiting_form=True)
                return
            if mode in ("retract", "in_place"):
                if mode == "retract" and state.phase is Phase.RUNNING:
                    state.phase = Phase.WAITING
                    state.num_retractions += 1
                    state.notify()
                    self._notify()
                    continue
                await self._wait_change()
                continue
            if state.phase is Phase.WAITING:
                state.phase = Phase.RUNNING
                state.notify()
                self._notify()
            return

    def _emit_token(self, state: RequestState) -> None:
        assert state.plan is not None
        index = len(state.output_ids)
        token = state.plan.token_at(index)
        version = self.weight_version
        if state.prefill_version is None:
            state.prefill_version = version
        state.output_ids.append(token)
        state.output_logprobs.append(token_logprob(self.config.seed, len(state.input_ids) + index, token, version))
        state.token_versions.append(version)
        reason = self._finish_reason_after_token(state, token)
        if reason is not None:
            self._finish(state, reason)
        else:
            state.notify()

    def _finish_reason_after_token(self, state: RequestState, token: int) -> dict[str, Any] | None:
        """SGLang's ``check_finished`` order: pending abort, length, stop token, stop string (§1.3)."""
        if state.abort_requested:
            return dict(ABORTED)
        produced = len(state.output_ids)
        if produced >= state.max_new_tokens:
            return {"type": "length", "length": state.max_new_tokens}
        sampling = state.request.sampling
        if not sampling.ignore_eos and produced > sampling.min_new_tokens:
            if token in self.tokenizer.eos_ids or token in sampling.stop_token_ids:
                return {"type": "stop", "matched": token}
        if sampling.stop:
            window = max(len(s) for s in sampling.stop) + 1
            tail = self.tokenizer.decode(state.output_ids[-window:], skip_special_tokens=False)
            for stop in sampling.stop:
                if stop in tail:
                    return {"type": "stop", "matched": stop}
        return None

    def _routed_experts_wanted(self, state: RequestState) -> bool:
        return state.request.return_routed_experts and self.config.enable_return_routed_experts

    def _finish(self, state: RequestState, reason: dict[str, Any] | None, *, waiting_form: bool = False) -> None:
        if state.finished:
            return
        state.finished_from = state.phase
        state.finish_reason = reason
        state.waiting_form = waiting_form
        state.phase = Phase.FINISHED
        if self._active.get(state.rid) is state:
            del self._active[state.rid]
        if state in self._blocked:
            self._blocked.remove(state)
        if state.plan is not None:
            self.planner.finished(state.plan, len(state.output_ids), reason["type"] if reason else None)
        self.request_log.append(state.record())
        self._finished_count += 1
        state.notify()
        self._notify()

    # ---- control ---------------------------------------------------------------------------------------------

    def abort(self, rid: str = "", abort_all: bool = False) -> int:
        """``/abort_request``: mark matching requests; returns how many were marked.

        With a rid, nothing happens unless that exact rid is in flight; then every in-flight rid that *starts
        with* it is aborted (the scheduler's ``startswith``, §2.1).
        """
        if self.config.fault_ignore_aborts:
            return 0
        if abort_all:
            targets = list(self._active.values())
        elif not rid:
            return 0
        elif rid in self._active:
            targets = [s for s in self._active.values() if s.rid.startswith(rid)]
        else:
            if self.config.abort_blocked_requests:
                for state in [s for s in self._blocked if s.rid.startswith(rid)]:
                    self._finish(state, dict(ABORTED_IN_QUEUE), waiting_form=True)
            return 0
        for state in targets:
            state.abort_requested = True
            state.notify()
        self._notify()
        return len(targets)

    def client_gone(self, state: RequestState) -> None:
        """The response of ``state`` ended before its final chunk: stop the generation (sync; safe when cancelled)."""
        if state.finished:
            return
        if not state.dropped_by_fault:
            state.client_disconnected = True
        if state.phase is Phase.BLOCKED:
            self._finish(state, None)
            return
        state.abort_requested = True
        state.notify()
        self._notify()

    async def pause(self, mode: str) -> None:
        """``/pause_generation``; returns once the pause is in effect."""
        if mode not in PAUSE_MODES:
            raise ValueError(f"Invalid pause mode {mode!r}; expected one of {', '.join(PAUSE_MODES)}")
        self._paused = mode
        self._notify()
        if mode == "abort":
            self.abort(abort_all=True)
            while self._paused == "abort" and self._active:
                await self._wait_change()
            return
        for state in self._active.values():
            if state.step_scope is not None:
                state.step_scope.cancel()
        self._notify()
        while self._paused == mode and any(
            s.in_step or (mode == "retract" and s.phase is Phase.RUNNING) for s in self._active.values()
        ):
            await self._wait_change()

    def continue_generation(self) -> None:
        """``/continue_generation``: admit blocked requests and resume retracted / frozen ones."""
        self._paused = None
        self._notify()

    def paused_request_count(self) -> int:
        return len(self._active) if self._paused in ("retract", "in_place") else 0

    async def update_weights(self, model_path: str, weight_version: str | None, abort_all_requests: bool) -> int:
        """``/update_weights_from_disk``: returns ``num_paused_requests``.

        Unless paused, waits (as the writer of ``model_update_lock``) for every admitted request to finish;
        new requests block at the gate meanwhile.
        """
        if abort_all_requests:
            self.abort(abort_all=True)
        if self._paused is None:
            self._writers += 1
            try:
                while self._active:
                    await self._wait_change()
            finally:
                self._writers -= 1
                self._notify()
        paused_requests = self.paused_request_count()
        self.model_path = model_path
        if weight_version is not None:
            self._set_version(weight_version)
        self._notify()
        return paused_requests

    def update_weight_version(self, new_version: str, abort_all_requests: bool = True) -> None:
        """``/update_weight_version``: abort everything (the default!) and relabel the weights."""
        if abort_all_requests:
            self.abort(abort_all=True)
        self._set_version(new_version)
        self._notify()

    def flush_cache(self) -> bool:
        """``/flush_cache``: refused (False) while any request is running or waiting (§3.5)."""
        return not self._active

    # ---- helpers for response building -----------------------------------------------------------------------

    def step_versions(self, state: RequestState) -> Sequence[str]:
        """Weight version of the step where each position was the input token (routing rows, §1.4)."""
        prefill = state.prefill_version or self.weight_version
        return [prefill] * len(state.input_ids) + list(state.token_versions[1:]) + [self.weight_version]
