"""GenerationMachine, level 2: hypothesis drives the real machine and a small independent model side by side.

The model is written from spec sections 5.2, 7 and 8 and architecture.md, not from the machine's code: a state name,
a few counters and what the generation holds. Each rule sends one event and compares the effects with the model's
prediction. Illegal events go through ``send`` (expect ``IllegalTransition``, nothing changed) or through
``send_fail_closed`` (expect the release effects and FAILED, or nothing in an absorbing state).
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from statemachines import generation as g
from statemachines.core import IllegalTransition
from statemachines.generation_machine import GenerationMachine

VERSIONS = st.sampled_from([None, "v0", "v1", "v2"])
# Drawn True about one time in four: the controller reports a request's rid in a later step.
RARELY = st.sampled_from([False, False, False, True])


def read(count: int) -> tuple[str, ...]:
    """The token records of one read of ``count`` tokens (the machine only counts them and hands them back)."""
    return tuple(f"t{k}" for k in range(count))


ENDED = {"RESPONDED", "FAILED", "CANCELLED", "REJECTED"}
UPSTREAM = {"STREAMING", "CONTINUING", "ABORTING"}
# The model's own list of what each state accepts (from the design, not read from the table).
ACCEPTS = {
    "RECEIVED": {g.Prepared, g.PrepareFailed, g.ClientDisconnected},
    "PREPARED": {g.GateAdmitted, g.GateWait},
    "WAITING": {g.Resumed, g.PauseWaitTimedOut, g.ClientDisconnected},
    "STREAMING": {g.UpstreamStarted, g.TokensReceived, g.AbortRequested, g.UpstreamFinished, g.UpstreamAborted,
                  g.UpstreamFailed, g.ClientDisconnected},
    "ABORTING": {g.UpstreamStarted, g.TokensReceived, g.AbortRequested, g.UpstreamFinished, g.UpstreamAborted,
                 g.UpstreamFailed, g.ClientDisconnected},
    "INTERRUPTED": {g.Resumed, g.PauseWaitTimedOut, g.ClientDisconnected, g.TokensReceived},
    "PARSING": {g.ParseDone, g.UpstreamFailed, g.ClientDisconnected, g.TokensReceived},
    "COMMITTING": {g.CommitAccepted, g.CommitRejected, g.ClientDisconnected, g.TokensReceived},
    **{state: {g.TokensReceived, g.ClientDisconnected} for state in ENDED},
}
ACCEPTS["CONTINUING"] = ACCEPTS["STREAMING"]
# One instance of every event type (arguments chosen so that a legal one would be accepted or dropped harmlessly).
ANY_EVENT = [
    g.Prepared(4, 2), g.PrepareFailed(400, "x"), g.GateAdmitted(9, "v9"), g.GateWait(9), g.Resumed(9, "v9"),
    g.UpstreamStarted("z"), g.TokensReceived("z", "v9", ("t",)), g.UpstreamFinished(g.FinishKind.STOP, 99),
    g.UpstreamAborted(99), g.UpstreamFailed(), g.AbortRequested(), g.PauseWaitTimedOut(), g.ParseDone(),
    g.CommitAccepted(), g.CommitRejected("late"), g.ClientDisconnected(),
]


class GenerationModel:
    """What the generation should be: a state name, the budget, the tokens, the current request, what it holds."""

    def __init__(self, partial: bool) -> None:
        self.partial = partial
        self.state = "RECEIVED"
        self.prompt = self.budget = self.tokens = self.request_tokens = self.requests = 0
        self.epoch, self.version, self.rid, self.request_version, self.finish = None, None, None, None, None
        self.commits = 0

    def held(self) -> list:
        """What ending now without a commit must release (spec 5.2, 7; architecture invariant 4)."""
        if self.state in ("STREAMING", "CONTINUING"):
            return [g.AbortUpstream(self.rid, for_pause=False), g.ReleaseGate(), g.DropFromSession()]
        if self.state == "ABORTING":
            return [g.ReleaseGate(), g.DropFromSession()]
        if self.state in ("WAITING", "INTERRUPTED"):
            return [g.CancelGateWait(), g.DropFromSession()]
        if self.state in ("PREPARED", "PARSING"):
            return [g.DropFromSession()]
        return []

    def start(self, epoch: int, version: str | None, kept: int) -> g.StartUpstream:
        """A new upstream request for the remaining budget."""
        self.requests += 1
        self.epoch, self.version, self.rid, self.request_version, self.request_tokens = epoch, version, None, None, 0
        start_len = self.prompt + kept - 1 if kept else 0
        return g.StartUpstream(self.requests, epoch, version, kept, self.budget - kept, start_len)


class GenerationVersusModel(RuleBasedStateMachine):
    """The lifecycle rules drive the generation forward; ``unusual`` picks one of the unusual events that apply
    (failures, disconnects, timeouts, stragglers, idempotent repeats, illegal events), so that runs get far into
    the lifecycle (pauses, continuations, commits) instead of ending at once. Each run drives generations in turn."""

    def __init__(self) -> None:
        super().__init__()
        self.gen: GenerationMachine | None = None
        self.model: GenerationModel | None = None
        self.absorbed: str | None = None
        self.commit_effects = 0
        # The states in which the machine emitted AcceptTokens, over the whole run.
        self.accepted_in: set[str] = set()

    def send(self, event, expected: list) -> None:
        """Send a legal event; the effects must be the model's prediction."""
        state_before = self.gen.snapshot().state.name
        effects = self.gen.send(event)
        assert effects == expected, (state_before, event)
        # Where tokens were accepted (checked by the invariant tokens_only_while_a_request_is_open).
        if any(isinstance(e, g.AcceptTokens) for e in effects):
            self.accepted_in.add(state_before)
        self.commit_effects += sum(isinstance(e, g.Commit) for e in effects)

    def send_illegal(self, event) -> None:
        """Send an illegal event: IllegalTransition, and nothing changes."""
        before = self.gen.snapshot()
        with pytest.raises(IllegalTransition):
            self.gen.send(event)
        assert self.gen.snapshot() == before

    def is_(self, *states: str) -> bool:
        return self.model is not None and self.model.state in states

    def end(self, state: str, event, answer: list) -> None:
        """An early end: the model releases what it holds (predicted before the state changes)."""
        held = self.model.held()
        self.model.state = state
        self.send(event, held + answer)

    # ---- the lifecycle -----------------------------------------------------------------------------------------

    @precondition(lambda self: self.gen is None or self.model.state in ENDED)
    @rule(partial=st.booleans())
    def arrive(self, partial):
        # The next request (the previous one, if any, has ended).
        self.gen = GenerationMachine.new(partial_rollout=partial)
        self.model = GenerationModel(partial)
        self.absorbed = None
        self.commit_effects = 0

    @precondition(lambda self: self.is_("RECEIVED"))
    @rule(prompt=st.integers(1, 6), budget=st.sampled_from([1, 2, 3, 4]))
    def prepared(self, prompt, budget):
        m = self.model
        m.state, m.prompt, m.budget = "PREPARED", prompt, budget
        self.send(g.Prepared(prompt, budget), [g.AskGate()])

    @precondition(lambda self: self.is_("PREPARED"))
    @rule(epoch=st.integers(0, 3), version=VERSIONS, defer=RARELY)
    def admitted(self, epoch, version, defer):
        request = self.model.start(epoch, version, kept=0)
        self.model.state = "STREAMING"
        self.send(g.GateAdmitted(epoch, version), [request])
        if not defer:
            self.upstream_started()

    @precondition(lambda self: self.is_("PREPARED"))
    @rule()
    def parked(self):
        self.model.state = "WAITING"
        self.send(g.GateWait(0), [])

    @precondition(lambda self: self.is_("WAITING", "INTERRUPTED"))
    @rule(epoch=st.integers(0, 3), version=VERSIONS, defer=RARELY)
    def resumed(self, epoch, version, defer):
        m = self.model
        if m.state == "WAITING" or not (m.partial and m.tokens):
            # A new generation starts; an interrupted one without partial rollout (or with nothing) restarts.
            discard = [g.DiscardPartial(m.tokens)] if m.state == "INTERRUPTED" else []
            m.tokens = 0
            m.state = "STREAMING"
            self.send(g.Resumed(epoch, version), discard + [m.start(epoch, version, kept=0)])
        elif m.tokens == m.budget:
            # Nothing left to generate: finish as length without an upstream call.
            m.state, m.finish, m.epoch, m.version = "PARSING", g.FinishKind.LENGTH, epoch, version
            self.send(g.Resumed(epoch, version), [g.ReleaseGate(), g.ParseOutput(g.FinishKind.LENGTH, m.tokens)])
            return
        else:
            request = m.start(epoch, version, kept=m.tokens)
            m.state = "CONTINUING"
            self.send(g.Resumed(epoch, version), [request])
        if not defer:
            self.upstream_started()

    @precondition(lambda self: self.is_(*UPSTREAM) and self.model.rid is None)
    @rule()
    def upstream_started(self) -> None:
        m = self.model
        m.rid = f"r{m.requests}"
        self.send(g.UpstreamStarted(m.rid), [g.AbortUpstream(m.rid, for_pause=True)] if m.state == "ABORTING" else [])

    @precondition(lambda self: self.is_(*UPSTREAM) and self.model.rid is not None
                  and self.model.tokens < self.model.budget)
    @rule(version=VERSIONS, count=st.integers(1, 3))
    def token(self, version, count):
        """The tokens of one upstream read (several when they arrived together), within the budget."""
        m = self.model
        count = min(count, m.budget - m.tokens)
        stamp = m.version if version is None else version
        if m.request_tokens and stamp != m.request_version:
            # Another version within one request: fail rather than mix.
            message = f"weight version changed from {m.request_version} to {stamp} within one upstream request"
            error = g.RespondError(502, "weight_version_changed", message)
            self.end("FAILED", g.TokensReceived(m.rid, version, read(count)), [error])
            return
        index = m.tokens
        m.tokens, m.request_tokens, m.request_version = m.tokens + count, m.request_tokens + count, stamp
        self.send(g.TokensReceived(m.rid, version, read(count)), [g.AcceptTokens(index, stamp, read(count))])

    @precondition(lambda self: self.is_(*UPSTREAM) and self.model.rid is not None
                  and self.model.tokens < self.model.budget)
    @rule(version=VERSIONS, extra=st.integers(1, 3))
    def read_over_budget(self, version, extra):
        """A read carrying more than the remaining budget is refused whole: nothing of it is recorded."""
        m = self.model
        self.send_illegal(g.TokensReceived(m.rid, version, read(m.budget - m.tokens + extra)))

    @precondition(lambda self: self.is_("STREAMING", "CONTINUING"))
    @rule()
    def abort_requested(self):
        m = self.model
        m.state = "ABORTING"
        self.send(g.AbortRequested(), [g.AbortUpstream(m.rid, for_pause=True)])

    @precondition(lambda self: self.is_("ABORTING"))
    @rule()
    def abort_acknowledged(self):
        m = self.model
        m.state = "INTERRUPTED"
        self.send(g.UpstreamAborted(m.request_tokens), [g.AcknowledgeAbortToGate()])

    @precondition(lambda self: self.is_(*UPSTREAM))
    @rule(finish=st.sampled_from(g.FinishKind))
    def upstream_finished(self, finish):
        m = self.model
        m.state, m.finish = "PARSING", finish
        self.send(g.UpstreamFinished(finish, m.request_tokens), [g.ReleaseGate(), g.ParseOutput(finish, m.tokens)])

    @precondition(lambda self: self.is_("PARSING"))
    @rule()
    def parse_done(self):
        m = self.model
        m.state = "COMMITTING"
        self.send(g.ParseDone(), [g.Commit(m.tokens, m.requests)])

    @precondition(lambda self: self.is_("COMMITTING"))
    @rule(accepted=st.booleans())
    def commit_answered(self, accepted):
        m = self.model
        if accepted:
            m.state, m.commits = "RESPONDED", m.commits + 1
            self.send(g.CommitAccepted(), [g.Respond(m.finish, m.tokens)])
        else:
            m.state = "REJECTED"
            self.send(g.CommitRejected("finalized"), [g.RespondError(400, "session_finalized", "finalized")])

    # ---- the unusual events: one rule picks among those that apply ---------------------------------------------

    @precondition(lambda self: self.model is not None)
    @rule(data=st.data())
    def unusual(self, data):
        # Hypothesis leans towards drawing zeros (the first choice, the smallest number): the harmless choice comes
        # first, and a roll under 70 skips the rule, so that the lifecycle rules stay the usual ones.
        if data.draw(st.integers(0, 99), label="roll") < 70:
            return
        m = self.model
        choices = {
            "illegal event raises": self.illegal_event_raises,
            "illegal event fails closed": self.illegal_event_fails_closed,
        }
        if m.state != "PREPARED":
            choices["client disconnects"] = self.client_disconnects
        if m.state == "RECEIVED":
            choices["prepare fails"] = lambda data: self.end(
                "FAILED", g.PrepareFailed(400, "max_steps_exceeded"), [g.RespondError(400, "max_steps_exceeded", "")])
        if m.state in UPSTREAM or m.state == "PARSING":
            choices["upstream fails"] = lambda data: self.end(
                "FAILED", g.UpstreamFailed(503, "upstream_unavailable", "x"),
                [g.RespondError(503, "upstream_unavailable", "x")])
        if m.state in ("WAITING", "INTERRUPTED"):
            error = g.RespondError(503, "paused_timeout", "generation is paused for a weight update; retry later")
            choices["pause wait times out"] = lambda data: self.end("FAILED", g.PauseWaitTimedOut(), [error])
        if m.state in ("STREAMING", "CONTINUING"):
            message = "the upstream request was aborted outside the proxy's pause"
            choices["unrequested abort"] = lambda data: self.end(
                "FAILED", g.UpstreamAborted(m.request_tokens), [g.RespondError(502, "upstream_aborted", message)])
        if m.state == "ABORTING":
            choices["abort again"] = lambda data: self.send(g.AbortRequested(), [])
        if m.state in UPSTREAM:
            choices["token of another request"] = lambda data: self.send(
                g.TokensReceived("r0", "v0", read(1)), [g.DropTokens("r0", "not from the current upstream request")])
            choices["request end with a wrong count"] = lambda data: self.send_illegal(
                g.UpstreamFinished(g.FinishKind.STOP, m.request_tokens + 1))
            if m.rid is not None and m.tokens == m.budget:
                choices["token over the budget"] = lambda data: self.send_illegal(
                    g.TokensReceived(m.rid, m.request_version, read(1)))
        elif m.requests:
            choices["straggler"] = self.straggler
        name = data.draw(st.sampled_from(list(choices)), label="unusual")
        choices[name](data)

    def client_disconnects(self, data):
        if self.model.state in ENDED or self.model.state == "COMMITTING":
            # Too late to matter: the commit (if any) stands; nothing is held.
            self.send(g.ClientDisconnected(), [])
        else:
            self.end("CANCELLED", g.ClientDisconnected(), [g.AnswerNobody()])

    def straggler(self, data):
        # A token of an ended request, when no request is open: dropped, never recorded.
        rid = data.draw(st.sampled_from([f"r{k}" for k in range(1, self.model.requests + 1)]), label="rid")
        self.send(g.TokensReceived(rid, "v0", read(1)), [g.DropTokens(rid, "no upstream request is open")])

    def illegal_event_raises(self, data):
        event = data.draw(st.sampled_from([e for e in ANY_EVENT if type(e) not in ACCEPTS[self.model.state]]))
        self.send_illegal(event)

    def illegal_event_fails_closed(self, data):
        m = self.model
        event = data.draw(st.sampled_from([e for e in ANY_EVENT if type(e) not in ACCEPTS[m.state]]))
        effects = self.gen.send_fail_closed(event)
        if m.state in ENDED:
            assert [type(e) for e in effects] == [g.ReportFault]
            return
        held = m.held()
        m.state = "FAILED"
        assert effects[:-1] == held + [g.RespondError(500, "internal_error", "internal error")]
        assert isinstance(effects[-1], g.ReportFault)

    # ---- invariants ------------------------------------------------------------------------------------------

    @invariant()
    def machine_matches_the_model(self):
        if self.gen is None:
            return
        m = self.model
        stats = self.gen.statistics()
        assert stats.state == m.state
        assert (stats.budget, stats.tokens, stats.requests) == (m.budget, m.tokens, m.requests)
        assert stats.committed == (m.commits == 1)

    @invariant()
    def budget_never_negative(self):
        if self.gen is not None:
            stats = self.gen.statistics()
            assert 0 <= stats.tokens <= stats.budget

    @invariant()
    def tokens_only_while_a_request_is_open(self):
        # Streaming, continuing, or aborting before the acknowledgement; never interrupted, waiting or later.
        assert self.accepted_in <= UPSTREAM

    @invariant()
    def at_most_one_commit(self):
        assert self.commit_effects <= 1
        assert self.model is None or self.model.commits <= 1
        if self.model is not None and self.model.state in ("FAILED", "CANCELLED", "REJECTED"):
            assert not self.gen.statistics().committed

    @invariant()
    def absorbing_states_stay_put(self):
        if self.gen is None:
            return
        state = self.gen.statistics().state
        if self.absorbed is not None:
            assert state == self.absorbed
        elif state in ENDED:
            self.absorbed = state


TestGenerationVersusModel = GenerationVersusModel.TestCase
TestGenerationVersusModel.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)
