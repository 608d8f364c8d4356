"""A pause never waits for ever (issue 13): ``--pause-abort-timeout`` bounds how long it waits for the upstream to
confirm its aborts; then the proxy cuts its own requests, keeps what they delivered (the rules of any abort),
acknowledges, and names them in ``force_cut``. ``/health`` is ``degraded`` while a pause runs past that bound.
Mock clock; the engine is slow and, here, ignores ``/abort_request`` (``fault_ignore_aborts``)."""

from __future__ import annotations

import trio
import trio.testing

from tests.pause.harness import WORDS, generated_at_least, sse_payloads

DEAF = {"token_rate": 10.0, "fault_ignore_aborts": True}
BOUND = 2.0


async def _chat_in_background(stack, nursery, answers: list, **body) -> None:
    async def chat() -> None:
        answers.append(await stack.chat("s", **body))

    nursery.start_soon(chat)


async def test_an_unconfirmed_abort_of_a_non_streaming_upstream_request_is_cut_at_the_bound(
    start_stack, mock_clock
) -> None:
    """A non-streaming client with worker URLs goes upstream non-streaming: a pause aborts its rid and waits for the
    answer, which this engine never sends. At the bound the proxy cuts the request: it delivered nothing (its tokens
    would only have come in the answer), so the step restarts after resume and is recorded once."""
    stack = await start_stack(script=[{"session": "s", "output": WORDS}], engine=DEAF, partial_rollout=True,
                              pause_abort_timeout=BOUND)
    answers: list = []
    async with trio.open_nursery() as nursery:
        await _chat_in_background(stack, nursery, answers, max_tokens=200)
        await generated_at_least(stack.engine, 3)
        began = trio.current_time()
        pause = await stack.post("/v1/rollout/pause")
        took = trio.current_time() - began
        assert pause.status_code == 200, pause.text
        body = pause.json()
        assert BOUND - 1e-6 <= took < BOUND + 1.0
        assert [entry["session_id"] for entry in body["force_cut"]] == ["s"]
        assert body["force_cut"][0]["id"].startswith("chatcmpl-")
        assert (body["aborted"], body["tokens_kept"]) == (1, 0)
        assert stack.gate.statistics().in_flight == 0
        assert (await stack.post("/v1/rollout/resume", {"weight_version": "v1"})).status_code == 200
    (answer,) = answers
    assert answer.status_code == 200, answer.text
    (segment,) = await stack.segments("s")
    # Recorded once: the trained tokens are exactly the answer the client got.
    assert _trained(segment) == answer.json()["token_ids"]


async def test_an_unconfirmed_abort_of_a_stream_read_to_its_abort_finish_keeps_what_it_streamed(
    start_stack, mock_clock
) -> None:
    """Routing replay with partial rollout reads an aborted stream to its abort finish (it carries the rows): this
    engine never ends it. At the bound the proxy cuts the stream; the tokens it streamed are kept and continued."""
    stack = await start_stack(script=[{"session": "s", "output": WORDS}], engine=DEAF, partial_rollout=True,
                              use_rollout_routing_replay=True, pause_abort_timeout=BOUND)
    answers: list = []
    async with trio.open_nursery() as nursery:
        await _chat_in_background(stack, nursery, answers, max_tokens=200, stream=True)
        await generated_at_least(stack.engine, 5)
        pause = (await stack.post("/v1/rollout/pause")).json()
        assert [entry["session_id"] for entry in pause["force_cut"]] == ["s"]
        assert pause["tokens_kept"] >= 5
        await stack.post("/v1/rollout/resume", {"weight_version": "v1"})
    (answer,) = answers
    assert answer.status_code == 200
    streamed = [token for chunk in sse_payloads(answer.content) if isinstance(chunk, dict)
                for token in chunk.get("token_ids") or ()]
    (segment,) = await stack.segments("s")
    assert _trained(segment) == streamed
    # The kept tokens were continued, not regenerated: the engine saw the continuation's input end with them.
    first, second = stack.requests_of("s")
    assert list(second.input_ids[-pause["tokens_kept"]:]) == streamed[:pause["tokens_kept"]]


async def test_a_pause_that_confirms_in_time_cuts_nothing(start_stack, mock_clock) -> None:
    stack = await start_stack(script=[{"session": "s", "output": WORDS}], engine={"token_rate": 10.0},
                              partial_rollout=True, pause_abort_timeout=BOUND)
    answers: list = []
    async with trio.open_nursery() as nursery:
        await _chat_in_background(stack, nursery, answers, max_tokens=200)
        await generated_at_least(stack.engine, 3)
        pause = (await stack.post("/v1/rollout/pause")).json()
        assert (pause["force_cut"], pause["aborted"]) == ([], 1)
        assert pause["tokens_kept"] >= 3  # the abort answered with the tokens generated so far
        await stack.post("/v1/rollout/resume", {"weight_version": "v1"})
    assert answers[0].status_code == 200


def _trained(segment: dict) -> list[int]:
    return [token for token, mask in zip(segment["token_ids"], segment["loss_mask"]) if mask]


class _DeafMember:
    """A gate member that answers neither the abort nor the forced cut (what a bug would look like)."""

    def abort_requested(self) -> None:
        pass

    def resumed(self, epoch: int, weight_version: str | None) -> None:
        pass

    def cut_report(self) -> dict[str, object]:
        return {"id": "deaf"}

    def force_cut(self) -> None:
        pass


async def test_health_is_degraded_while_a_pause_runs_past_its_bound(start_stack, mock_clock) -> None:
    stack = await start_stack(pause_abort_timeout=BOUND)
    member = _DeafMember()
    stack.gate.want_to_start(member)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stack.post, "/v1/rollout/pause")
        await trio.sleep(BOUND / 2)
        health = (await stack.get("/health")).json()
        assert (health["status"], health["gate"]["state"]) == ("ok", "PAUSING")
        await trio.sleep(BOUND)
        health = (await stack.get("/health")).json()
        assert health["status"] == "degraded" and health["pausing_seconds"] > BOUND
        stack.gate.abort_acknowledged(member, 0)
        await trio.testing.wait_all_tasks_blocked()
    health = (await stack.get("/health")).json()
    assert (health["status"], health["pausing_seconds"], health["gate"]["state"]) == ("ok", 0, "PAUSED")
