"""Two-phase drains over real sockets (issue 16, item 4): ``POST /trajectory/read`` with drain leases,
``POST /trajectory/ack`` deletes, an unacknowledged lease expires and its segments come again.

Tests that need a lease to hold run the default lease (300 s, longer than any test); the tests of expiry run a
proxy with a short ``read_lease_seconds`` (``--read-lease-seconds``) and poll until the segments come back (bounded
generously): they never assume how long anything takes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import httpx
import pytest
import trio

from proxy.client import ProxyClient

from .harness import CALL, SYSTEM, USER, Stack, record_calculator_session, record_turn, serve_stack

#: short enough for a test to wait out, long enough that a lease holds across a few requests on a loaded machine
LEASE_SECONDS = 1.0
OTHER_SYSTEM = {"role": "system", "content": "You are a careful calculator assistant."}


@pytest.fixture
async def stack(nursery, qwen3_path: Path) -> Stack:
    """A proxy with the default lease: every lease holds for the whole test."""
    return await nursery.start(serve_stack, qwen3_path)


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request, tmp_path) -> str:
    """The tests of expiry and concurrency run on the memory store and on SQLite (the command line's default)."""
    return "memory" if request.param == "memory" else f"sqlite:///{tmp_path / 'store.sqlite3'}"


@pytest.fixture
async def short_stack(nursery, qwen3_path: Path, store_url: str) -> Stack:
    """A proxy whose leases expire after LEASE_SECONDS."""
    config = {"read_lease_seconds": LEASE_SECONDS, "store": store_url}
    return await nursery.start(lambda task_status: serve_stack(qwen3_path, config=config, task_status=task_status))


@pytest.fixture
async def http(stack: Stack):
    async with httpx.AsyncClient(base_url=stack.url) as client:
        yield client


@pytest.fixture
async def short_http(short_stack: Stack):
    async with httpx.AsyncClient(base_url=short_stack.url) as client:
        yield client


async def finalize_two_segment_session(stack: Stack, http: httpx.AsyncClient, session_id: str) -> list[str]:
    """A session of two chains (two system prompts: two segments), finalized; its trajectory ids."""
    await record_calculator_session(stack.services, session_id)
    await record_turn(stack.services, session_id, [OTHER_SYSTEM, USER], CALL)
    answer = (await http.post("/session/finalize", json={"session_id": session_id})).json()
    assert answer["segments"] == 2
    return answer["trajectory_ids"]


async def stats(http: httpx.AsyncClient) -> dict:
    return (await http.get("/trajectory/stats")).json()


async def wait_for(predicate, what: str) -> None:
    """Poll ``predicate`` (async) until it holds; a generous bound so a loaded machine only makes it slower."""
    with trio.move_on_after(60 + 20 * LEASE_SECONDS) as scope:
        while not await predicate():
            await trio.sleep(LEASE_SECONDS / 10)
    assert not scope.cancelled_caught, f"timed out waiting for {what}"


async def test_a_drain_leases_and_only_the_ack_deletes(stack: Stack, http) -> None:
    ids = await finalize_two_segment_session(stack, http, "s1")
    leased = (await http.post("/trajectory/read", json={"session_id": "s1", "drain": True})).json()
    assert [s["trajectory_id"] for s in leased["data"]] == ids
    assert isinstance(leased["lease_id"], str) and leased["lease_seconds"] == 300.0
    # Nothing is deleted yet: a plain read sees both, the stats count them stored and leased.
    assert (await http.post("/trajectory/read", json={"session_id": "s1"})).json()["data"] == leased["data"]
    held = await stats(http)
    assert (held["segments"], held["leased_segments"], held["drained_segments"]) == (2, 2, 0)
    assert (await http.get("/session/s1")).json()["state"] == "FINALIZED"
    ack = await http.post("/trajectory/ack", json={"lease_id": leased["lease_id"]})
    assert ack.status_code == 200 and ack.json() == {"acknowledged": 2}
    after = await stats(http)
    assert (after["segments"], after["leased_segments"], after["drained_segments"]) == (0, 0, 2)
    assert (await http.get("/session/s1")).json()["state"] == "DRAINED"
    assert (await http.post("/trajectory/read", json={"session_id": "s1"})).json() == {"data": []}


async def test_a_double_ack_and_an_unknown_lease_acknowledge_nothing(stack: Stack, http) -> None:
    await finalize_two_segment_session(stack, http, "s1")
    await finalize_two_segment_session(stack, http, "s2")
    leased = (await http.post("/trajectory/read", json={"session_id": "s1", "drain": True})).json()
    assert (await http.post("/trajectory/ack", json={"lease_id": leased["lease_id"]})).json() == {"acknowledged": 2}
    for lease_id in (leased["lease_id"], "no-such-lease", "lease-0"):
        answer = await http.post("/trajectory/ack", json={"lease_id": lease_id})
        assert answer.status_code == 200 and answer.json() == {"acknowledged": 0}
    # The other session was never touched.
    assert len((await http.post("/trajectory/read", json={"session_id": "s2"})).json()["data"]) == 2
    assert (await stats(http))["drained_segments"] == 2


async def test_a_drain_of_nothing_leases_nothing(stack: Stack, http) -> None:
    await record_calculator_session(stack.services, "active")
    answer = (await http.post("/trajectory/read", json={"session_id": "active", "drain": True})).json()
    assert answer == {"data": [], "lease_id": None, "lease_seconds": None}
    # A read without drain answers as it always did: no lease fields.
    assert (await http.post("/trajectory/read", json={"session_id": "active"})).json() == {"data": []}


async def test_while_a_lease_holds_other_drains_get_nothing_and_no_404(stack: Stack, http) -> None:
    ids = await finalize_two_segment_session(stack, http, "s1")
    first = (await http.post("/trajectory/read", json={"session_id": "s1", "drain": True})).json()
    assert first["lease_id"] is not None
    for read in ({"session_id": "s1"}, {"trajectory_id": ids[0]}, {"session_id": "s1", "trajectory_id": ids[1]}):
        held = await http.post("/trajectory/read", json={**read, "drain": True})
        # The ids are stored (leased to someone else): empty, not 404 "unknown".
        assert held.status_code == 200 and held.json() == {"data": [], "lease_id": None, "lease_seconds": None}
    assert (await stats(http))["leased_segments"] == 2


async def test_an_empty_drain_of_a_leased_session_reads_the_store_once(stack: Stack, http, monkeypatch) -> None:
    # An idle trainer polls: a drain that finds everything leased to another reader must not read the store again
    # to tell "leased" from "unknown" (the store's read counts what it skipped, ReadResult.skipped_leased).
    await finalize_two_segment_session(stack, http, "s1")
    assert (await http.post("/trajectory/read", json={"session_id": "s1", "drain": True})).json()["lease_id"]
    # The store's class is slotted: its methods are counted on the class, for this test only.
    store_class = type(stack.services.sessions.store)
    reads: list[dict] = []
    real_read, real_load = store_class.read, store_class.load_session

    async def counted_read(self, **kwargs):
        reads.append(kwargs)
        return await real_read(self, **kwargs)

    async def counted_load(self, session_id):
        reads.append({"load_session": session_id})
        return await real_load(self, session_id)

    monkeypatch.setattr(store_class, "read", counted_read)
    monkeypatch.setattr(store_class, "load_session", counted_load)
    held = await http.post("/trajectory/read", json={"session_id": "s1", "drain": True})
    assert held.status_code == 200 and held.json() == {"data": [], "lease_id": None, "lease_seconds": None}
    assert len(reads) == 1, reads


async def test_a_response_lost_in_transit_loses_nothing(short_stack: Stack, short_http) -> None:
    stack, http = short_stack, short_http
    ids = await finalize_two_segment_session(stack, http, "s1")
    expected = (await http.post("/trajectory/read", json={"session_id": "s1"})).json()["data"]
    # The trainer's draining read is answered, and the connection dies before the trainer reads the answer.
    host, port = stack.url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({"session_id": "s1", "drain": True}).encode()
    async with await trio.open_tcp_stream(host, int(port)) as stream:
        await stream.send_all(b"POST /trajectory/read HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                              % (len(body), body))
        assert (await stream.receive_some(64)).startswith(b"HTTP/1.1 200")  # the proxy answered: it leased
    again: list = []

    async def drained_again() -> bool:
        again[:] = (await http.post("/trajectory/read", json={"session_id": "s1", "drain": True})).json()["data"]
        return bool(again)

    # Once the lost lease expires, the same segments are drained again: nothing was deleted.
    await wait_for(drained_again, "the lost read's segments to come back")
    assert again == expected and [s["trajectory_id"] for s in again] == ids


async def test_a_trainer_that_fails_before_its_ack_gets_the_segments_again(short_stack: Stack, short_http) -> None:
    stack, http = short_stack, short_http
    ids = await finalize_two_segment_session(stack, http, "s1")
    async with ProxyClient(stack.url) as trainer:
        with pytest.raises(RuntimeError, match="disk full"):
            async with trainer.drain_trajectories(session_id="s1") as segments:
                assert segments.trajectory_ids == ids
                raise RuntimeError("disk full")  # the trainer could not keep them: no ack

        async def back() -> bool:
            return (await trainer.stats()).leased_segments == 0

        await wait_for(back, "the unacknowledged lease to expire")
        # The exactly-once recipe: the ids the trainer already holds are skipped, the rest consumed, then acked.
        consumed = {ids[0]}
        async with trainer.drain_trajectories(session_id="s1") as segments:
            fresh = [s["trajectory_id"] for s in segments if s["trajectory_id"] not in consumed]
            consumed.update(fresh)
        assert fresh == ids[1:] and consumed == set(ids)
        assert (await trainer.stats()).segments == 0


async def test_concurrent_draining_readers_never_get_the_same_segment(nursery, qwen3_path: Path, store_url) -> None:
    # The default lease (300 s): every lease holds for the whole test, however slow the machine.
    stack = await nursery.start(lambda task_status: serve_stack(qwen3_path, config={"store": store_url},
                                                                task_status=task_status))
    async with httpx.AsyncClient(base_url=stack.url) as http:
        sessions = [f"c{i}" for i in range(6)]
        every_id: set[str] = set()
        for session_id in sessions:
            every_id.update(await finalize_two_segment_session(stack, http, session_id))
        # Readers drain whole sessions and single segments, in different orders, at once.
        targets = [{"session_id": s} for s in sessions] + [{"trajectory_id": t} for t in sorted(every_id)]
        leases: list[tuple[str, list[str]]] = []

        async def reader(seed: int) -> None:
            async with httpx.AsyncClient(base_url=stack.url) as own:  # its own connection
                for target in random.Random(seed).sample(targets, len(targets)):
                    answer = (await own.post("/trajectory/read", json={**target, "drain": True})).json()
                    if answer["lease_id"] is not None:
                        leases.append((answer["lease_id"], [s["trajectory_id"] for s in answer["data"]]))

        async with trio.open_nursery() as readers:
            for seed in range(8):
                readers.start_soon(reader, seed)
        leased = [tid for _, ids in leases for tid in ids]
        assert len(leased) == len(set(leased)), "a segment was leased to two readers"
        assert set(leased) == every_id and (await stats(http))["leased_segments"] == len(every_id)
        acknowledged = [(await http.post("/trajectory/ack", json={"lease_id": lease_id})).json()["acknowledged"]
                        for lease_id, _ in leases]
        assert acknowledged == [len(ids) for _, ids in leases]
        final = await stats(http)
        assert (final["drained_segments"], final["segments"], final["leased_segments"]) == (len(every_id), 0, 0)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"", None),
        (b"not json", None),
        (b"[]", None),
        (b"{}", "lease_id"),
        (b'{"lease_id": null}', "lease_id"),
        (b'{"lease_id": ""}', "lease_id"),
        (b'{"lease_id": 7}', "lease_id"),
        (b'{"lease_id": ["x"]}', "lease_id"),
        (b'{"lease_id": " padded "}', "lease_id"),
        (b'{"lease_id": "caf\\u00e9"}', "lease_id"),
        (b'{"lease_id": "' + b"x" * 257 + b'"}', "lease_id"),
    ],
)
async def test_ack_bad_bodies_are_400_invalid_request(http, body: bytes, param: str | None) -> None:
    r = await http.post("/trajectory/ack", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_request" and error["param"] == param and error["message"]


async def test_ack_is_post_only(http) -> None:
    r = await http.get("/trajectory/ack")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
