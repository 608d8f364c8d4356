"""``/v1/rollout/pause``, ``/resume``, ``/pause_state`` over HTTP: shapes, idempotence, refusals, the
acknowledgement of every in-flight generation, no token while paused, waiting without polling and the pause-wait
timeout (503 + Retry-After). Mock clock; the engine is slow (10 tokens/s of mock time)."""

from __future__ import annotations

import trio
import trio.testing

from tests.pause.harness import WORDS, engine_idle, generated_at_least

SLOW = {"token_rate": 10.0}


async def test_pause_state_pause_resume_shapes_idempotence_and_refusals(start_stack, mock_clock) -> None:
    stack = await start_stack()
    state = (await stack.get("/v1/rollout/pause_state")).json()
    assert state == {"state": "RUNNING", "epoch": 0, "weight_version": None, "in_flight": 0, "waiting": 0,
                     "pauses_total": 0, "admitted_total": 0, "parked_total": 0}
    # Nothing in flight: paused at once; a second pause answers at once too.
    first = await stack.post("/v1/rollout/pause")
    assert first.status_code == 200
    answer = first.json()
    assert answer.pop("seconds") >= 0
    assert answer == {"state": "PAUSED", "epoch": 0, "weight_version": None, "aborted": 0, "tokens_kept": 0,
                      "waiting": 0, "already_paused": False, "force_cut": []}
    again = (await stack.post("/v1/rollout/pause")).json()
    assert (again["already_paused"], again["aborted"], again["epoch"]) == (True, 0, 0)
    assert (await stack.get("/v1/rollout/pause_state")).json()["state"] == "PAUSED"
    # Bad bodies are 400 and change nothing.
    for body in (b"[1]", {"weight_version": ""}, {"weight_version": 1.5}, b"{nope"):
        bad = await stack.post("/v1/rollout/resume", body)
        assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_request"), body
    assert stack.gate.statistics().state == "PAUSED"
    # Resume with a version (an integer is taken as its string): epoch + 1; a second resume is a no-op.
    resumed = (await stack.post("/v1/rollout/resume", {"weight_version": 7})).json()
    assert resumed == {"state": "RUNNING", "epoch": 1, "weight_version": "7", "admitted": 0, "already_running": False}
    for body in (None, {}, {"weight_version": "7"}):
        same = (await stack.post("/v1/rollout/resume", body)).json()
        assert (same["already_running"], same["epoch"], same["weight_version"]) == (True, 1, "7")
    # A new version while running needs a pause first: 409, nothing changes.
    refused = await stack.post("/v1/rollout/resume", {"weight_version": "8"})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "resume_refused"
    state = (await stack.get("/v1/rollout/pause_state")).json()
    assert (state["state"], state["epoch"], state["weight_version"], state["pauses_total"]) == ("RUNNING", 1, "7", 1)
    # Wrong methods get the usual error shape.
    wrong = await stack.get("/v1/rollout/pause")
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (405, "method_not_allowed")


class _SlowMember:
    """A gate member whose abort is acknowledged only when the test says so (keeps the gate PAUSING)."""

    def abort_requested(self) -> None:
        pass

    def resumed(self, epoch: int, weight_version: str | None) -> None:
        pass


async def test_resume_while_a_pause_is_in_progress_is_409_and_a_joining_pause_gets_the_same_answer(
    start_stack, mock_clock
) -> None:
    stack = await start_stack()
    member = _SlowMember()
    stack.gate.want_to_start(member)
    answers: list[dict] = []

    async def pause() -> None:
        answers.append((await stack.post("/v1/rollout/pause")).json())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pause)
        nursery.start_soon(pause)
        await trio.testing.wait_all_tasks_blocked()
        assert (await stack.get("/v1/rollout/pause_state")).json()["state"] == "PAUSING"
        refused = await stack.post("/v1/rollout/resume", {"weight_version": "v2"})
        assert (refused.status_code, refused.json()["error"]["code"]) == (409, "resume_refused")
        stack.gate.abort_acknowledged(member, 5)
    assert len(answers) == 2
    summary = [(a["aborted"], a["tokens_kept"], a["waiting"], a["already_paused"]) for a in answers]
    assert summary == [(1, 5, 1, False)] * 2
    assert (await stack.post("/v1/rollout/resume", {"weight_version": "v2"})).json()["admitted"] == 1


async def test_pause_acknowledges_every_in_flight_generation_no_token_while_paused_then_resume_completes(
    start_stack, mock_clock
) -> None:
    stack = await start_stack(script=[{"session": "a", "output": WORDS}, {"session": "b", "output": WORDS}],
                              engine=SLOW, partial_rollout=True, record_token_versions=True)
    answers: dict[str, dict] = {}

    async def chat(session: str) -> None:
        response = await stack.chat(session)
        assert response.status_code == 200, response.text
        answers[session] = response.json()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(chat, "a")
        nursery.start_soon(chat, "b")
        await generated_at_least(stack.engine, 5, requests=2)
        assert (await stack.get("/v1/rollout/pause_state")).json()["in_flight"] == 2
        sent = stack.services.upstream.statistics().requests_sent
        paused = (await stack.post("/v1/rollout/pause")).json()
        # Returned only once both were cut and acknowledged; they wait, holding their tokens.
        assert (paused["state"], paused["aborted"], paused["waiting"], paused["epoch"]) == ("PAUSED", 2, 2, 0)
        assert paused["tokens_kept"] >= 10
        state = (await stack.get("/v1/rollout/pause_state")).json()
        assert (state["state"], state["in_flight"], state["waiting"]) == ("PAUSED", 0, 2)
        # Nothing is generated through the proxy while paused, however long the pause.
        await engine_idle(stack.engine)
        await trio.testing.wait_all_tasks_blocked()
        # Each cut stream's rid was also aborted on the worker (one /abort_request per generation).
        assert stack.services.upstream.statistics().requests_sent == sent + 2
        finished = len(stack.engine.request_log)
        await trio.sleep(60)
        assert len(stack.engine.request_log) == finished and not stack.engine.active_requests()
        assert stack.engine.statistics().generate_requests == 2
        resumed = (await stack.post("/v1/rollout/resume", {"weight_version": "v1"})).json()
        assert (resumed["epoch"], resumed["admitted"], resumed["weight_version"]) == (1, 2, "v1")
    assert {answers[s]["choices"][0]["message"]["content"] for s in "ab"} == {WORDS}
    # The tokens kept at the pause are exactly those the continuations appended to their input.
    kept = 0
    for session in "ab":
        first, second = stack.requests_of(session)
        kept += second.input_len - first.input_len
        assert answers[session]["token_ids"][: second.input_len - first.input_len] == list(
            second.input_ids[first.input_len:])
    assert kept == paused["tokens_kept"]
    state = (await stack.get("/v1/rollout/pause_state")).json()
    assert (state["in_flight"], state["waiting"], state["pauses_total"]) == (0, 0, 1)


async def test_paused_requests_wait_without_polling_and_time_out_with_503_and_retry_after(
    start_stack, mock_clock
) -> None:
    stack = await start_stack(script=[{"session": "old", "output": WORDS}], engine=SLOW, partial_rollout=True,
                              pause_wait_timeout=30.0)
    results: dict[str, object] = {}

    async def chat(session: str) -> None:
        results[session] = await stack.chat(session)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(chat, "old")
        await generated_at_least(stack.engine, 3)
        await stack.post("/v1/rollout/pause")
        began = trio.current_time()
        nursery.start_soon(chat, "new")
        await trio.testing.wait_all_tasks_blocked()
        # Both wait (the interrupted one and the new one); none of them polls: the run is idle until the deadline.
        assert (await stack.get("/v1/rollout/pause_state")).json()["waiting"] == 2
    assert 30.0 <= trio.current_time() - began < 31.0
    for session in ("old", "new"):
        response = results[session]
        assert response.status_code == 503
        assert response.headers["Retry-After"] == "10"
        error = response.json()["error"]
        assert (error["code"], error["retry_after"]) == ("paused_timeout", 10)
        assert stack.services.sessions.debug_view(session).in_flight == 0
    assert (await stack.get("/v1/rollout/pause_state")).json()["waiting"] == 0
    assert await stack.segments("old") == []
    # After resume the proxy serves again.
    await stack.post("/v1/rollout/resume")
    assert (await stack.chat("later")).status_code == 200
