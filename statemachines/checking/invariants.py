"""Every invariant name of the worlds, defined once here, and the invariants more than one world checks.

Architecture.md's numbers are in brackets. A name is either a predicate on every reachable world (``Invariant``), a
fact checked in the step where it happens and recorded in the world's ``broken`` field (``not_broken``), or a
liveness property (``Progress``) checked on the complete graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from statemachines import generation as gen_sm
from statemachines import rollout_gate as gate_sm
from statemachines.checking.explorer import Invariant, Progress
from statemachines.checking.records import GateRecord, Trainer

# Invariant names (architecture.md numbers in brackets); the per-step ones are recorded in World.broken.
PAUSED = "paused_means_no_generation_streaming"  # [1]
PAUSE_RETURNS = "pause_returns_after_every_stream_is_interrupted_or_finished"  # [2]
NOT_WHILE_PAUSING = "no_stream_admitted_while_pausing"  # [2]
NO_TOKEN_WHILE_PAUSED = "no_token_accepted_between_pause_acknowledgement_and_resume"  # [2]
NO_LATE_TOKEN = "no_token_accepted_after_its_abort_was_acknowledged"  # [2]
STAMPED = "every_token_stamped_with_the_version_that_generated_it"  # [3]
UNMIXED = "no_upstream_request_mixes_versions"  # [3]
SINGLE_VERSION = "without_partial_rollout_every_step_is_single_version"  # [3]
AT_MOST_ONCE = "each_generation_commits_at_most_once"  # [4]
NOTHING_IF_ENDED = "failed_cancelled_or_rejected_generations_commit_nothing"  # [4]
SUCCESS_AFTER_COMMIT = "success_answered_only_after_a_commit"  # [4]
NOT_AFTER_FINALIZE = "no_commit_after_finalize"  # [5]
BUDGET = "budgets_never_go_negative"  # [7]
REMAINING = "continuation_never_requests_more_than_the_remaining_budget"  # [7]
GATE_COUNTS = "gate_counts_match_generations"
# A liveness property (explorer.Progress), checked once the search is complete.
PAUSE_ACKNOWLEDGED = "every_pause_is_acknowledged_once_the_upstream_has_answered_the_aborts"  # [2]
ACCEPTS = "machines_accept_every_event"
ABORT_SENT = "every_open_request_of_an_aborting_generation_is_being_cut"  # [2]
# The session world's own (richer conversation trees, refreshes, abort, failed exports).
NOTHING_IF_FAILED = "failed_or_rejected_generations_commit_nothing"  # [4]
NOT_AFTER_ACTIVE = "no_commit_after_session_left_active"  # [5]
NO_COMMIT_LOST = "no_accepted_commit_lost"  # [4]
NOT_LOST_BY_FAILED_EXPORT = "no_committed_step_lost_by_a_failed_export"  # [6]
# The session side's, shared by the session world and the full world.
LATE_CHANGES_NOTHING = "late_generations_change_nothing"  # [5]
OWNED_ONCE = "every_committed_step_owned_by_exactly_one_chain"  # [6]
PATHS = "chains_are_token_paths"  # [6]
EXPORTED_ONCE = "every_committed_step_in_exactly_one_exported_segment"  # [6]
SESSION_COUNTS = "session_counts_match_generations"
# The process lifecycle's (the gate world with ServiceLifecycle): graceful shutdown, issue 15.
STOPPED_HOLDS_NOTHING = "after_stopped_no_generation_is_streaming_or_waiting"
NO_ADMISSION_AFTER_STOP = "no_admission_after_draining_began"
LIFECYCLE_COUNTS = "lifecycle_counts_match_generations"
# A liveness property (explorer.Progress): a stop completes without the trainer's or the clients' help.
STOP_COMPLETES = "every_stop_reaches_stopped_without_the_trainer_or_clients"

G = gen_sm.State
# Machine states that hold an upstream request (the gate counts them in flight), and those the gate counts waiting.
HOLDING = (G.STREAMING, G.CONTINUING, G.ABORTING)
WAITING = (G.WAITING, G.INTERRUPTED)


def _holding(world: Any) -> bool:
    """Does any generation stream, abort, or hold an open upstream request?"""
    return any(g.machine.state in HOLDING or g.upstream is not None for g in world.gens)


def _gate_counts_match(world: Any) -> bool:
    """The gate's counts, the gate controller's records and the machines' states agree."""
    gate = world.gate.data
    records = [g.gate for g in world.gens]
    states = [g.machine.state for g in world.gens]
    return gate.in_flight == records.count(GateRecord.IN_FLIGHT) == sum(s in HOLDING for s in states) and (
        gate.waiting == records.count(GateRecord.WAITING) == sum(s in WAITING for s in states))


def _aborts_sent(world: Any) -> bool:
    """A generation that is aborting has asked the upstream to cut the request it holds open (its abort, if it came
    before the request's rid was known, was remembered and sent once the rid was)."""
    return not any(g.machine.state is G.ABORTING and g.upstream is not None and not g.upstream.aborting
                   for g in world.gens)


def not_broken(name: str) -> Invariant:
    """An invariant checked when its fact happens, recorded in ``World.broken``."""
    return Invariant(name, lambda w: w.broken is None or w.broken[0] != name)


def generation_invariants(config: Any, session: Sequence[Invariant], counts: Sequence[Invariant] = ()) -> tuple:
    """Every invariant, in the order they are checked (the first broken one is reported): the generations' and the
    gate's, with the session side's ``session`` ones (invariants 5-6) before the budgets and its ``counts`` last."""
    ended = (G.FAILED, G.CANCELLED, G.REJECTED)
    paused = (not_broken(NO_TOKEN_WHILE_PAUSED),) if config.tokens_checked_against_pause else ()
    return (
        not_broken(ACCEPTS),
        Invariant(PAUSED, lambda w: w.gate.state is not gate_sm.State.PAUSED or not _holding(w)),
        Invariant(PAUSE_RETURNS, lambda w: w.trainer is not Trainer.PAUSE_RETURNED or not _holding(w)),
        Invariant(NOT_WHILE_PAUSING, lambda w: w.gate.state is gate_sm.State.RUNNING or not any(
            g.machine.state in (G.STREAMING, G.CONTINUING) for g in w.gens)),
        Invariant(ABORT_SENT, _aborts_sent),
        *paused,
        not_broken(NO_LATE_TOKEN),
        not_broken(STAMPED),
        not_broken(UNMIXED),
        not_broken(SINGLE_VERSION),
        Invariant(AT_MOST_ONCE, lambda w: all(len(g.commits) <= 1 for g in w.gens)),
        Invariant(NOTHING_IF_ENDED, lambda w: not any(g.machine.state in ended and g.commits for g in w.gens)),
        not_broken(SUCCESS_AFTER_COMMIT),
        *session,
        Invariant(BUDGET, lambda w: (w.broken is None or w.broken[0] != BUDGET) and all(
            0 <= len(g.stamps) <= g.machine.data.budget and g.machine.data.remaining >= 0 for g in w.gens)),
        not_broken(REMAINING),
        Invariant(GATE_COUNTS, _gate_counts_match),
        *counts,
    )


def _not_a_client_move(label: str) -> bool:
    """Moves of the proxy, the upstream and the trainer: a client may never read again, nor be seen to leave."""
    return ": client " not in label


def pause_progress() -> Progress:
    """Every pause call returns using only the proxy's, the upstream's and the trainer's moves: no client is needed
    (one that stopped reading, or left without the proxy noticing, must not hold a pause)."""
    return Progress(
        PAUSE_ACKNOWLEDGED, pending=lambda w: w.trainer is Trainer.PAUSE_PENDING,
        done=lambda w: w.trainer is not Trainer.PAUSE_PENDING, relies_on=_not_a_client_move,
    )


def chains_are_paths(world: Any) -> bool:
    """Each chain's steps extend one another, starting from the chain's base (``world.chains`` of ``ChainRecord``,
    ``world.steps[k - 1].base`` the step that step ``k`` extends)."""
    for record in world.chains:
        previous = record.base
        for step_id in record.steps:
            if world.steps[step_id - 1].base != previous:
                return False
            previous = step_id
    return True
