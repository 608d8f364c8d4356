"""A restart: a new registry over the same store continues every session the old one left (issue 16 item 3).

The store object outlives the first registry exactly as a SQLite file outlives a killed process; the second
registry has never seen the sessions. Each test fails on a registry that does not journal or load (main before
issue 16): the new registry would start the session over, or accept steps of a finalized one.
"""

from __future__ import annotations

import orjson
import pytest
import trio
import trio.testing

from proxy.api.error_mapping import api_error_for
from proxy.controllers.session_journal import StoreUnavailableError
from proxy.controllers.session_leases import LeaseGrant
from proxy.controllers.session_registry import SessionRegistry
from proxy.trajectory.encode_plan import EncodeKind
from proxy.trajectory.memory_store import InMemoryTrajectoryStore
from proxy.trajectory.session_config import SessionConfig
from proxy.trajectory.session_errors import SessionAbortedError, SessionFinalizedError
from proxy.trajectory.store import LeaseLostError

from tests.controllers.driving import answer_ids, logprobs_for, turn
from tests.controllers.fakes import FakeTokenizer
from tests.controllers.test_session_registry import A1, A2, A3, SYS, T1, U1, U2

U3 = {"role": "user", "content": "and 2 and 2?"}
A4 = {"role": "assistant", "content": "4."}


class DriftedTokenizer(FakeTokenizer):
    """A tokenizer whose full render differs from the one the session was recorded with (a template upgrade): a
    restarted session that rendered its history again would send other ids than it recorded."""

    def encode_full(self, messages, tools=None, chat_template_kwargs=None):
        return [7] + super().encode_full(messages, tools, chat_template_kwargs)


def registry(store, tokenizer=None, **kwargs) -> SessionRegistry:
    return SessionRegistry(tokenizer or FakeTokenizer(), store, SessionConfig(max_steps_per_session=None), **kwargs)


async def conversation(reg: SessionRegistry, session_id: str) -> list:
    """Two tool turns, a resample of the second and a third turn on it."""
    first = await turn(reg, session_id, [SYS, U1], A1)
    second = await turn(reg, session_id, [SYS, U1, A1, T1], A2)
    await turn(reg, session_id, [SYS, U1, A1, T1], A3, salt=1)
    return [first, second]


def dumped(segments) -> bytes:
    return orjson.dumps(segments)


async def test_a_restarted_registry_continues_the_session_with_the_recorded_ids_and_exports_as_uninterrupted():
    store, reference_store = InMemoryTrajectoryStore(), InMemoryTrajectoryStore()
    before, reference = registry(store), registry(reference_store)
    _, second = await conversation(before, "s")
    await conversation(reference, "s")

    # The restart: a registry that never saw "s", with a tokenizer whose full render differs.
    drifted = DriftedTokenizer()
    after = registry(store, drifted)
    prepared = await after.prepare("s", [SYS, U1, A1, T1, A2, U2])
    expected = await reference.prepare("s", [SYS, U1, A1, T1, A2, U2])
    assert prepared.encode is EncodeKind.INCREMENTAL and drifted.full_encodes == 0
    # The checkpoint's recorded ids, then the new fragment: nothing was rendered again.
    assert prepared.input_ids()[: len(second.checkpoint)] == list(second.checkpoint)
    assert prepared.input_ids() == expected.input_ids()
    assert prepared.generation_id == expected.generation_id
    for reg, step in ((after, prepared), (reference, expected)):
        ids = answer_ids(reg.tokenizer, A3)
        await reg.commit(step.handle, ids, logprobs_for(ids), ["v0"] * len(ids), None, "stop", A3)
    assert (await after.finalize("s")) == (await reference.finalize("s"))
    assert dumped(await after.read(session_id="s")) == dumped(await reference.read(session_id="s"))


async def test_finalized_and_aborted_sessions_stay_so_across_a_restart():
    store = InMemoryTrajectoryStore()
    before = registry(store)
    await conversation(before, "f")
    await conversation(before, "a")
    result = await before.finalize("f")
    assert await before.abort("a")
    with pytest.raises(SessionFinalizedError) as late_before:
        await before.prepare("f", [SYS, U1, A1, T1, A2, U2])

    after = registry(store)
    with pytest.raises(SessionFinalizedError) as late_after:
        await after.prepare("f", [SYS, U1, A1, T1, A2, U2])
    assert str(late_after.value) == str(late_before.value)
    assert await after.finalize("f") == result
    with pytest.raises(SessionFinalizedError):
        await after.prepare("a", [SYS, U1])
    with pytest.raises(SessionAbortedError):
        await after.finalize("a")
    assert not await after.abort("a")
    # The segments are still the store's, once.
    assert len(await after.read(session_id="f")) == result.segments


async def test_a_session_the_store_never_saw_starts_new_and_an_unknown_abort_creates_nothing():
    after = registry(InMemoryTrajectoryStore())
    assert not await after.abort("nobody") and after.debug_view("nobody") is None
    first = await turn(after, "new", [SYS, U1], A1)
    assert first.result.step_id == 1 and first.prepared.boundary_reason == "session_start"


class CountingStore(InMemoryTrajectoryStore):
    """Counts loads, and holds them at a gate so concurrent first uses meet."""

    def __init__(self) -> None:
        super().__init__()
        self.loads, self.gate = 0, trio.Event()

    async def load_session(self, session_id):
        self.loads += 1
        await self.gate.wait()
        return await super().load_session(session_id)


async def test_concurrent_first_uses_of_one_id_load_it_once():
    store = CountingStore()
    store.gate.set()
    await conversation(registry(store), "s")
    store.loads, store.gate = 0, trio.Event()
    after = registry(store)
    prepared = []

    async def prepare_one(messages):
        prepared.append(await after.prepare("s", messages))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(prepare_one, [SYS, U1, A1, T1, A2, U2])
        nursery.start_soon(prepare_one, [SYS, U1, A1, T1, A3, U3])
        await trio.testing.wait_all_tasks_blocked()
        store.gate.set()
    assert store.loads == 1
    assert all(step.encode is EncodeKind.INCREMENTAL for step in prepared)


class FailingJournalStore(InMemoryTrajectoryStore):
    """A store whose journal writes fail (a full disk) while ``failing`` is set."""

    failing = False

    async def append_step(self, session_id, step_id, record, *, fence=None):
        if self.failing:
            raise OSError(28, "No space left on device: /secret/path")
        await super().append_step(session_id, step_id, record, fence=fence)


async def test_a_failed_journal_write_answers_store_unavailable_keeps_the_step_and_the_next_commit_journals_it(
    caplog,
):
    store = FailingJournalStore()
    before = registry(store)
    await turn(before, "s", [SYS, U1], A1)
    store.failing = True
    with pytest.raises(StoreUnavailableError) as failed:
        await turn(before, "s", [SYS, U1, A1, T1], A2)
    answer = api_error_for(failed.value)
    assert (answer.status, answer.code) == (503, "store_unavailable")
    assert "/secret/path" not in caplog.text and "No space left" not in caplog.text
    assert any(getattr(r, "session_id", None) == "s" for r in caplog.records)
    # The step stays in memory ...
    assert before.debug_view("s").steps == 2
    store.failing = False
    # ... and the next commit journals it first: the restart sees both, in order.
    await turn(before, "s", [SYS, U1, A1, T1, A2, U2], A3)
    after = registry(store)
    prepared = await after.prepare("s", [SYS, U1, A1, T1, A2, U2, A3, U3])
    assert prepared.encode is EncodeKind.INCREMENTAL
    assert after.debug_view("s").steps == 3


class ClaimingLeases:
    """The lease contract over the store's claims, as the fleet's ``StoreLeases`` keeps it (no waiting, no
    renewal: enough for one owner taking a session from another whose lease ran out)."""

    def __init__(self, store, owner):
        self.store, self.owner, self.epochs = store, owner, {}

    async def acquire(self, session_id):
        claim = await self.store.claim_session(session_id, self.owner, 15.0)
        assert claim.granted
        changed = self.epochs.get(session_id, claim.epoch) != claim.epoch
        self.epochs[session_id] = claim.epoch
        return LeaseGrant(claim.epoch, changed)

    def generation_started(self, session_id):
        pass

    async def generation_ended(self, session_id):
        pass


async def test_a_commit_after_another_proxy_took_the_session_fails_with_lease_lost_and_drops_the_copy():
    now = [0.0]
    store = InMemoryTrajectoryStore(clock=lambda: now[0], shared=True)
    first = registry(store, leases=ClaimingLeases(store, "proxy-a"))
    second = registry(store, leases=ClaimingLeases(store, "proxy-b"))
    await turn(first, "s", [SYS, U1], A1)
    prepared = await first.prepare("s", [SYS, U1, A1, T1])
    now[0] += 60  # proxy-a's lease ran out: proxy-b takes the session and continues it from the store
    taken = await turn(second, "s", [SYS, U1, A1, T1], A2)
    assert taken.result.step_id == 2 and taken.prepared.encode is EncodeKind.INCREMENTAL
    ids = answer_ids(first.tokenizer, A3)
    with pytest.raises(LeaseLostError):
        await first.commit(prepared.handle, ids, None, None, None, "stop", A3)
    assert first.debug_view("s") is None


class GatedJournalStore(InMemoryTrajectoryStore):
    """A store whose journal writes wait at a gate while ``gate`` is set (a slow disk)."""

    gate: trio.Event | None = None

    async def append_step(self, session_id, step_id, record, *, fence=None):
        if self.gate is not None:
            await self.gate.wait()
        await super().append_step(session_id, step_id, record, fence=fence)


async def test_a_finalize_during_a_commits_journal_write_waits_for_it_and_the_commit_succeeds():
    store = GatedJournalStore()
    reg = registry(store)
    await turn(reg, "s", [SYS, U1], A1)
    prepared = await reg.prepare("s", [SYS, U1, A1, T1])
    store.gate = trio.Event()
    results = {}

    async def commit():
        ids = answer_ids(reg.tokenizer, A2)
        results["commit"] = await reg.commit(prepared.handle, ids, None, None, None, "stop", A2)

    async def finalize():
        results["finalize"] = await reg.finalize("s")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(commit)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(finalize)
        await trio.testing.wait_all_tasks_blocked()
        assert not results
        store.gate.set()
    assert results["commit"].step_id == 2 and results["finalize"].steps == 2
    assert (await store.load_session("s")).state == "finalized"
