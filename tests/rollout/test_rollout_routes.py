"""The rollout endpoints over real sockets: finalize, read (and drain), stats, the session debug view, their errors.

Sessions are recorded through the registry (``harness.record_turn``), exactly as the chat-completions path records
them, so these tests do not depend on that path.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import trio

from proxy.client import ProxyClient
from proxy.trajectory.session_errors import SessionFinalizedError
from proxy.trajectory.memory_store import InMemoryTrajectoryStore

from .harness import ANSWER, CALL, RESULT, SYSTEM, USER, Stack, record_calculator_session, serve_stack


@pytest.fixture
async def stack(nursery, qwen3_path: Path) -> Stack:
    return await nursery.start(serve_stack, qwen3_path)


@pytest.fixture
async def http(stack: Stack):
    async with httpx.AsyncClient(base_url=stack.url) as client:
        yield client


def assert_error(response: httpx.Response, status: int, code: str, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and isinstance(error["message"], str) and error["message"]
    if param is not None:
        assert error["param"] == param
    return error


# -- finalize ------------------------------------------------------------------------------------------------------


async def test_finalize_exports_the_chain_and_answers_what_it_exported(stack: Stack, http) -> None:
    await record_calculator_session(stack.services, "s1")
    r = await http.post("/session/finalize", json={"session_id": "s1", "instance_id": "i1",
                                                   "reward_info": {"reward": 1.0}})
    assert r.status_code == 200
    assert r.json() == {"session_id": "s1", "segments": 1, "steps": 2, "trajectory_ids": ["s1:0"]}


async def test_finalize_is_idempotent_and_the_first_reward_stands(stack: Stack, http) -> None:
    await record_calculator_session(stack.services, "s1")
    first = await http.post("/session/finalize", json={"session_id": "s1", "reward_info": {"reward": 1.0}})
    again = await http.post("/session/finalize", json={"session_id": "s1", "reward_info": {"reward": -1.0}})
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    (segment,) = (await http.post("/trajectory/read", json={"session_id": "s1"})).json()["data"]
    assert segment["reward_info"] == {"reward": 1.0}


async def test_concurrent_finalizes_get_the_same_answer(stack: Stack, http) -> None:
    await record_calculator_session(stack.services, "s1")
    answers = []

    async def finalize() -> None:
        answers.append((await http.post("/session/finalize", json={"session_id": "s1"})).json())

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(finalize)
    assert len(answers) == 4 and all(a == answers[0] for a in answers) and answers[0]["segments"] == 1


async def test_finalize_of_an_unknown_session_exports_nothing_and_blocks_stragglers(stack: Stack, http) -> None:
    r = await http.post("/session/finalize", json={"session_id": "never-seen"})
    assert r.json() == {"session_id": "never-seen", "segments": 0, "steps": 0, "trajectory_ids": []}
    with pytest.raises(SessionFinalizedError):
        await record_calculator_session(stack.services, "never-seen")


async def test_a_generation_in_flight_at_finalize_is_not_committed(stack: Stack, http) -> None:
    registry = stack.services.sessions
    await registry.prepare("s1", [SYSTEM, USER], tools=None)
    late = await registry.prepare("s1", [SYSTEM, USER, CALL, RESULT], tools=None)
    debug = (await http.get("/session/s1")).json()
    assert debug["in_flight"] == 2 and debug["state"] == "ACTIVE"
    r = await http.post("/session/finalize", json={"session_id": "s1"})
    assert r.json()["segments"] == 0
    ids = registry.tokenizer.encode_text(registry.tokenizer.render_assistant(ANSWER))
    with pytest.raises(SessionFinalizedError):
        await registry.commit(late.handle, ids, None, None, None, "stop", ANSWER)
    assert (await http.post("/trajectory/read", json={"session_id": "s1"})).json() == {"data": []}
    assert (await http.get("/session/s1")).json()["rejected_commits"] == 1


async def test_finalize_of_an_aborted_session_is_409_session_aborted(stack: Stack, http) -> None:
    await record_calculator_session(stack.services, "s1")
    assert await stack.services.sessions.abort("s1")
    assert_error(await http.post("/session/finalize", json={"session_id": "s1"}), 409, "session_aborted")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"", None),
        (b"not json", None),
        (b"[1, 2]", None),
        (b'{"session_id": NaN}', None),
        (b"{}", "session_id"),
        (b'{"session_id": ""}', "session_id"),
        (b'{"session_id": ["s"]}', "session_id"),
        (b'{"session_id": "caf\\u00e9"}', "session_id"),
        (b'{"session_id": "s", "reward_info": 1.0}', "reward_info"),
        (b'{"session_id": "s", "instance_id": {}}', "instance_id"),
        (b'\xff\xfe', None),
    ],
)
async def test_finalize_bad_bodies_are_400_invalid_request(http, body: bytes, param: str | None) -> None:
    r = await http.post("/session/finalize", content=body, headers={"Content-Type": "application/json"})
    assert_error(r, 400, "invalid_request", param)


# -- read and drain --------------------------------------------------------------------------------------------------


async def test_read_returns_the_segment_with_its_tokens_mask_and_reason(stack: Stack, http) -> None:
    await record_calculator_session(stack.services, "s1")
    await http.post("/session/finalize", json={"session_id": "s1", "instance_id": "i1", "rollout_id": "r9",
                                               "reward_info": {"reward": 0.5}})
    r = await http.post("/trajectory/read", json={"session_id": "s1"})
    assert r.status_code == 200 and list(r.json()) == ["data"]
    (segment,) = r.json()["data"]
    assert segment["trajectory_id"] == "s1:0" and segment["parent_traj_id"] == "s1"
    assert (segment["instance_id"], segment["rollout_id"], segment["reward_info"]) == ("i1", "r9", {"reward": 0.5})
    assert segment["boundary_reason"] == "session_start" and segment["num_turns"] == 2
    assert len(segment["token_ids"]) == len(segment["loss_mask"]) == len(segment["logprobs"])
    assert 0 < sum(segment["loss_mask"]) < len(segment["loss_mask"])
    text = stack.services.tokenizer.decode(segment["token_ids"])
    assert "5 plus 3 is 8." in text and '"name": "add"' in text


async def test_read_by_trajectory_id_and_drain_remove_what_was_read(stack: Stack, http) -> None:
    await record_calculator_session(stack.services, "s1")
    await http.post("/session/finalize", json={"session_id": "s1"})
    one = (await http.post("/trajectory/read", json={"trajectory_id": "s1:0"})).json()["data"]
    both = (await http.post("/trajectory/read", json={"session_id": "s1", "trajectory_id": "s1:0"})).json()["data"]
    assert len(one) == 1 and one == both
    leased = (await http.post("/trajectory/read", json={"session_id": "s1", "drain": True})).json()
    assert leased["data"] == one and leased["lease_seconds"] == 300.0
    assert (await http.post("/trajectory/ack", json={"lease_id": leased["lease_id"]})).json() == {"acknowledged": 1}
    # The session is known (drained): an empty list; the segment id is gone: 404.
    assert (await http.post("/trajectory/read", json={"session_id": "s1"})).json() == {"data": []}
    assert_error(await http.post("/trajectory/read", json={"trajectory_id": "s1:0"}), 404, "not_found",
                 "trajectory_id")
    assert (await http.get("/session/s1")).json()["state"] == "DRAINED"


async def test_read_of_an_active_session_is_empty_and_of_an_unknown_one_404(stack: Stack, http) -> None:
    await record_calculator_session(stack.services, "s1")
    assert (await http.post("/trajectory/read", json={"session_id": "s1"})).json() == {"data": []}
    assert_error(await http.post("/trajectory/read", json={"session_id": "nope"}), 404, "not_found", "session_id")


async def test_read_of_a_segment_of_another_session_is_404(stack: Stack, http) -> None:
    await record_calculator_session(stack.services, "s1")
    await http.post("/session/finalize", json={"session_id": "s1"})
    r = await http.post("/trajectory/read", json={"session_id": "s2", "trajectory_id": "s1:0"})
    assert_error(r, 404, "not_found")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"", None),
        (b"{}", "session_id"),
        (b'{"drain": true}', "session_id"),
        (b'{"session_id": "s", "drain": "yes"}', "drain"),
        (b'{"trajectory_id": 3.5}', "trajectory_id"),
        (b'"s1"', None),
    ],
)
async def test_read_bad_bodies_are_400_invalid_request(http, body: bytes, param: str | None) -> None:
    r = await http.post("/trajectory/read", content=body, headers={"Content-Type": "application/json"})
    assert_error(r, 400, "invalid_request", param)


async def test_wrong_methods_are_405(http) -> None:
    assert_error(await http.get("/trajectory/read"), 405, "method_not_allowed")
    assert_error(await http.post("/trajectory/stats"), 405, "method_not_allowed")
    assert_error(await http.delete("/session/s1"), 405, "method_not_allowed")


# -- stats -------------------------------------------------------------------------------------------------------------


async def test_stats_follow_finalize_and_drain(stack: Stack, http) -> None:
    empty = (await http.get("/trajectory/stats")).json()
    assert empty == {"sessions": 0, "segments": 0, "tokens": 0, "bytes": 0, "written_sessions": 0,
                     "drained_segments": 0, "cleaned_sessions": 0, "leased_segments": 0, "export_failures": 0,
                     "export_failed_sessions": [], "registry_sessions": 0, "registry_tombstones": 0,
                     "registry_bytes": 0, "approximate_bytes": 0, "idle_finalized_sessions": 0,
                     "expired_tombstones": 0}
    await record_calculator_session(stack.services, "s1")
    await record_calculator_session(stack.services, "s2")
    for session_id in ("s1", "s2"):
        await http.post("/session/finalize", json={"session_id": session_id})
    full = (await http.get("/trajectory/stats")).json()
    (segment,) = (await http.post("/trajectory/read", json={"session_id": "s1"})).json()["data"]
    assert (full["sessions"], full["segments"], full["written_sessions"]) == (2, 2, 2)
    assert full["tokens"] == 2 * len(segment["token_ids"]) and full["bytes"] > 0
    leased = (await http.post("/trajectory/read", json={"session_id": "s1", "drain": True})).json()
    held = (await http.get("/trajectory/stats")).json()
    assert (held["segments"], held["leased_segments"], held["drained_segments"]) == (2, 1, 0)
    await http.post("/trajectory/ack", json={"lease_id": leased["lease_id"]})
    after = (await http.get("/trajectory/stats")).json()
    assert after["leased_segments"] == 0
    assert (after["sessions"], after["segments"], after["drained_segments"]) == (1, 1, 1)
    assert after["tokens"] == full["tokens"] // 2


class JournalStore(InMemoryTrajectoryStore):
    """The in-memory store that also appends every write to a JSON-lines journal file before storing it: a store
    with real I/O, so a full disk (``/dev/full``: every write is ENOSPC) fails it for real."""

    def __init__(self, journal: Path) -> None:
        super().__init__()
        self.journal = journal

    async def write(self, session_id, segments, *, result=None):
        with open(self.journal, "a", encoding="utf-8") as journal:
            journal.write(json.dumps({"session_id": session_id, "segments": list(segments)}) + "\n")
        await super().write(session_id, segments, result=result)


async def test_export_failure_is_logged_counted_and_retried_without_losing_a_step(
    stack: Stack, http, tmp_path: Path, caplog
) -> None:
    # Issue 13: a store write that fails must not discard the session (it used to answer 409 session_aborted and
    # drop every committed step). The disk is full for real (/dev/full), then has room again.
    store = JournalStore(Path("/dev/full"))
    stack.services.sessions.store = store
    await record_calculator_session(stack.services, "s1")
    failed = await http.post("/session/finalize", json={"session_id": "s1", "reward_info": {"reward": 1.0}})
    error = assert_error(failed, 500, "export_failed")
    assert error["type"] == "server_error" and "2 committed step(s) are kept" in error["message"]
    assert "/dev/full" not in failed.text and "Traceback" not in failed.text
    logged = [r for r in caplog.records if r.name == "dressage_proxy.sessions" and r.levelname == "ERROR"]
    assert len(logged) == 1 and "'s1'" in logged[0].getMessage() and logged[0].exc_info is not None
    stats = (await http.get("/trajectory/stats")).json()
    assert (stats["export_failures"], stats["export_failed_sessions"], stats["sessions"]) == (1, ["s1"], 0)
    async with ProxyClient(stack.url) as client:
        typed = await client.stats()
    assert (typed.export_failures, typed.export_failed_sessions) == (1, ("s1",))
    health = (await http.get("/health")).json()
    assert health["store"]["export_failures"] == 1
    view = (await http.get("/session/s1")).json()
    assert (view["state"], view["steps"]) == ("EXPORT_FAILED", 2)
    # Still failing: counted again, still kept. Then the disk has room: the retry exports every committed step.
    assert_error(await http.post("/session/finalize", json={"session_id": "s1"}), 500, "export_failed")
    store.journal = tmp_path / "journal.jsonl"
    done = await http.post("/session/finalize", json={"session_id": "s1"})
    assert done.status_code == 200 and done.json() == {"session_id": "s1", "segments": 1, "steps": 2,
                                                       "trajectory_ids": ["s1:0"]}
    (segment,) = (await http.post("/trajectory/read", json={"session_id": "s1"})).json()["data"]
    assert segment["step_ids"] == [1, 2] and segment["reward_info"] == {"reward": 1.0}
    (journaled,) = [json.loads(line) for line in store.journal.read_text().splitlines()]
    assert journaled["segments"][0]["token_ids"] == segment["token_ids"]
    stats = (await http.get("/trajectory/stats")).json()
    assert (stats["export_failures"], stats["export_failed_sessions"], stats["sessions"]) == (2, [], 1)


# -- the debug view ----------------------------------------------------------------------------------------------------


async def test_debug_view_shows_head_branches_in_flight_and_trie(stack: Stack, http) -> None:
    await record_calculator_session(stack.services, "s1", instance_id="i1")
    await stack.services.sessions.prepare("s1", [SYSTEM, {"role": "user", "content": "Another question"}],
                                          tools=None)
    view = (await http.get("/session/s1")).json()
    assert view["session_id"] == "s1" and view["state"] == "ACTIVE" and view["instance_id"] == "i1"
    assert (view["steps"], view["in_flight"], view["branches"]) == (2, 1, 2)
    assert view["head"]["step_id"] == 2 and view["head"]["finish_reason"] == "stop" and view["head"]["tokens"] > 0
    assert set(view["trie"]) == {"contexts", "nodes", "pending", "checkpoints"}
    assert view["trie"]["checkpoints"] == 2 and view["trie"]["contexts"] == 2 and view["segments"] is None
    await stack.services.sessions.finalize("s1")
    view = (await http.get("/session/s1")).json()
    # The generation in flight never committed: one segment.
    assert view["state"] == "FINALIZED" and view["segments"] == 1 and view["trie"] is None


async def test_debug_view_of_odd_ids_and_unknown_sessions(stack: Stack, http) -> None:
    for session_id in ("finalize", "a/b", "with space", "50%"):
        await record_calculator_session(stack.services, session_id)
        encoded = session_id.replace("%", "%25").replace(" ", "%20")
        view = (await http.get(f"/session/{encoded}")).json()
        assert view["session_id"] == session_id and view["steps"] == 2
    assert_error(await http.get("/session/unknown"), 404, "not_found", "session_id")
    assert_error(await http.get("/session/" + "x" * 300), 400, "invalid_request", "session_id")
