"""GenerationMachine, level 1: every state x event pair with exact outcomes, then the named behaviours.

The expected outcomes are written out by hand (not read from the table). Every state starts from one realistic
record (partial rollout on, prompt of 4 tokens, budget 3; in the upstream states one token already received from
request ``r1`` under ``v2``; CONTINUING is request ``r2`` under ``v3`` with one kept token). Rows with several
branches get their other branches in the named tests below the matrix.
"""

from __future__ import annotations

import attrs
import pytest

from statemachines.core import IllegalTransition, Snapshot, TableError
from statemachines.generation import (
    ABSORBING,
    EVENTS,
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
from statemachines.generation_machine import TABLE, GenerationMachine

S = State
STOP, LENGTH = FinishKind.STOP, FinishKind.LENGTH
# The token records of one read (the controller's are upstream Tokens; the machine only counts and hands them back).
ONE = ("t0",)
TWO = ("t0", "t1")

# One instance per event type, as the matrix sends them.
SAMPLE = {
    Prepared: Prepared(prompt_tokens=4, max_new_tokens=3),
    PrepareFailed: PrepareFailed(400, "context_overflow", "the prompt fills the window"),
    GateAdmitted: GateAdmitted(2, "v2"),
    GateWait: GateWait(2),
    Resumed: Resumed(3, "v3"),
    UpstreamStarted: UpstreamStarted("r9"),
    TokensReceived: TokensReceived("r1", "v2", ONE),
    UpstreamFinished: UpstreamFinished(STOP, 1),
    UpstreamAborted: UpstreamAborted(1),
    UpstreamFailed: UpstreamFailed(502, "upstream_unavailable", "connection refused"),
    AbortRequested: AbortRequested(),
    PauseWaitTimedOut: PauseWaitTimedOut(),
    ParseDone: ParseDone(),
    CommitAccepted: CommitAccepted(),
    CommitRejected: CommitRejected("the session was finalized"),
    ClientDisconnected: ClientDisconnected(),
    InternalError: InternalError("bug"),
}

# The records the states start from.
FRESH = GenerationData(partial_rollout=True)
BASE = GenerationData(partial_rollout=True, prompt_tokens=4, budget=3)
RUNNING = attrs.evolve(
    BASE, tokens=1, request_tokens=1, requests=1, epoch=2, weight_version="v2", request_version="v2", rid="r1",
)
CONTINUED = attrs.evolve(
    BASE, tokens=2, request_tokens=1, requests=2, epoch=3, weight_version="v3", request_version="v3", rid="r2",
)
DONE = attrs.evolve(RUNNING, finish=STOP)
START = {
    S.RECEIVED: FRESH, S.PREPARED: BASE, S.WAITING: BASE, S.STREAMING: RUNNING, S.ABORTING: RUNNING,
    S.INTERRUPTED: RUNNING, S.CONTINUING: CONTINUED, S.PARSING: DONE, S.COMMITTING: DONE,
    S.RESPONDED: attrs.evolve(DONE, committed=True), S.FAILED: RUNNING, S.CANCELLED: RUNNING, S.REJECTED: DONE,
}

ERROR_500 = RespondError(500, "internal_error", "internal error")
BUG = ReportFault("bug")
TIMEOUT_503 = RespondError(503, "paused_timeout", "generation is paused for a weight update; retry later")
UPSTREAM_502 = RespondError(502, "upstream_unavailable", "connection refused")
ABORTED_502 = RespondError(502, "upstream_aborted", "the upstream request was aborted outside the proxy's pause")
STALE = DropTokens("r1", "not from the current upstream request")
AFTER = DropTokens("r1", "no upstream request is open")
# What a generation holds, per state, released when it ends without committing.
HELD_R1 = [AbortUpstream("r1", for_pause=False), ReleaseGate(), DropFromSession()]
HELD_R2 = [AbortUpstream("r2", for_pause=False), ReleaseGate(), DropFromSession()]
HELD_WAIT = [CancelGateWait(), DropFromSession()]
HELD_ABORTING = [ReleaseGate(), DropFromSession()]

# (state, event type) -> (target, data, effects); absent -> illegal (raises, nothing changes).
EXPECTED = {
    (S.RECEIVED, Prepared): (S.PREPARED, BASE, [AskGate()]),
    (S.RECEIVED, PrepareFailed): (
        S.FAILED, FRESH, [RespondError(400, "context_overflow", "the prompt fills the window")],
    ),
    (S.RECEIVED, ClientDisconnected): (S.CANCELLED, FRESH, [AnswerNobody()]),
    (S.RECEIVED, InternalError): (S.FAILED, FRESH, [ERROR_500, BUG]),
    (S.PREPARED, GateAdmitted): (
        S.STREAMING, attrs.evolve(BASE, requests=1, epoch=2, weight_version="v2"),
        [StartUpstream(1, 2, "v2", kept_tokens=0, max_new_tokens=3, routed_experts_start_len=0)],
    ),
    (S.PREPARED, GateWait): (S.WAITING, BASE, []),
    (S.PREPARED, InternalError): (S.FAILED, BASE, [DropFromSession(), ERROR_500, BUG]),
    (S.WAITING, Resumed): (
        S.STREAMING, attrs.evolve(BASE, requests=1, epoch=3, weight_version="v3"),
        [StartUpstream(1, 3, "v3", kept_tokens=0, max_new_tokens=3, routed_experts_start_len=0)],
    ),
    (S.WAITING, PauseWaitTimedOut): (S.FAILED, BASE, [*HELD_WAIT, TIMEOUT_503]),
    (S.WAITING, ClientDisconnected): (S.CANCELLED, BASE, [*HELD_WAIT, AnswerNobody()]),
    (S.WAITING, InternalError): (S.FAILED, BASE, [*HELD_WAIT, ERROR_500, BUG]),
    (S.STREAMING, TokensReceived): (
        S.STREAMING, attrs.evolve(RUNNING, tokens=2, request_tokens=2), [AcceptTokens(1, "v2", ONE)],
    ),
    (S.STREAMING, AbortRequested): (S.ABORTING, RUNNING, [AbortUpstream("r1", for_pause=True)]),
    (S.STREAMING, UpstreamFinished): (S.PARSING, DONE, [ReleaseGate(), ParseOutput(STOP, 1)]),
    (S.STREAMING, UpstreamAborted): (S.FAILED, RUNNING, [*HELD_R1, ABORTED_502]),
    (S.STREAMING, UpstreamFailed): (S.FAILED, RUNNING, [*HELD_R1, UPSTREAM_502]),
    (S.STREAMING, ClientDisconnected): (S.CANCELLED, RUNNING, [*HELD_R1, AnswerNobody()]),
    (S.STREAMING, InternalError): (S.FAILED, RUNNING, [*HELD_R1, ERROR_500, BUG]),
    (S.CONTINUING, TokensReceived): (S.CONTINUING, CONTINUED, [STALE]),
    (S.CONTINUING, AbortRequested): (S.ABORTING, CONTINUED, [AbortUpstream("r2", for_pause=True)]),
    (S.CONTINUING, UpstreamFinished): (
        S.PARSING, attrs.evolve(CONTINUED, finish=STOP), [ReleaseGate(), ParseOutput(STOP, 2)],
    ),
    (S.CONTINUING, UpstreamAborted): (S.FAILED, CONTINUED, [*HELD_R2, ABORTED_502]),
    (S.CONTINUING, UpstreamFailed): (S.FAILED, CONTINUED, [*HELD_R2, UPSTREAM_502]),
    (S.CONTINUING, ClientDisconnected): (S.CANCELLED, CONTINUED, [*HELD_R2, AnswerNobody()]),
    (S.CONTINUING, InternalError): (S.FAILED, CONTINUED, [*HELD_R2, ERROR_500, BUG]),
    (S.ABORTING, TokensReceived): (
        S.ABORTING, attrs.evolve(RUNNING, tokens=2, request_tokens=2), [AcceptTokens(1, "v2", ONE)],
    ),
    (S.ABORTING, AbortRequested): (S.ABORTING, RUNNING, []),
    (S.ABORTING, UpstreamAborted): (S.INTERRUPTED, RUNNING, [AcknowledgeAbortToGate()]),
    (S.ABORTING, UpstreamFinished): (S.PARSING, DONE, [ReleaseGate(), ParseOutput(STOP, 1)]),
    (S.ABORTING, UpstreamFailed): (S.FAILED, RUNNING, [*HELD_ABORTING, UPSTREAM_502]),
    (S.ABORTING, ClientDisconnected): (S.CANCELLED, RUNNING, [*HELD_ABORTING, AnswerNobody()]),
    (S.ABORTING, InternalError): (S.FAILED, RUNNING, [*HELD_ABORTING, ERROR_500, BUG]),
    (S.INTERRUPTED, Resumed): (
        S.CONTINUING,
        attrs.evolve(RUNNING, request_tokens=0, requests=2, epoch=3, weight_version="v3", request_version=None,
                     rid=None),
        [StartUpstream(2, 3, "v3", kept_tokens=1, max_new_tokens=2, routed_experts_start_len=4)],
    ),
    (S.INTERRUPTED, TokensReceived): (S.INTERRUPTED, RUNNING, [AFTER]),
    (S.INTERRUPTED, PauseWaitTimedOut): (S.FAILED, RUNNING, [*HELD_WAIT, TIMEOUT_503]),
    (S.INTERRUPTED, ClientDisconnected): (S.CANCELLED, RUNNING, [*HELD_WAIT, AnswerNobody()]),
    (S.INTERRUPTED, InternalError): (S.FAILED, RUNNING, [*HELD_WAIT, ERROR_500, BUG]),
    (S.PARSING, ParseDone): (S.COMMITTING, DONE, [Commit(tokens=1, requests=1)]),
    (S.PARSING, TokensReceived): (S.PARSING, DONE, [AFTER]),
    (S.PARSING, UpstreamFailed): (S.FAILED, DONE, [DropFromSession(), UPSTREAM_502]),
    (S.PARSING, ClientDisconnected): (S.CANCELLED, DONE, [DropFromSession(), AnswerNobody()]),
    (S.PARSING, InternalError): (S.FAILED, DONE, [DropFromSession(), ERROR_500, BUG]),
    (S.COMMITTING, CommitAccepted): (S.RESPONDED, attrs.evolve(DONE, committed=True), [Respond(STOP, 1)]),
    (S.COMMITTING, CommitRejected): (
        S.REJECTED, DONE, [RespondError(400, "session_finalized", "the session was finalized")],
    ),
    (S.COMMITTING, TokensReceived): (S.COMMITTING, DONE, [AFTER]),
    (S.COMMITTING, ClientDisconnected): (S.COMMITTING, DONE, []),
    (S.COMMITTING, InternalError): (S.FAILED, DONE, [ERROR_500, BUG]),
}
# The absorbing states: stragglers dropped, a late disconnect ignored, a late bug reported; they never move.
for _state in ABSORBING:
    EXPECTED[(_state, TokensReceived)] = (_state, START[_state], [AFTER])
    EXPECTED[(_state, ClientDisconnected)] = (_state, START[_state], [])
    EXPECTED[(_state, InternalError)] = (_state, START[_state], [BUG])
# Declared rows whose guard refuses the sample: the current request already has its rid.
GUARD_REASONS = {
    (S.STREAMING, UpstreamStarted): "the current upstream request already has the rid 'r1'",
    (S.ABORTING, UpstreamStarted): "the current upstream request already has the rid 'r1'",
    (S.CONTINUING, UpstreamStarted): "the current upstream request already has the rid 'r2'",
}
LEGAL_PAIRS = set(EXPECTED) | set(GUARD_REASONS)


def machine_in(state: State, data: GenerationData | None = None) -> GenerationMachine:
    """A generation restored in exactly this state (with the matrix's record unless told)."""
    return GenerationMachine.from_snapshot(Snapshot(state, START[state] if data is None else data))


def test_generation_table_declares_exactly_the_expected_pairs():
    assert set(TABLE.rows) == LEGAL_PAIRS
    assert set(TABLE.events) == set(SAMPLE) == set(EVENTS)
    assert len(TABLE.rows) == 62


@pytest.mark.parametrize("state", list(State), ids=lambda s: s.name)
@pytest.mark.parametrize("event_type", EVENTS, ids=lambda e: e.__name__)
def test_generation_every_state_x_event(state, event_type):
    gen = machine_in(state)
    before = gen.snapshot()
    expected = EXPECTED.get((state, event_type))
    if expected is not None:
        target, after, effects = expected
        assert gen.send(SAMPLE[event_type]) == effects
        assert gen.snapshot() == Snapshot(target, after)
        return
    # Illegal: IllegalTransition naming the pair; transactional, so state and data are unchanged.
    with pytest.raises(IllegalTransition) as info:
        gen.send(SAMPLE[event_type])
    assert f"GenerationMachine can't handle event type {event_type.__name__} when state={state.name}" in str(info.value)
    assert info.value.reason == GUARD_REASONS.get((state, event_type))
    assert gen.snapshot() == before


@pytest.mark.parametrize("state", list(State), ids=lambda s: s.name)
def test_generation_absorbing_states_never_move_and_live_ones_fail_closed(state):
    # Every event, through send_fail_closed: an absorbing state stays put whatever comes; a live state either
    # takes its row or fails closed into FAILED (never anywhere undeclared).
    for event_type in EVENTS:
        gen = machine_in(state)
        gen.send_fail_closed(SAMPLE[event_type])
        after = gen.snapshot().state
        if state in ABSORBING:
            assert after is state
        elif (state, event_type) not in EXPECTED:
            assert after is S.FAILED


# ---- The other branches, guards and named behaviours --------------------------------------------------------------


def test_generation_new_is_RECEIVED_with_the_partial_rollout_setting():
    assert GenerationMachine.new().snapshot() == Snapshot(S.RECEIVED, GenerationData(partial_rollout=False))
    assert GenerationMachine.new(partial_rollout=True).snapshot().data.partial_rollout


@pytest.mark.parametrize("prompt, budget", [(4, 0), (-1, 3)])
def test_generation_prepared_refuses_an_empty_budget_or_a_negative_prompt(prompt, budget):
    gen = GenerationMachine.new()
    with pytest.raises(IllegalTransition, match="a step needs a budget >= 1"):
        gen.send(Prepared(prompt, budget))
    assert gen.snapshot().state is S.RECEIVED


@pytest.mark.parametrize("state", [S.STREAMING, S.CONTINUING], ids=lambda s: s.name)
def test_generation_upstream_started_records_the_rid_once(state):
    gen = machine_in(state, attrs.evolve(START[state], rid=None))
    assert gen.send(UpstreamStarted("r7")) == []
    assert gen.snapshot().data.rid == "r7"
    with pytest.raises(IllegalTransition, match="already has the rid 'r7'"):
        gen.send(UpstreamStarted("r8"))


def test_generation_upstream_started_while_aborting_aborts_that_rid_at_once():
    # The pause came between StartUpstream and the rid: the request that goes out is aborted right away.
    gen = machine_in(S.ABORTING, attrs.evolve(RUNNING, rid=None, tokens=0, request_tokens=0))
    assert gen.send(UpstreamStarted("r7")) == [AbortUpstream("r7", for_pause=True)]


def test_generation_abort_before_the_rid_is_known_cancels_the_scope_only():
    gen = machine_in(S.STREAMING, attrs.evolve(RUNNING, rid=None, tokens=0, request_tokens=0))
    assert gen.send(AbortRequested()) == [AbortUpstream(None, for_pause=True)]


@pytest.mark.parametrize("state", [S.STREAMING, S.ABORTING], ids=lambda s: s.name)
def test_generation_token_of_another_rid_or_before_the_rid_is_dropped(state):
    gen = machine_in(state)
    assert gen.send(TokensReceived("r0", "v2", ONE)) == [DropTokens("r0", "not from the current upstream request")]
    assert gen.send(TokensReceived(None, "v2", ONE)) == [DropTokens(None, "not from the current upstream request")]
    assert gen.snapshot() == Snapshot(state, RUNNING)


def test_generation_token_without_a_reported_version_is_stamped_with_the_admission_version():
    gen = machine_in(S.STREAMING, attrs.evolve(RUNNING, tokens=0, request_tokens=0, request_version=None))
    assert gen.send(TokensReceived("r1", None, ONE)) == [AcceptTokens(0, "v2", ONE)]
    assert gen.send(TokensReceived("r1", None, ONE)) == [AcceptTokens(1, "v2", ONE)]


def test_generation_first_token_fixes_the_request_version_to_what_sglang_reports():
    # The gate announced v2 but SGLang reports v2b: the reported version wins (spec section 7), for the request.
    gen = machine_in(S.STREAMING, attrs.evolve(RUNNING, tokens=0, request_tokens=0, request_version=None))
    assert gen.send(TokensReceived("r1", "v2b", ONE)) == [AcceptTokens(0, "v2b", ONE)]
    assert gen.send(TokensReceived("r1", "v2b", ONE)) == [AcceptTokens(1, "v2b", ONE)]
    assert gen.snapshot().data.request_version == "v2b"


@pytest.mark.parametrize("state", [S.STREAMING, S.ABORTING], ids=lambda s: s.name)
def test_generation_token_of_another_version_within_one_request_fails_instead_of_mixing(state):
    gen = machine_in(state)
    effects = gen.send(TokensReceived("r1", "v3", ONE))
    message = "weight version changed from v2 to v3 within one upstream request"
    held = HELD_R1 if state is S.STREAMING else HELD_ABORTING
    assert effects == [*held, RespondError(502, "weight_version_changed", message)]
    assert gen.snapshot() == Snapshot(S.FAILED, RUNNING)


def test_generation_token_beyond_the_budget_is_refused():
    # The budget is 3 and 3 tokens are kept: upstream sent more than max_new_tokens.
    gen = machine_in(S.STREAMING, attrs.evolve(RUNNING, tokens=3, request_tokens=3))
    before = gen.snapshot()
    with pytest.raises(IllegalTransition, match="1 more tokens exceed the budget of 3"):
        gen.send(TokensReceived("r1", "v2", ONE))
    assert gen.snapshot() == before


@pytest.mark.parametrize("state", [S.STREAMING, S.ABORTING], ids=lambda s: s.name)
def test_generation_tokens_of_one_read_are_accepted_together_up_to_the_budget(state):
    # The budget is 3 and 1 token is kept: a read of 2 fills it exactly, one index range, one step.
    gen = machine_in(state, RUNNING)
    assert gen.send(TokensReceived("r1", None, TWO)) == [AcceptTokens(1, "v2", TWO)]
    assert gen.snapshot() == Snapshot(state, attrs.evolve(RUNNING, tokens=3, request_tokens=3))


def test_generation_a_read_beyond_the_budget_is_refused_whole():
    # Not "accept what fits": a read over max_new_tokens is an upstream bug; nothing of it is recorded.
    gen = machine_in(S.STREAMING, RUNNING)
    before = gen.snapshot()
    with pytest.raises(IllegalTransition, match="3 more tokens exceed the budget of 3"):
        gen.send(TokensReceived("r1", "v2", ("t0", "t1", "t2")))
    assert gen.snapshot() == before


def test_generation_a_read_of_stragglers_is_dropped_whole():
    gen = machine_in(S.STREAMING, RUNNING)
    stragglers = TokensReceived("r0", "v2", ("t",) * 5)
    assert gen.send(stragglers) == [DropTokens("r0", "not from the current upstream request", 5)]
    assert gen.snapshot() == Snapshot(S.STREAMING, RUNNING)


def test_generation_a_read_has_at_least_one_token():
    with pytest.raises(ValueError):
        TokensReceived("r1", "v2", ())


@pytest.mark.parametrize("event", [UpstreamFinished(STOP, 2), UpstreamAborted(0)], ids=repr)
def test_generation_request_end_with_a_different_token_count_is_refused(event):
    gen = machine_in(S.ABORTING)
    with pytest.raises(IllegalTransition, match="the request delivered .* tokens but 1 were fed"):
        gen.send(event)


def test_generation_resume_with_partial_rollout_and_budget_used_up_finishes_as_length_without_a_request():
    gen = machine_in(S.INTERRUPTED, attrs.evolve(RUNNING, tokens=3, request_tokens=3))
    assert gen.send(Resumed(3, "v3")) == [ReleaseGate(), ParseOutput(LENGTH, 3)]
    assert gen.snapshot().state is S.PARSING
    assert gen.snapshot().data.requests == 1


def test_generation_resume_without_partial_rollout_discards_and_restarts_with_the_full_budget():
    interrupted = attrs.evolve(RUNNING, partial_rollout=False)
    gen = machine_in(S.INTERRUPTED, interrupted)
    assert gen.send(Resumed(3, "v3")) == [
        DiscardPartial(1), StartUpstream(2, 3, "v3", kept_tokens=0, max_new_tokens=3, routed_experts_start_len=0),
    ]
    assert gen.snapshot() == Snapshot(
        S.STREAMING,
        attrs.evolve(interrupted, tokens=0, request_tokens=0, requests=2, epoch=3, weight_version="v3",
                     request_version=None, rid=None),
    )


def test_generation_resume_with_partial_rollout_but_nothing_kept_restarts():
    gen = machine_in(S.INTERRUPTED, attrs.evolve(RUNNING, tokens=0, request_tokens=0, request_version=None))
    effects = gen.send(Resumed(3, "v3"))
    assert effects[0] == DiscardPartial(0)
    assert gen.snapshot().state is S.STREAMING


def test_generation_commits_at_most_once():
    gen = machine_in(S.COMMITTING)
    assert gen.send(CommitAccepted()) == [Respond(STOP, 1)]
    for event in (ParseDone(), CommitAccepted(), CommitRejected("late")):
        with pytest.raises(IllegalTransition):
            gen.send(event)
    assert gen.statistics() == GenerationStatistics("RESPONDED", 3, 1, 1, 2, "v2", committed=True)


def test_generation_send_fail_closed_releases_what_is_held_and_answers_500():
    gen = machine_in(S.STREAMING)
    effects = gen.send_fail_closed(ParseDone())
    assert effects[:4] == [*HELD_R1, ERROR_500]
    assert isinstance(effects[4], ReportFault) and "ParseDone when state=STREAMING" in effects[4].reason
    assert gen.snapshot() == Snapshot(S.FAILED, RUNNING)
    # Legal events go through unchanged.
    assert machine_in(S.STREAMING).send_fail_closed(AbortRequested()) == [AbortUpstream("r1", for_pause=True)]


@pytest.mark.parametrize(
    "state, data, broken",
    [
        (S.STREAMING, attrs.evolve(RUNNING, tokens=4, request_tokens=4), "4 tokens over the budget 3"),
        (S.STREAMING, attrs.evolve(RUNNING, request_tokens=2), "2 tokens from the current request but 1"),
        (S.STREAMING, attrs.evolve(RUNNING, partial_rollout=False, tokens=2), "without partial rollout"),
        (S.PARSING, attrs.evolve(DONE, committed=True), "PARSING with committed=True"),
        (S.RESPONDED, DONE, "RESPONDED with committed=False"),
        (S.ABORTING, BASE, "ABORTING without an admitted upstream request"),
        (S.CONTINUING, RUNNING, "CONTINUING without kept tokens"),
        (S.COMMITTING, RUNNING, "COMMITTING without a finish kind"),
    ],
)
def test_generation_from_snapshot_refuses_impossible_states(state, data, broken):
    with pytest.raises(TableError, match=broken):
        GenerationMachine.from_snapshot(Snapshot(state, data))


def test_generation_counts_are_never_negative():
    with pytest.raises(ValueError):
        GenerationData(tokens=-1)
    assert GenerationData(budget=3, tokens=1).remaining == 2


def test_generation_two_pauses_with_partial_rollout_stamp_each_request_with_its_version():
    # One step of budget 4: 1 token under v0, paused (one more in flight), continued under v1 for 2 tokens,
    # paused again right after resume (nothing received), continued under v2, finishing at the budget.
    gen = GenerationMachine.new(partial_rollout=True)
    assert gen.send(Prepared(10, 4)) == [AskGate()]
    assert gen.send(GateAdmitted(0, "v0")) == [StartUpstream(1, 0, "v0", 0, 4, 0)]
    gen.send(UpstreamStarted("a"))
    assert gen.send(TokensReceived("a", "v0", ONE)) == [AcceptTokens(0, "v0", ONE)]
    assert gen.send(AbortRequested()) == [AbortUpstream("a", for_pause=True)]
    assert gen.send(TokensReceived("a", "v0", ONE)) == [AcceptTokens(1, "v0", ONE)]
    assert gen.send(UpstreamAborted(2)) == [AcknowledgeAbortToGate()]
    assert gen.send(TokensReceived("a", "v0", ONE)) == [DropTokens("a", "no upstream request is open")]
    assert gen.send(Resumed(1, "v1")) == [StartUpstream(2, 1, "v1", 2, 2, 11)]
    gen.send(UpstreamStarted("b"))
    assert gen.send(AbortRequested()) == [AbortUpstream("b", for_pause=True)]
    assert gen.send(UpstreamAborted(0)) == [AcknowledgeAbortToGate()]
    assert gen.send(Resumed(2, "v2")) == [StartUpstream(3, 2, "v2", 2, 2, 11)]
    gen.send(UpstreamStarted("c"))
    assert gen.send(TokensReceived("a", "v0", ONE)) == [DropTokens("a", "not from the current upstream request")]
    assert gen.send(TokensReceived("c", "v2", ONE)) == [AcceptTokens(2, "v2", ONE)]
    assert gen.send(TokensReceived("c", "v2", ONE)) == [AcceptTokens(3, "v2", ONE)]
    assert gen.send(UpstreamFinished(LENGTH, 2)) == [ReleaseGate(), ParseOutput(LENGTH, 4)]
    assert gen.send(ParseDone()) == [Commit(tokens=4, requests=3)]
    assert gen.send(CommitAccepted()) == [Respond(LENGTH, 4)]
    assert gen.statistics() == GenerationStatistics("RESPONDED", 4, 4, 3, 2, "v2", committed=True)


def test_generation_late_commit_is_rejected_and_answers_session_finalized():
    gen = machine_in(S.COMMITTING)
    assert gen.send(CommitRejected("the session was finalized")) == [
        RespondError(400, "session_finalized", "the session was finalized"),
    ]
    assert gen.snapshot() == Snapshot(S.REJECTED, DONE)


# ---- The effects carry what the driver needs (no data beside the machine) --------------------------------------


def test_generation_accept_tokens_hands_back_the_very_tokens_of_the_read():
    # The driver records what AcceptTokens holds, never a read it kept aside: the records are passed through as is.
    read = (object(), object())
    gen = machine_in(S.STREAMING, RUNNING)
    [accepted] = gen.send(TokensReceived("r1", None, read))
    assert isinstance(accepted, AcceptTokens) and accepted.count == 2
    assert all(mine is theirs for mine, theirs in zip(accepted.tokens, read, strict=True))
    # A read the machine drops is not handed back: nothing of it can be recorded.
    assert gen.send(TokensReceived("r0", None, read)) == [DropTokens("r0", "not from the current upstream request", 2)]


def test_generation_abort_upstream_says_whose_request_and_whether_a_pause_cuts_it():
    # A pause's cut (the generation keeps its tokens): for_pause, also for a rid drawn after the pause came.
    assert machine_in(S.CONTINUING).send(AbortRequested()) == [AbortUpstream("r2", for_pause=True)]
    late = machine_in(S.ABORTING, attrs.evolve(RUNNING, rid=None, tokens=0, request_tokens=0))
    assert late.send(UpstreamStarted("r7")) == [AbortUpstream("r7", for_pause=True)]
    # The generation ending (failure, client gone, bug): not a pause's; the request is closed at once.
    for event in (UpstreamFailed(), ClientDisconnected(), InternalError("bug")):
        aborts = [e for e in machine_in(S.STREAMING).send(event) if isinstance(e, AbortUpstream)]
        assert aborts == [AbortUpstream("r1", for_pause=False)], event


@pytest.mark.parametrize("state", [s for s in State if (s, ClientDisconnected) in EXPECTED], ids=lambda s: s.name)
def test_generation_a_client_gone_ends_with_answer_nobody_so_the_driver_stops_feeding(state):
    # Every way into CANCELLED ends with AnswerNobody, and only those: a disconnect while COMMITTING (the commit
    # lands or is rejected, then answers) or after the end changes nothing.
    gen = machine_in(state)
    effects = gen.send(ClientDisconnected())
    cancelled = gen.snapshot().state is S.CANCELLED and state is not S.CANCELLED
    assert (effects[-1:] == [AnswerNobody()]) == cancelled
    assert cancelled == (state not in ABSORBING and state is not S.COMMITTING)
