"""Rebuild a live session from its step journal (``step_journal.py``): the trie, the chains, the checkpoints.

The replay runs the same pure rules the live path runs, never a copy of them: for every committed step,
:meth:`Session.prepare` with the recorded request, :meth:`Session.restart_segment` when its incremental encode
failed, :meth:`Session.set_context` with the recorded context ids (nothing is rendered again: TITO continues
after a restart with exactly the tokens the model saw) and :meth:`Session.commit` with what it generated.

**Order.** The live session interleaves the critical sections of concurrent generations: a sibling prepared before
another committed sees a different trie and different chains than one prepared after it (its boundary reason, its
base checkpoint, whether it extends or forks). Each record carries the session's counters before each of its
critical sections (:class:`~proxy.trajectory.session.Moment`), so the replay runs every prepare, restart and commit
of the journal in the order they ran live, and :meth:`Session.rewind` makes each hand out the generation and chain
ids it got live: generations that never committed (dropped, failed, in flight at a crash) are not in the journal,
and the gaps they left in the ids stay gaps. What such a generation did to the session while it lived cannot change
a committed step's placement: the chains decide on their step counts and close reasons, which only commits change,
and the trie's checkpoints come only from commits. One thing it can change: the boundary reason of a step with no
checkpoint on its path (``new_conversation``, ``resample`` or ``history_rewritten``: how much of its prompt the trie
held, pending nodes of a failed generation included), so the record keeps the reason the live prepare gave and the
replay restores it (:meth:`Session.restore_boundary_reason`, which refuses any other difference). The replay checks each step's generation id, step id and chain
id against the record and raises :class:`ReplayMismatchError` if one differs (a configuration that changes the
rules, such as ``--ignore-cch-for-prefix-hash``, changed between the run and the restart).

What a replay does not rebuild: generations in flight at the crash (they never committed, the agent's request
failed with the connection). What it hands back beside the session (:func:`replay_journal`): the steps whose
request carried an ``Idempotency-Key`` (:class:`KeyedStep`, the newest step of each key), from which the registry
restores the session's key records, so a repeat after the restart is answered from its step
(``proxy/controllers/idempotency.py``; ``docs/storage.md``, "Recovery").
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from proxy.trajectory.message_keys import message_key, reasoning_variant
from proxy.trajectory.session import BranchHandle, Session
from proxy.trajectory.session_config import SessionConfig
from proxy.trajectory.step_journal import StepRecord
from proxy.trajectory.tokens import WorkingTokens, expand_runs


class ReplayMismatchError(RuntimeError):
    """A replayed step did not land where the live one did (see the module docstring)."""


# The three critical sections of a generation, in their order when two share a counter (they never do live).
_PREPARE, _RESTART, _COMMIT = 0, 1, 2


@attrs.frozen(eq=False)
class KeyedStep:
    """A replayed step whose request carried an Idempotency-Key: what its answer is rendered from, and nothing
    else of its record (not its request nor its routed-expert data: the session keeps these for as long as it
    lives)."""

    key: str
    fingerprint: str
    step_id: int
    assistant_message: Mapping[str, Any]
    finish_reason: str
    generated_ids: array
    # The chosen tokens' logprobs (None: absent or misaligned), their weight-version runs.
    logprobs: array | None
    version_runs: tuple[tuple[str | None, int], ...]
    # The prompt's tokens as the replay rebuilt them (the answer's usage and ``prompt_token_ids``).
    tokens: WorkingTokens

    @classmethod
    def of(cls, record: StepRecord, tokens: WorkingTokens) -> KeyedStep:
        assert record.request.idempotency is not None
        key, fingerprint = record.request.idempotency
        return cls(key, fingerprint, record.step_id, record.assistant_message, record.finish_reason,
                   record.generated_ids, record.logprobs, record.version_runs, tokens)


def replay_session(
    session_id: str, config: SessionConfig, end_of_turn_id: int | frozenset[int] | None, records: Iterable[StepRecord]
) -> Session:
    """A session holding exactly the committed steps of ``records`` (any order: they are sorted by their moments)."""
    return replay_journal(session_id, config, end_of_turn_id, records)[0]


def replay_journal(
    session_id: str, config: SessionConfig, end_of_turn_id: int | frozenset[int] | None, records: Iterable[StepRecord]
) -> tuple[Session, dict[str, KeyedStep]]:
    """:func:`replay_session`, and the newest committed step of each Idempotency-Key, by key (a key can name two
    steps when its first answer never reached the client and a repeat generated again: the newest is the one a
    repeat must get)."""
    session = Session(session_id, config, end_of_turn_id)
    events: list[tuple[int, int, StepRecord]] = []
    for record in records:
        events.append((record.prepared.events, _PREPARE, record))
        if record.restarted is not None:
            events.append((record.restarted.events, _RESTART, record))
        events.append((record.committed.events, _COMMIT, record))
    events.sort(key=lambda event: (event[0], event[1]))
    handles: dict[int, BranchHandle] = {}
    # Each step's whole prompt, and its record: a later record's prompt starts with an earlier step's prompt and
    # answer (its prefix step, committed before it was prepared), then its own messages.
    prompts: dict[int, list[Any]] = {}
    by_step = {record.step_id: record for _, _, record in events}
    contexts: dict[int, WorkingTokens] = {}
    keyed: dict[str, KeyedStep] = {}
    for _, kind, record in events:
        if kind == _PREPARE:
            prompts[record.step_id] = _prompt(record, prompts, by_step)
            handles[record.step_id], context = _prepare(session, record, prompts[record.step_id])
            if context is not None:
                contexts[record.step_id] = context
        elif kind == _RESTART:
            contexts[record.step_id] = _restart(session, handles[record.step_id], record, prompts[record.step_id])
        else:
            _commit(session, handles.pop(record.step_id), record)
            tokens = contexts.pop(record.step_id)
            if record.request.idempotency is not None:
                step = KeyedStep.of(record, tokens)
                keyed[step.key] = step
    return session, keyed


def _prompt(record: StepRecord, prompts: dict[int, list[Any]], by_step: dict[int, StepRecord]) -> list[Any]:
    """The step's whole prompt: its prefix step's prompt and answer, then its own messages."""
    request = record.request
    if request.prefix_step is None:
        return list(request.messages)
    base = by_step.get(request.prefix_step)
    if base is None or request.prefix_step not in prompts:
        raise ReplayMismatchError(f"step {record.step_id}: its prefix step {request.prefix_step} is not in the journal "
                                  "before it")
    prefix = [*prompts[request.prefix_step], base.assistant_message]
    if len(prefix) != request.prefix_depth:
        raise ReplayMismatchError(f"step {record.step_id}: prefix of {len(prefix)} messages, recorded "
                                  f"{request.prefix_depth}")
    return [*prefix, *request.messages]


def _prepare(session: Session, record: StepRecord, messages: list[Any]) -> tuple[BranchHandle, WorkingTokens | None]:
    request = record.request
    session.rewind(record.prepared)
    handle, _ = session.prepare(
        messages, tools=request.tools, chat_template_kwargs=request.chat_template_kwargs,
        instance_id=request.instance_id, turn_id=request.turn_id,
    )
    if handle.generation_id != record.generation_id:
        raise ReplayMismatchError(f"step {record.step_id}: generation {handle.generation_id}, "
                                  f"recorded {record.generation_id}")
    if record.restarted is None:
        session.restore_boundary_reason(handle, record.boundary_reason)
        return handle, _set_context(session, handle, record)
    return handle, None


def _restart(session: Session, handle: BranchHandle, record: StepRecord, messages: list[Any]) -> WorkingTokens:
    session.rewind(record.restarted)
    session.restart_segment(handle, record.tito_detail or "", messages)
    return _set_context(session, handle, record)


def _set_context(session: Session, handle: BranchHandle, record: StepRecord) -> WorkingTokens:
    mask = list(record.context_mask) if record.context_mask is not None else None
    return session.set_context(handle, record.context_ids, mask)


def _commit(session: Session, handle: BranchHandle, record: StepRecord) -> None:
    session.rewind(record.committed)
    logprobs = record.logprobs.tolist() if record.logprobs is not None else None
    span = Session.build_span(handle, record.generated_ids, logprobs, expand_runs(record.version_runs),
                              record.routed_experts)
    answer = record.assistant_message
    # Keyed as the live commit keyed it (under the session's --ignore-cch-for-prefix-hash).
    key = message_key(answer, ignore_cch=session.config.ignore_cch_for_prefix_hash)
    result = session.commit(
        handle, span, finish_reason=record.finish_reason, assistant_message=answer, key=key,
        variant=reasoning_variant(answer), logprobs_invalid=record.logprobs_invalid,
        version_stamp=record.version_stamp,
    )
    if (result.step_id, result.chain_id) != (record.step_id, record.chain_id):
        raise ReplayMismatchError(f"step {record.step_id} of chain {record.chain_id} replayed as step "
                                  f"{result.step_id} of chain {result.chain_id}")


__all__ = ["KeyedStep", "ReplayMismatchError", "replay_journal", "replay_session"]
