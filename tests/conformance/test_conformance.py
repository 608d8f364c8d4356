"""Conformance: the checked world can do whatever the running controllers did, machine by machine, step by step.

Each example runs the real stack (the interleaving tests' scenario: the embedded engine on ``127.0.0.1:0``, the
gate, session registry and generation controllers, trio's mock clock) on hypothesis-chosen operations within the
world's bounds (``scenarios.py``), with every machine observed (``statemachines.core.OBSERVER``), then searches the
full composition for a path that feeds every machine the same events with the same outcomes (``inclusion.py``).

It can fail: a rule broken on either side is reported as a mismatch (the planted tests at the end).
"""

from __future__ import annotations

import os
import types
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, event, given, settings
from hypothesis.internal.entropy import deterministic_PRNG
from hypothesis import strategies as st

from proxy.controllers import generation_driver
from statemachines import generation as gen_sm
from statemachines import generation_machine as gen_machine
from statemachines import session as session_sm
from statemachines.checking.full_world import gate_session_generations
from statemachines.core import Branch, Goto, on
from tests.conformance.inclusion import Inclusion, check_inclusion
from tests.conformance.scenarios import Run, record_run, runs
from tests.conformance.traces import GENERATION, MachineTrace, Observed
from tests.conformance.world_adapter import WorldDriver, conformance_world
from tests.interleavings.scenario import Chat, Disconnect, Finalize, Pause, Resume, Sleep

# 25 examples each in CI (a real run and a search each: seconds); DRESSAGE_CONFORMANCE_EXAMPLES=400 for a soak.
EXAMPLES = int(os.environ.get("DRESSAGE_CONFORMANCE_EXAMPLES", "25"))
# Task orders the regression run is tried under (a few of them cancel its third chat in the middle of its prepare).
SCHEDULES = 16
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def world_for(run: Run, traces: list[MachineTrace], **machines: type) -> WorldDriver:
    """The world sized for the run: one generation per generation the run fed, its budget, its pause calls."""
    generations = sum(trace.kind == GENERATION for trace in traces)
    return conformance_world(generations, budget=run.budget, pauses=run.pauses, partial_rollout=True, **machines)


def included(run: Run, traces: list[MachineTrace], **machines: type) -> Inclusion:
    return check_inclusion(traces, world_for(run, traces, **machines))


@SETTINGS
@given(run=runs(), workers=st.booleans(), seed=st.random_module())
async def test_the_world_can_do_what_the_controllers_did(qwen3_path: Path, autojump_clock, run, workers, seed):
    traces = await record_run(qwen3_path, run, workers=workers)
    found = included(run, traces)
    assert found.mismatch is None, f"{run}\n{found.mismatch.format()}"
    # What the world followed (``--hypothesis-show-statistics`` tallies it): the check is as good as its runs.
    for move in sorted({label.split(": ", 1)[-1].split(" (")[0] for label in found.path}):
        event(f"the world followed: {move}")


@SETTINGS
@given(yields=st.integers(0, 3), workers=st.booleans(), seed=st.random_module())
async def test_a_pause_before_a_driver_sent_its_request(qwen3_path: Path, autojump_clock, yields, workers, seed):
    # The pause comes once the first chat streams, a few scheduling points after the second chat was admitted: in
    # some task orders its driver has not sent its request yet (AbortRequested before UpstreamStarted), which the
    # world reaches only with its request starts in a move of their own (world_adapter.DEFERRED).
    run = Run(2, (Chat(0, stream=True, max_tokens=2, next_turn=False), Sleep(0.06),
                  Chat(0, stream=True, max_tokens=2, next_turn=False), *[Sleep(0.0)] * yields, Pause(1),
                  Resume(new_weights=True)))
    traces = await record_run(qwen3_path, run, workers=workers)
    found = included(run, traces)
    assert found.mismatch is None, f"{run}\n{found.mismatch.format()}"


@pytest.fixture
def thread_waiting_clock() -> trio.testing.MockClock:
    """Trio's mock clock, jumping only after 20 ms of real time with every task blocked: a worker thread's encode
    (about a millisecond) ends before the clock moves, where the autojump clock would fire the run's timeouts."""
    return trio.testing.MockClock(autojump_threshold=0.02)


async def test_a_client_gone_while_its_prepare_was_encoding(qwen3_path: Path, thread_waiting_clock):
    # Found by the property above in CI: the third chat is admitted by the session and cancelled in its encode (the
    # registry rolls it back: admitted, then dropped, its machine cancelled in RECEIVED), while the second chat is
    # admitted in between. The world did prepare as one move and could not follow (``prepared_in_a_later_step``).
    # The encodes run in worker threads, as a long prompt's do: a short one inline has no checkpoint between the
    # admission and the end of the prepare since a free session lock is taken without one (issue 21 item 2).
    run = Run(1, (Chat(0, stream=False, max_tokens=1, next_turn=False), Sleep(0.0), Pause(1),
                  Chat(0, stream=False, max_tokens=1, next_turn=False),
                  Chat(0, stream=False, max_tokens=1, next_turn=False),
                  Resume(new_weights=False), Resume(new_weights=False), Disconnect(2)))
    seen = []
    for seed in range(SCHEDULES):
        # Trio's task order comes from a Random it registers with hypothesis: seeded as hypothesis seeds it.
        with deterministic_PRNG(seed):
            traces = await record_run(qwen3_path, run, workers=False, encode_off_loop=True)
        found = included(run, traces)
        assert found.mismatch is None, f"schedule {seed}: {run}\n{found.mismatch.format()}"
        if any(t.kind == GENERATION and [s.event for s in t.steps] == ["ClientDisconnected"] for t in traces) and any(
                s.event == "GenerationDropped" for t in traces if t.kind == "session" for s in t.steps):
            seen.append(traces)
    assert seen, f"no schedule of {SCHEDULES} cancels a chat in its prepare after admission: pick another run"
    # Without the split the world cannot follow them.
    assert all(check_inclusion(traces, conformance_world(
        3, budget=1, pauses=1, partial_rollout=True, prepared_in_a_later_step=False)).mismatch for traces in seen)


def test_the_world_with_the_controllers_timing_keeps_its_invariants():
    # The world the runs are compared with has the controller's timing (world_adapter.DEFERRED); the explorer checks
    # that this modelling choice keeps every invariant, the deadlock check and pause liveness (the CI bounds run
    # without it), and that it adds states: starts and drops that wait for the driver are interleavings of their own.
    system = gate_session_generations(2, rid_in_a_later_step=True, drop_in_a_later_step=True,
                                      prepared_in_a_later_step=True, length_may_end_turn=True)
    timed = system.explore()
    assert timed.violation is None, timed.violation.format(system.describe)
    assert timed.states > gate_session_generations(2).explore().states


async def test_a_reply_that_hits_its_length_on_the_end_of_turn(qwen3_path: Path, autojump_clock):
    # The engine's reply to the first chat is 23 tokens, the end-of-turn token last: SGLang reports ``length``, the
    # session keeps the chain open (the step ends its turn) and the next turn extends it; the world follows only with
    # ``length_may_end_turn`` (found by a soak: every length step closed its chain in the world). One chat before the
    # next turn, so the conversation (and the engine's reply, a function of the prompt) does not depend on which of
    # two concurrent chats trio's scheduler lets commit last.
    run = Run(23, (Chat(0, stream=False, max_tokens=23, next_turn=False), Sleep(0.0),
                   Chat(0, stream=False, max_tokens=23, next_turn=True)))
    traces = await record_run(qwen3_path, run, workers=True)
    found = included(run, traces)
    assert found.mismatch is None, found.mismatch.format()
    assert any("the last token ended the turn" in label for label in found.path)


# ---- It can fail: a rule broken on either side -------------------------------------------------------------------

# Two chats (one continuing the other), a pause while the second streams, a resume, a finalize: every machine kind
# is fed, a pause interrupts a generation.
PLANTED = Run(2, (
    Chat(0, stream=True, max_tokens=2, next_turn=False), Sleep(0.5),
    Chat(0, stream=False, max_tokens=2, next_turn=True), Pause(1), Resume(new_weights=True, update_seconds=0.2),
    Sleep(0.5), Finalize(0),
))


# The same without the pause: for the planted rules that leak the gate slot (a pause would wait for it for ever).
UNPAUSED = Run(2, tuple(op for op in PLANTED.ops if not isinstance(op, (Pause, Resume))))


async def test_the_correct_run_is_included(qwen3_path: Path, autojump_clock):
    # The planted tests below differ from this one only by their planted rule.
    traces = await record_run(qwen3_path, PLANTED, workers=True)
    found = included(PLANTED, traces)
    assert found.mismatch is None, found.mismatch.format()
    assert any("pause" in label for label in found.path)


async def test_a_controller_feeding_the_wrong_answer_to_the_gates_admit_is_found(
        qwen3_path: Path, autojump_clock, monkeypatch):
    # The generation controller answers the gate's Admit with Resumed (same fields) instead of GateAdmitted: the
    # machine refuses it in PREPARED and fails closed; the run goes on (a 500), the world never does this.
    # Only the driver's view of the machine's vocabulary changes (the machines and the world keep the real one).
    vocabulary = types.SimpleNamespace(**{**vars(gen_sm), "GateAdmitted": gen_sm.Resumed})
    monkeypatch.setattr(generation_driver, "gen", vocabulary)
    traces = await record_run(qwen3_path, UNPAUSED, workers=True)
    monkeypatch.undo()
    found = included(UNPAUSED, traces)
    assert found.mismatch is not None
    report = found.mismatch.format()
    assert "Resumed" in report and "REFUSED" in report, report


def _forgets_the_gate(state, gen, event):
    """A broken rule: a request that ends by itself parses, but never gives its gate slot back."""
    done = attrs.evolve(gen, finish=event.finish)
    return Goto(gen_sm.State.PARSING, done, [gen_sm.ParseOutput(event.finish, gen.tokens)])


async def test_a_running_machine_with_a_broken_rule_is_found(qwen3_path: Path, autojump_clock, monkeypatch):
    # Only the running side's GenerationMachine has the broken row (UpstreamFinished in STREAMING without
    # ReleaseGate); the world keeps the real table. No pause here: the leaked slot would hold it for ever.
    table = gen_machine.TABLE.overriding(on(gen_sm.State.STREAMING, gen_sm.UpstreamFinished, _forgets_the_gate,
                                       Branch(gen_sm.State.PARSING, [gen_sm.ParseOutput])))
    monkeypatch.setattr(gen_machine.GenerationMachine, "table", table)
    traces = await record_run(qwen3_path, UNPAUSED, workers=True)
    monkeypatch.undo()
    found = included(UNPAUSED, traces)
    assert found.mismatch is not None
    assert "UpstreamFinished -> PARSING" in found.mismatch.format()


def _rejects(state, session, event):
    """A broken rule: an active session rejects every commit."""
    return Goto(state, attrs.evolve(session, in_flight=session.in_flight - 1), [session_sm.RejectCommit("planted")])


@attrs.define(eq=False)
class _RejectingSession(session_sm.SessionMachine):
    table = session_sm.TABLE.overriding(on(session_sm.State.ACTIVE, session_sm.CommitRequested, _rejects,
                                           Branch(session_sm.State.ACTIVE, [session_sm.RejectCommit])))


async def test_a_world_with_a_broken_rule_is_found(qwen3_path: Path, autojump_clock):
    # The run is correct; the world's session machine rejects every commit.
    traces = await record_run(qwen3_path, PLANTED, workers=True)
    found = included(PLANTED, traces, session=_RejectingSession)
    assert found.mismatch is not None
    report = found.mismatch.format()
    assert "CommitRejected -> REJECTED" in report and "the run fed CommitAccepted -> RESPONDED" in report, report


@pytest.mark.parametrize("deferred", [True, False])
def test_the_search_reports_where_it_stopped(deferred):
    # Pure: a run trace the world cannot follow (a generation fed GateAdmitted before it was Prepared).
    bogus = MachineTrace(GENERATION, "generation#1", (Observed("GateAdmitted", "STREAMING", (), ("StartUpstream",)),),
                         (0,))
    found = check_inclusion([bogus], conformance_world(1, budget=1, pauses=0, partial_rollout=True, deferred=deferred))
    assert found.mismatch is not None
    report = found.mismatch.format()
    assert "generation#1 [unbound] step 1/1" in report and "prepare (new conversation)" in report, report
