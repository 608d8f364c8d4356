"""The GenerationMachine's vocabulary: its states, the events its controller feeds it, the effects, its data.

The machine (its table, the actions behind the rows, and the theory of operation) is
``statemachines/generation_machine.py``. This module is what the machine and its users speak: the generation's
driver (``proxy/controllers/generation_driver.py``) builds these events and carries out these effects, and the
checked worlds (``checking/generation_step.py``) do the same; none of them needs the table to do so. Split from the
table so that each stays readable on its own (together they were 785 lines).

Effects carry what the controller needs to carry them out, so that no data travels beside the machine:
``TokensReceived`` holds the tokens of one upstream read and ``AcceptTokens`` hands the accepted ones back;
``AbortUpstream`` says whose request to cut and whether a pause cuts it (``for_pause``); ``AnswerNobody`` tells the
driver that the generation ended without anybody to answer (its client left), so it feeds nothing more.
"""

from __future__ import annotations

import enum

import attrs

from statemachines.core import MachineState


class State(MachineState):
    """The generation's states; each value is its one-line description."""

    RECEIVED = "the request arrived; the session prepares and tokenizes it"
    PREPARED = "prepared and tokenized; the gate was asked (it answers in the same step)"
    WAITING = "parked by the gate (paused) before its first upstream request"
    STREAMING = "admitted; its upstream request (first, or a restart from scratch) streams tokens"
    ABORTING = "a pause aborts its upstream request; tokens already in flight are still accepted"
    INTERRUPTED = "its abort was acknowledged at a token boundary; it waits for resume; no token is accepted"
    CONTINUING = "resumed with its kept tokens (partial rollout); a continuation streams the remaining budget"
    PARSING = "upstream finished (stop or length); its output is being parsed"
    COMMITTING = "parsed; the session was asked to commit the step"
    RESPONDED = "committed once and answered; absorbs"
    FAILED = "ended with an error answer (upstream failure, timeout, internal error); committed nothing; absorbs"
    CANCELLED = "its client went away; committed nothing; absorbs"
    REJECTED = "its commit came after the session left ACTIVE; committed nothing; answered an error; absorbs"


class FinishKind(enum.Enum):
    """How an upstream request ended by itself (an abort is ``UpstreamAborted``, a failure ``UpstreamFailed``)."""

    STOP = "stop"
    LENGTH = "length"


# ---- Events: what the generation controller tells the machine ---------------------------------------------------


@attrs.frozen
class Prepared:
    """The session prepared the step and it is tokenized: prompt length and token budget (clamped, >= 1)."""

    prompt_tokens: int
    max_new_tokens: int


@attrs.frozen
class PrepareFailed:
    """Prepare or tokenization refused the request (session closed, step limit, context overflow, bad mask)."""

    status: int
    code: str
    message: str = ""


@attrs.frozen
class GateAdmitted:
    """The gate admitted the generation (its Admit): stream now under this epoch and weight version."""

    epoch: int
    weight_version: str | None


@attrs.frozen
class GateWait:
    """The gate parked the generation (its Wait) until the next resume."""

    epoch: int


@attrs.frozen
class Resumed:
    """The gate resumed (its AdmitWaiters) while the generation waited: go on under this epoch and version."""

    epoch: int
    weight_version: str | None


@attrs.frozen
class UpstreamStarted:
    """The controller drew this rid for the request StartUpstream asked for, and is sending it."""

    rid: str


@attrs.frozen
class TokensReceived:
    """The ``tokens`` of one upstream read from request ``rid``, all of the version SGLang reported (or None)."""

    rid: str | None
    weight_version: str | None
    # The controller's records of them, one per token (a tuple: the worlds memoize events by value); the machine
    # counts them and hands them back in AcceptTokens when it accepts them.
    tokens: tuple[object, ...] = attrs.field(converter=tuple, validator=attrs.validators.min_len(1))

    @property
    def count(self) -> int:
        return len(self.tokens)


@attrs.frozen
class UpstreamFinished:
    """The current upstream request ended by itself (stop or length) after delivering ``tokens`` tokens."""

    finish: FinishKind
    tokens: int


@attrs.frozen
class UpstreamAborted:
    """The current upstream request ended by an abort (its abort finish, or our cancel) after ``tokens`` tokens."""

    tokens: int


@attrs.frozen
class UpstreamFailed:
    """The upstream (SGLang or its parser endpoints) failed: refused, 5xx, stream cut, timeout, error abort."""

    status: int = 502
    code: str = "upstream_unavailable"
    message: str = ""


@attrs.frozen
class AbortRequested:
    """The gate's AbortInFlight reached this generation: a pause wants its upstream request cut."""


@attrs.frozen
class PauseWaitTimedOut:
    """The generation waited for resume longer than --pause-wait-timeout."""


@attrs.frozen
class ParseDone:
    """The output was parsed (malformed tool-call markup is flagged, not an error)."""


@attrs.frozen
class CommitAccepted:
    """The session accepted the step (its AcceptCommit)."""


@attrs.frozen
class CommitRejected:
    """The session rejected the step (its RejectCommit): it left ACTIVE; nothing was stored."""

    reason: str


@attrs.frozen
class ClientDisconnected:
    """The client went away: its connection closed before the answer was complete."""


@attrs.frozen
class InternalError:
    """The controller hit a bug (typically an IllegalTransition): fail closed, releasing what the generation holds."""

    reason: str


EVENTS = (
    Prepared,
    PrepareFailed,
    GateAdmitted,
    GateWait,
    Resumed,
    UpstreamStarted,
    TokensReceived,
    UpstreamFinished,
    UpstreamAborted,
    UpstreamFailed,
    AbortRequested,
    PauseWaitTimedOut,
    ParseDone,
    CommitAccepted,
    CommitRejected,
    ClientDisconnected,
    InternalError,
)


# ---- Effects: what the generation controller must do --------------------------------------------------------------


@attrs.frozen
class AskGate:
    """Send GenerationWantsToStart to the gate and feed its answer back at once (GateAdmitted or GateWait)."""


@attrs.frozen
class StartUpstream:
    """Open upstream request number ``request``: input = context + the first ``kept_tokens`` generated tokens."""

    request: int
    epoch: int
    weight_version: str | None
    kept_tokens: int
    # The remaining budget: budget - kept_tokens, always >= 1.
    max_new_tokens: int
    # Where SGLang's routed-expert rows start: 0, or prompt + kept - 1 for a continuation (no duplicated rows).
    routed_experts_start_len: int


@attrs.frozen
class AbortUpstream:
    """Cancel the upstream request and abort its rid in SGLang (rid None: it was never sent); a pause's or not."""

    rid: str | None
    # A pause cuts it and the generation keeps its tokens for the resume (the controller may read the request to its
    # abort finish, and posts the rid's abort once the pause is acknowledged); False: the generation is ending
    # (failure, client gone, internal error) and the request is closed at once.
    for_pause: bool


@attrs.frozen
class AcknowledgeAbortToGate:
    """Send GenerationAbortAcknowledged to the gate: cut at a token boundary, now waiting for resume."""


@attrs.frozen
class ReleaseGate:
    """Send GenerationFinished to the gate: this generation no longer streams upstream."""


@attrs.frozen
class CancelGateWait:
    """Send WaiterCancelled to the gate: this waiting generation gives up."""


@attrs.frozen
class AcceptTokens:
    """Record ``tokens`` (the accepted read's) as step tokens ``index``.. (0-based), stamped ``weight_version``."""

    index: int
    weight_version: str | None
    tokens: tuple[object, ...]

    @property
    def count(self) -> int:
        return len(self.tokens)


@attrs.frozen
class DropTokens:
    """Drop ``count`` tokens not from the current upstream request (stragglers): never record or stream them."""

    rid: str | None
    reason: str
    count: int = 1


@attrs.frozen
class DiscardPartial:
    """Forget the ``tokens`` generated so far (ids, logprobs, versions, routed rows): the step restarts from scratch."""

    tokens: int


@attrs.frozen
class ParseOutput:
    """Parse the ``tokens`` generated tokens (tool calls, reasoning); report ParseDone."""

    finish: FinishKind
    tokens: int


@attrs.frozen
class Commit:
    """Ask the session to commit the step (short critical section, shielded); report its answer."""

    tokens: int
    requests: int


@attrs.frozen
class Respond:
    """Answer the client with the committed step (final chunk and [DONE] when streaming)."""

    finish: FinishKind
    tokens: int


@attrs.frozen
class RespondError:
    """Answer the client with an OpenAI-style error (503 answers carry Retry-After)."""

    # The proxy answers ``code`` with the status of proxy/api/errors.py's table, which ``status`` equals (tested).
    status: int
    code: str
    message: str


@attrs.frozen
class DropFromSession:
    """Tell the session the prepared generation ends without committing (its GenerationDropped)."""


@attrs.frozen
class AnswerNobody:
    """The client is gone and nobody will be answered: the controller feeds nothing more; its driver stops."""


@attrs.frozen
class ReportFault:
    """Log a controller bug that the machine failed closed on."""

    reason: str


# ---- The driver's one rule about its client ---------------------------------------------------------------------

#: The effects before which a generation's driver may wait for its client to read what was streamed so far. Only
#: the answers: they come after the gate slot was released. Waiting on a client before ``StartUpstream`` (or any
#: other effect a pause waits for) lets a client that stopped reading, or left unnoticed, hold the gate PAUSING for
#: ever: a continuation's request is never started, so the pause's ``AbortUpstream`` has nothing to cut (issue 13).
#: The driver (``proxy/controllers/generation_driver.py``) and the checked worlds (``checking/generation_step.py``)
#: both read this rule; the planted-bug test widens it and the explorer finds the hang.
WAITS_FOR_CLIENT: tuple[type, ...] = ()


def waits_for_client(effect: object) -> bool:
    """May the driver wait for its client to read its output before carrying out ``effect``?"""
    return isinstance(effect, (Respond, RespondError) + WAITS_FOR_CLIENT)


# ---- Data ---------------------------------------------------------------------------------------------------------

_COUNT = attrs.validators.ge(0)


@attrs.frozen
class GenerationData:
    """The generation's bookkeeping; replaced on every transition, never mutated. Token ids live in the controller."""

    # --dressage-partial-rollout, fixed at creation.
    partial_rollout: bool = False
    # Context tokens sent before the generated ones (set by Prepared).
    prompt_tokens: int = attrs.field(default=0, validator=_COUNT)
    # Max new tokens for the step (set by Prepared, >= 1 from then on). Invariant: tokens <= budget.
    budget: int = attrs.field(default=0, validator=_COUNT)
    # Generated tokens kept for the step (reset only by a restart). Without partial rollout == request_tokens.
    tokens: int = attrs.field(default=0, validator=_COUNT)
    # Tokens received from the current upstream request; <= tokens.
    request_tokens: int = attrs.field(default=0, validator=_COUNT)
    # Upstream requests started for this step (first, continuations, restarts); never decreases.
    requests: int = attrs.field(default=0, validator=_COUNT)
    # Gate epoch and announced weight version of the current request's admission; the version is the fallback stamp.
    epoch: int | None = None
    weight_version: str | None = None
    # The version stamped on every token of the current request; fixed by its first token.
    request_version: str | None = None
    # The current request's rid (None until UpstreamStarted).
    rid: str | None = None
    # How the generation finished upstream (set on entering PARSING).
    finish: FinishKind | None = None
    # Set by CommitAccepted, only ever once; true exactly in RESPONDED.
    committed: bool = False

    @property
    def remaining(self) -> int:
        """Tokens the step may still generate (never negative: tokens <= budget)."""
        return self.budget - self.tokens


@attrs.frozen
class GenerationStatistics:
    """A frozen report for the debug view (reporting only, never for decisions)."""

    state: str
    budget: int
    tokens: int
    requests: int
    epoch: int | None
    weight_version: str | None
    committed: bool


# States that never change again.
ABSORBING = (State.RESPONDED, State.FAILED, State.CANCELLED, State.REJECTED)
# Live states: the generation still holds something or waits for an answer.
LIVE = tuple(state for state in State if state not in ABSORBING)


__all__ = [
    "State", "FinishKind", "Prepared", "PrepareFailed", "GateAdmitted", "GateWait", "Resumed", "UpstreamStarted",
    "TokensReceived", "UpstreamFinished", "UpstreamAborted", "UpstreamFailed", "AbortRequested", "PauseWaitTimedOut",
    "ParseDone", "CommitAccepted", "CommitRejected", "ClientDisconnected", "InternalError", "EVENTS", "AskGate",
    "StartUpstream", "AbortUpstream", "AcknowledgeAbortToGate", "ReleaseGate", "CancelGateWait", "AcceptTokens",
    "DropTokens", "DiscardPartial", "ParseOutput", "Commit", "Respond", "RespondError", "DropFromSession",
    "AnswerNobody", "ReportFault", "WAITS_FOR_CLIENT", "waits_for_client", "GenerationData", "GenerationStatistics",
    "ABSORBING", "LIVE",
]
