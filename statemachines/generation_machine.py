"""GenerationMachine: one per chat-completions request; its lifecycle from arrival to response, pauses included.

Its vocabulary (states, events, effects, data) is ``statemachines/generation.py``; this module is the table and
the actions behind its rows.

Theory of operation
-------------------
A *generation* answers one step (spec section 2): prepare and tokenize, pass the rollout gate, stream tokens from
SGLang (possibly interrupted by pauses and continued several times), parse, commit into the session, respond.

- RECEIVED: the session controller prepares and tokenizes as one unit that either completes (``Prepared`` with the
  prompt length and the step's token ``budget``, already clamped to the context window) or rolls itself back
  (``PrepareFailed``: answer the error). ``Prepared`` asks the gate (``AskGate``); the gate controller answers in
  the same synchronous step with ``GateAdmitted`` (STREAMING) or ``GateWait`` (WAITING).
- Every upstream request is started by a ``StartUpstream`` effect carrying the epoch and version of the admission,
  the number of generated tokens to append to the context (``kept_tokens``) and ``max_new_tokens`` = the remaining
  budget. The controller draws a fresh rid and reports it (``UpstreamStarted``) before the request goes out.
- Tokens (``TokensReceived(rid, weight_version, tokens)``: the tokens of one upstream read, so a busy stream costs
  one step per read rather than per token) are accepted (``AcceptTokens(index, version, tokens)``, the same tokens
  handed back) only in STREAMING, CONTINUING and ABORTING, and only from the current request's rid. Each token is
  stamped with its request's version: the first token fixes it (SGLang's reported version, else the version
  announced at admission); a later token reporting another version means the weights changed under a running
  request, which fails the generation rather than mixing versions within one request (architecture invariant 3).
  Tokens that are not from the current request (stragglers of an aborted or finished one) are dropped
  (``DropTokens``), never recorded, in every state that has had an upstream request: that is a race of the reader
  task, not a bug. A read is a token boundary like any other: the tokens of one event are all accepted or all
  dropped.
- Pause: the gate's ``AbortInFlight`` reaches every in-flight generation as ``AbortRequested``: ABORTING, and
  ``AbortUpstream(rid, for_pause=True)`` (also when the rid is drawn after the pause came). Tokens already in
  flight are still accepted until the request ends: ``UpstreamAborted`` (its abort finish, or our cancel closed
  it) is the acknowledgement: INTERRUPTED, ``AcknowledgeAbortToGate``. From then on no token is accepted
  (architecture invariants 1 and 2). The request may also end anyway (``UpstreamFinished``: parse it) or fail.
- Resume (``Resumed``, from the gate's ``AdmitWaiters``): a new generation (WAITING) starts; an interrupted one
  either continues with its kept tokens (partial rollout on and tokens kept: CONTINUING, a new request for the
  remaining budget), finishes as ``length`` without an upstream call (partial rollout on, budget used up), or
  restarts from scratch (``DiscardPartial``, STREAMING: partial rollout off, or nothing kept), so that without
  partial rollout every step is generated under one version.
- ``UpstreamFinished`` (stop or length): the gate slot is released (``ReleaseGate``), the output parsed
  (``ParseOutput``), then ``ParseDone`` asks the session to commit (``Commit``), exactly once. ``CommitAccepted``:
  RESPONDED (``Respond``). ``CommitRejected`` (the session left ACTIVE): REJECTED, an error answer, nothing changed
  (architecture invariant 5).
- Ending without a commit releases exactly what the generation holds in its state (``_release`` below):
  the gate slot (``ReleaseGate``) or gate wait (``CancelGateWait``), the upstream request (``AbortUpstream`` with
  ``for_pause=False``), the session's admission (``DropFromSession``). FAILED (upstream failure, pause-wait timeout,
  unrequested abort, mixed versions, internal error) answers an error; CANCELLED (client gone) answers nobody
  (``AnswerNobody``: the driver feeds nothing more). Neither commits
  (architecture invariant 4).

Budget (architecture invariant 7): ``0 <= tokens <= budget``; every request asks for exactly ``budget - tokens``
(never more, never negative; zero remaining means no request); a token beyond the budget is refused.

Idempotent: ``AbortRequested`` while ABORTING; ``ClientDisconnected`` once the commit is requested or the request
has ended (a commit, once requested, lands or is rejected: the controller shields that critical section).

Illegal events and absorbing states. RESPONDED, FAILED, CANCELLED and REJECTED absorb: their rows (dropped
stragglers, a late disconnect, an internal error) never leave them. The table's policy is transactional (an illegal
event raises ``IllegalTransition`` and changes nothing), and the machine fails closed through ``InternalError``,
which is legal in every state: in a live state it releases what the generation holds, answers 500 and moves to
FAILED; in an absorbing state it only reports. ``send_fail_closed`` does both steps, so a controller bug ends its
own request cleanly and never wedges the gate or the session for the others. (The core's ``FAIL_CLOSED`` policy
does not fit: it would move an absorbing RESPONDED to its error state, and it raises without the release effects
the gate and the session need.)
"""


from __future__ import annotations

import attrs

from statemachines.core import (
    Branch,
    Goto,
    IllegalTransition,
    Machine,
    Policy,
    Refused,
    TableError,
    TransitionTable,
    evolve,
    on,
)
from statemachines.generation import (
    ABSORBING,
    EVENTS,
    LIVE,
    AbortRequested,
    AbortUpstream,
    AcceptTokens,
    AcknowledgeAbortToGate,
    AnswerNobody,
    AskGate,
    CancelGateWait,
    ClientDisconnected,
    Commit,
    CommitAccepted,
    CommitRejected,
    DiscardPartial,
    DropFromSession,
    DropTokens,
    FinishKind,
    GateAdmitted,
    GateWait,
    GenerationData,
    GenerationStatistics,
    InternalError,
    ParseDone,
    ParseOutput,
    PauseWaitTimedOut,
    Prepared,
    PrepareFailed,
    ReleaseGate,
    ReportFault,
    Respond,
    RespondError,
    Resumed,
    StartUpstream,
    State,
    TokensReceived,
    UpstreamAborted,
    UpstreamFailed,
    UpstreamFinished,
    UpstreamStarted,
)


# States in which the generation holds an upstream request (the gate counts it in flight).
_UPSTREAM = (State.STREAMING, State.CONTINUING, State.ABORTING)


def _check(state: State, gen: GenerationData) -> str | None:
    """The (state, data) invariants, checked after every transition and on restore."""
    if gen.tokens > gen.budget:
        return f"{gen.tokens} tokens over the budget {gen.budget}"
    if gen.request_tokens > gen.tokens:
        return f"{gen.request_tokens} tokens from the current request but {gen.tokens} in all"
    if not gen.partial_rollout and gen.request_tokens != gen.tokens:
        return "without partial rollout every kept token is from the current request"
    if gen.committed != (state is State.RESPONDED):
        return f"{state.name} with committed={gen.committed}"
    if state in _UPSTREAM + (State.INTERRUPTED,) and (not gen.requests or gen.epoch is None):
        return f"{state.name} without an admitted upstream request"
    if state is State.CONTINUING and not (gen.partial_rollout and gen.tokens > gen.request_tokens):
        return "CONTINUING without kept tokens under partial rollout"
    if state in (State.PARSING, State.COMMITTING, State.RESPONDED) and gen.finish is None:
        return f"{state.name} without a finish kind"
    return None


# ---- What a generation holds, per state: released when it ends without committing --------------------------------


def _release(state: State, gen: GenerationData) -> list:
    """The effects that release everything the generation holds in ``state`` (see the module docstring)."""
    if state in (State.STREAMING, State.CONTINUING):
        return [AbortUpstream(gen.rid, for_pause=False), ReleaseGate(), DropFromSession()]
    if state is State.ABORTING:
        # The abort was already requested; the gate (PAUSING) counts this answer as a finish.
        return [ReleaseGate(), DropFromSession()]
    if state in (State.WAITING, State.INTERRUPTED):
        return [CancelGateWait(), DropFromSession()]
    if state in (State.PREPARED, State.PARSING):
        return [DropFromSession()]
    # RECEIVED (prepare rolls itself back) and COMMITTING (the session counts the generation out on its answer).
    return []


# The effect types of ``_release`` per state, for the table's branches.
_RELEASE_TYPES = {
    state: tuple(type(effect) for effect in _release(state, GenerationData(rid="r"))) for state in LIVE
}


# ---- Actions: the code behind the rows; guards that need the data live here --------------------------------------


def _start(
    state: State, gen: GenerationData, epoch: int, version: str | None, kept: int,
) -> tuple[GenerationData, list]:
    """A new upstream request under (epoch, version), appending ``kept`` generated tokens, for the remaining budget."""
    started = evolve(
        gen, requests=gen.requests + 1, epoch=epoch, weight_version=version, request_tokens=0, request_version=None,
        rid=None,
    )
    # A continuation's routing starts at the first position the aborted request never fed forward.
    start_len = gen.prompt_tokens + kept - 1 if kept else 0
    request = StartUpstream(started.requests, epoch, version, kept, started.remaining, start_len)
    return started, [request]


def _prepared(state: State, gen: GenerationData, event: Prepared) -> Goto:
    """Prepared with a budget: ask the gate."""
    if event.max_new_tokens < 1 or event.prompt_tokens < 0:
        raise Refused(f"a step needs a budget >= 1 and a prompt (got {event.max_new_tokens}, {event.prompt_tokens})")
    prepared = evolve(gen, prompt_tokens=event.prompt_tokens, budget=event.max_new_tokens)
    return Goto(State.PREPARED, prepared, [AskGate()])


def _prepare_failed(state: State, gen: GenerationData, event: PrepareFailed) -> Goto:
    """Prepare refused the request: answer the error; nothing is held."""
    return Goto(State.FAILED, gen, [RespondError(event.status, event.code, event.message)])


def _admitted(state: State, gen: GenerationData, event: GateAdmitted | Resumed) -> Goto:
    """Admitted (or resumed before its first request): the first request, for the whole budget."""
    started, effects = _start(state, gen, event.epoch, event.weight_version, kept=0)
    return Goto(State.STREAMING, started, effects)


def _parked(state: State, gen: GenerationData, event: GateWait) -> Goto:
    """The gate is paused: wait for resume (bounded by the pause-wait timeout)."""
    return Goto(State.WAITING, gen)


def _resumed(state: State, gen: GenerationData, event: Resumed) -> Goto:
    """Resumed after an interruption: continue, finish as length, or restart from scratch."""
    if gen.partial_rollout and gen.tokens:
        if not gen.remaining:
            # The budget is used up: the step is done without another upstream call.
            done = evolve(gen, epoch=event.epoch, weight_version=event.weight_version, finish=FinishKind.LENGTH)
            return Goto(State.PARSING, done, [ReleaseGate(), ParseOutput(FinishKind.LENGTH, gen.tokens)])
        started, effects = _start(state, gen, event.epoch, event.weight_version, kept=gen.tokens)
        return Goto(State.CONTINUING, started, effects)
    # No partial rollout (or nothing kept): discard and regenerate, so the step has a single version.
    restarted, effects = _start(state, evolve(gen, tokens=0), event.epoch, event.weight_version, kept=0)
    return Goto(State.STREAMING, restarted, [DiscardPartial(gen.tokens), *effects])


def _started(state: State, gen: GenerationData, event: UpstreamStarted) -> Goto:
    """The current request has its rid; if a pause came first, abort it right away."""
    if gen.rid is not None:
        raise Refused(f"the current upstream request already has the rid {gen.rid!r}")
    named = evolve(gen, rid=event.rid)
    return Goto(state, named, [AbortUpstream(event.rid, for_pause=True)] if state is State.ABORTING else [])


def _token(state: State, gen: GenerationData, event: TokensReceived) -> Goto:
    """Tokens while a request is open: accept them from the current request, stamped; drop any others."""
    if event.rid is None or event.rid != gen.rid:
        return Goto(state, gen, [DropTokens(event.rid, "not from the current upstream request", event.count)])
    if event.count > gen.remaining:
        raise Refused(
            f"{event.count} more tokens exceed the budget of {gen.budget} ({gen.tokens} generated); "
            "upstream sent more than max_new_tokens"
        )
    version = gen.weight_version if event.weight_version is None else event.weight_version
    if gen.request_tokens and version != gen.request_version:
        # The weights changed under a running request (not through the proxy's pause): never mix versions.
        message = f"weight version changed from {gen.request_version} to {version} within one upstream request"
        return Goto(State.FAILED, gen, [*_release(state, gen), RespondError(502, "weight_version_changed", message)])
    accepted = evolve(
        gen, tokens=gen.tokens + event.count, request_tokens=gen.request_tokens + event.count,
        request_version=version,
    )
    return Goto(state, accepted, [AcceptTokens(gen.tokens, version, event.tokens)])


def _straggler(state: State, gen: GenerationData, event: TokensReceived) -> Goto:
    """Tokens when no request is open (or after the end): stragglers, dropped."""
    return Goto(state, gen, [DropTokens(event.rid, "no upstream request is open", event.count)])


def _abort(state: State, gen: GenerationData, event: AbortRequested) -> Goto:
    """A pause: cut the upstream request; keep accepting what is already in flight until it ends."""
    return Goto(State.ABORTING, gen, [AbortUpstream(gen.rid, for_pause=True)])


def _abort_again(state: State, gen: GenerationData, event: AbortRequested) -> Goto:
    """Already aborting: nothing more to do."""
    return Goto(state, gen)


def _same_count(gen: GenerationData, tokens: int) -> None:
    """The controller feeds every token before the end of a request: the counts must agree."""
    if tokens != gen.request_tokens:
        raise Refused(f"the request delivered {tokens} tokens but {gen.request_tokens} were fed")


def _aborted(state: State, gen: GenerationData, event: UpstreamAborted) -> Goto:
    """The abort is acknowledged at a token boundary: the kept tokens wait for resume; no token from now on."""
    _same_count(gen, event.tokens)
    return Goto(State.INTERRUPTED, gen, [AcknowledgeAbortToGate()])


def _unrequested_abort(state: State, gen: GenerationData, event: UpstreamAborted) -> Goto:
    """SGLang aborted a request nobody in the proxy asked to abort (paused or aborted directly): fail."""
    message = "the upstream request was aborted outside the proxy's pause"
    return Goto(State.FAILED, gen, [*_release(state, gen), RespondError(502, "upstream_aborted", message)])


def _finished(state: State, gen: GenerationData, event: UpstreamFinished) -> Goto:
    """The request ended by itself (also racing an abort): leave the gate, parse."""
    _same_count(gen, event.tokens)
    done = evolve(gen, finish=event.finish)
    return Goto(State.PARSING, done, [ReleaseGate(), ParseOutput(event.finish, gen.tokens)])


def _failed(state: State, gen: GenerationData, event: UpstreamFailed) -> Goto:
    """The upstream failed: release everything, answer the error, commit nothing."""
    return Goto(State.FAILED, gen, [*_release(state, gen), RespondError(event.status, event.code, event.message)])


def _timed_out(state: State, gen: GenerationData, event: PauseWaitTimedOut) -> Goto:
    """Waited too long for resume: give up the wait, answer 503 (with Retry-After)."""
    error = RespondError(503, "paused_timeout", "generation is paused for a weight update; retry later")
    return Goto(State.FAILED, gen, [*_release(state, gen), error])


def _parsed(state: State, gen: GenerationData, event: ParseDone) -> Goto:
    """Parsed: ask the session to commit, once."""
    return Goto(State.COMMITTING, gen, [Commit(gen.tokens, gen.requests)])


def _commit_accepted(state: State, gen: GenerationData, event: CommitAccepted) -> Goto:
    """Committed (the only place that sets ``committed``): answer the client."""
    return Goto(State.RESPONDED, evolve(gen, committed=True), [Respond(gen.finish, gen.tokens)])


def _commit_rejected(state: State, gen: GenerationData, event: CommitRejected) -> Goto:
    """Too late: the session left ACTIVE; nothing was stored; answer session_finalized."""
    return Goto(State.REJECTED, gen, [RespondError(400, "session_finalized", event.reason)])


def _client_gone(state: State, gen: GenerationData, event: ClientDisconnected) -> Goto:
    """The client left: release everything, commit nothing, answer nobody."""
    return Goto(State.CANCELLED, gen, [*_release(state, gen), AnswerNobody()])


def _ignore(state: State, gen: GenerationData, event: object) -> Goto:
    """Idempotent or too late to matter: nothing changes."""
    return Goto(state, gen)


def _internal_error(state: State, gen: GenerationData, event: InternalError) -> Goto:
    """Fail closed: release everything, answer 500, report the bug."""
    error = RespondError(500, "internal_error", "internal error")
    return Goto(State.FAILED, gen, [*_release(state, gen), error, ReportFault(event.reason)])


def _report_only(state: State, gen: GenerationData, event: InternalError) -> Goto:
    """A bug after the end: nothing is held any more; report it."""
    return Goto(state, gen, [ReportFault(event.reason)])


# ---- The table: the spec. Pairs not listed are illegal. -----------------------------------------------------------

# A short name for the table's many state references.
S = State
# The states that stream a request and share their rows.
_STREAMS = (S.STREAMING, S.CONTINUING)
# Every state after the first upstream request was started and outside _UPSTREAM: stragglers are dropped there.
_NO_REQUEST_OPEN = (S.INTERRUPTED, S.PARSING, S.COMMITTING) + ABSORBING


def _failing(state: State, *extra: type, when: str = "") -> Branch:
    """A branch to FAILED that releases what ``state`` holds and answers an error (plus ``extra`` effects)."""
    return Branch(S.FAILED, (*_RELEASE_TYPES[state], RespondError, *extra), when=when)


def _cancelling(state: State) -> Branch:
    """The branch to CANCELLED (the client left): release what ``state`` holds, answer nobody."""
    return Branch(S.CANCELLED, (*_RELEASE_TYPES[state], AnswerNobody))


TABLE = TransitionTable.build(
    machine="GenerationMachine",
    states=State,
    events=EVENTS,
    initial=S.RECEIVED,
    policy=Policy.TRANSACTIONAL,
    check=_check,
    transitions=[
        # RECEIVED: prepare completes or fails as one unit.
        on(S.RECEIVED, Prepared, _prepared, Branch(S.PREPARED, [AskGate], when="budget >= 1")),
        on(S.RECEIVED, PrepareFailed, _prepare_failed, Branch(S.FAILED, [RespondError])),
        on(S.RECEIVED, ClientDisconnected, _client_gone, Branch(S.CANCELLED, [AnswerNobody])),
        # PREPARED: the gate's answer, fed in the same step.
        on(S.PREPARED, GateAdmitted, _admitted, Branch(S.STREAMING, [StartUpstream])),
        on(S.PREPARED, GateWait, _parked, Branch(S.WAITING)),
        # WAITING: resume starts the first request; the client or the timeout may give up.
        on(S.WAITING, Resumed, _admitted, Branch(S.STREAMING, [StartUpstream])),
        on(S.WAITING, PauseWaitTimedOut, _timed_out, _failing(S.WAITING)),
        on(S.WAITING, ClientDisconnected, _client_gone, _cancelling(S.WAITING)),
    ]
    # STREAMING and CONTINUING: the same rows (a continuation is a request like any other).
    + [
        row
        for state in _STREAMS
        for row in (
            on(state, UpstreamStarted, _started, Branch(state, when="rid not set")),
            on(
                state, TokensReceived, _token,
                Branch(state, [AcceptTokens], when="current rid, within budget, same version"),
                Branch(state, [DropTokens], when="another rid"),
                _failing(state, when="version changed within the request"),
            ),
            on(state, AbortRequested, _abort, Branch(S.ABORTING, [AbortUpstream])),
            on(state, UpstreamFinished, _finished,
               Branch(S.PARSING, [ReleaseGate, ParseOutput], when="tokens == fed")),
            on(state, UpstreamAborted, _unrequested_abort, _failing(state)),
            on(state, UpstreamFailed, _failed, _failing(state)),
            on(state, ClientDisconnected, _client_gone, _cancelling(state)),
        )
    ]
    + [
        # ABORTING: in-flight tokens still count; the request's end is the acknowledgement (or it finished anyway).
        on(S.ABORTING, UpstreamStarted, _started, Branch(S.ABORTING, [AbortUpstream], when="rid not set")),
        on(
            S.ABORTING, TokensReceived, _token,
            Branch(S.ABORTING, [AcceptTokens], when="current rid, within budget, same version"),
            Branch(S.ABORTING, [DropTokens], when="another rid"),
            _failing(S.ABORTING, when="version changed within the request"),
        ),
        on(S.ABORTING, AbortRequested, _abort_again, Branch(S.ABORTING)),
        on(S.ABORTING, UpstreamAborted, _aborted,
           Branch(S.INTERRUPTED, [AcknowledgeAbortToGate], when="tokens == fed")),
        on(S.ABORTING, UpstreamFinished, _finished,
           Branch(S.PARSING, [ReleaseGate, ParseOutput], when="tokens == fed")),
        on(S.ABORTING, UpstreamFailed, _failed, _failing(S.ABORTING)),
        on(S.ABORTING, ClientDisconnected, _client_gone, _cancelling(S.ABORTING)),
        # INTERRUPTED: waits for resume with its kept tokens.
        on(
            S.INTERRUPTED, Resumed, _resumed,
            Branch(S.CONTINUING, [StartUpstream], when="partial rollout, tokens kept, budget left"),
            Branch(S.PARSING, [ReleaseGate, ParseOutput], when="partial rollout, budget used up"),
            Branch(S.STREAMING, [DiscardPartial, StartUpstream], when="no partial rollout, or nothing kept"),
        ),
        on(S.INTERRUPTED, PauseWaitTimedOut, _timed_out, _failing(S.INTERRUPTED)),
        on(S.INTERRUPTED, ClientDisconnected, _client_gone, _cancelling(S.INTERRUPTED)),
        # PARSING and COMMITTING: the step is done upstream; it commits at most once.
        on(S.PARSING, ParseDone, _parsed, Branch(S.COMMITTING, [Commit])),
        on(S.PARSING, UpstreamFailed, _failed, _failing(S.PARSING)),
        on(S.PARSING, ClientDisconnected, _client_gone, _cancelling(S.PARSING)),
        on(S.COMMITTING, CommitAccepted, _commit_accepted, Branch(S.RESPONDED, [Respond])),
        on(S.COMMITTING, CommitRejected, _commit_rejected, Branch(S.REJECTED, [RespondError])),
        on(S.COMMITTING, ClientDisconnected, _ignore, Branch(S.COMMITTING, when="the commit lands or is rejected")),
    ]
    # Stragglers of an ended request are dropped wherever no request is open.
    + [on(state, TokensReceived, _straggler, Branch(state, [DropTokens])) for state in _NO_REQUEST_OPEN]
    # The absorbing states: a late disconnect changes nothing.
    + [on(state, ClientDisconnected, _ignore, Branch(state)) for state in ABSORBING]
    # Fail closed: every live state releases what it holds; the absorbing ones only report.
    + [on(state, InternalError, _internal_error, _failing(state, ReportFault)) for state in LIVE]
    + [on(state, InternalError, _report_only, Branch(state, [ReportFault])) for state in ABSORBING],
)


@attrs.define(eq=False)
class GenerationMachine(Machine):
    """One chat-completions request; its generation controller (proxy/) feeds it events and carries out its effects."""

    table = TABLE

    @classmethod
    def new(cls, partial_rollout: bool = False) -> GenerationMachine:
        """A generation that just arrived, with the proxy's --dressage-partial-rollout setting."""
        return cls(State.RECEIVED, GenerationData(partial_rollout=partial_rollout))

    def send_fail_closed(self, event: object) -> list:
        """``send``; an illegal event instead fails closed (``InternalError``), returning the release effects."""
        try:
            return self.send(event)
        except (IllegalTransition, TableError) as error:
            # Refused (or this module's code disagreeing with its table): nothing changed, so the state still says
            # what the generation holds. InternalError is legal in every state, so this never raises.
            return self.send(InternalError(f"{type(error).__name__}: {error}"))

    def statistics(self) -> GenerationStatistics:
        """A frozen report for the debug view."""
        gen: GenerationData = self._data
        return GenerationStatistics(
            self._state.name, gen.budget, gen.tokens, gen.requests, gen.epoch, gen.weight_version, gen.committed,
        )


__all__ = ["TABLE", "GenerationMachine"]
