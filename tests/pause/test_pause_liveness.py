"""A pause never waits on a client (issue 13's hang, its root cause and its fix).

The hang: under partial rollout a streaming generation was interrupted by a pause and continued after resume; its
client had left in the window after the handler returned and before quart started the streaming body, so nothing
told the generation (quart sends ``http.response.start`` first; a cancellation there never runs the body
generator). Its output channel filled up, and its driver, before starting the continuation's upstream request,
waited for that channel to drain: for ever. The continuation's rid was never drawn, so the next pause's abort had
nothing to cut and the gate stayed PAUSING with ``in_flight: 1`` while the engine ran nothing.

Two fixes, each tested here: the driver waits on its client only before its answer (``waits_for_client``, the rule
the model-checked worlds read too), and the end of every HTTP exchange tells the generation its client is gone
(``proxy/request_end.py``). The planted-bug test widens the rule again and sees the real controller hang, the same
rule with which ``tests/statemachines/test_pause_liveness_model.py`` has the explorer find it.
"""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

from proxy.api import ChatCompletionRequest
from proxy.app import create_proxy_app
from proxy.request_end import RequestEndHooks
from statemachines import generation as gm
from tests.pause.harness import MESSAGES, NO_THINKING, generated_at_least

SLOW = {"token_rate": 10.0}
LONG = " ".join(f"w{i}" for i in range(200))
BODY = {"messages": MESSAGES, "chat_template_kwargs": NO_THINKING, "stream": True, "max_tokens": 400}


async def _unread_stream(stack, nursery: trio.Nursery):
    """A streaming generation whose response opened (its first output taken) and whose body is then never read."""
    request = ChatCompletionRequest.from_http(BODY, {"X-Session-Id": "s"})
    generation = await stack.services.generation_controller().start(request, nursery)
    await generation.first_output()
    return generation


async def _pause_resume_pause(stack, generation, bound: float) -> bool:
    """First pause (cuts the stream), resume (the continuation), second pause: did it return within ``bound``?"""
    await generated_at_least(stack.engine, 40)
    first = await stack.post("/v1/rollout/pause")
    assert first.status_code == 200 and first.json()["aborted"] == 1
    assert (await stack.post("/v1/rollout/resume", {"weight_version": "v1"})).status_code == 200
    await trio.testing.wait_all_tasks_blocked()
    with trio.move_on_after(bound):
        second = await stack.post("/v1/rollout/pause")
        assert second.status_code == 200
        return True
    return False


async def test_a_stream_nobody_reads_never_holds_a_pause(start_stack, mock_clock) -> None:
    stack = await start_stack(script=[{"session": "s", "output": LONG}], engine=SLOW, partial_rollout=True)
    async with trio.open_nursery() as nursery:
        generation = await _unread_stream(stack, nursery)
        assert await _pause_resume_pause(stack, generation, bound=60.0)
        state = stack.gate.statistics()
        assert (state.state, state.in_flight, state.waiting) == ("PAUSED", 0, 1)
        # Resumed again, the continuation goes on; its client reads nothing, the channel stays full; a client gone
        # now releases everything.
        await stack.post("/v1/rollout/resume", {"weight_version": "v2"})
        generation.client_gone()
        await trio.testing.wait_all_tasks_blocked()
        assert stack.gate.statistics().in_flight == 0
        nursery.cancel_scope.cancel()


async def test_planted_bug_driver_waiting_on_its_client_before_a_continuation_hangs_the_pause(
    start_stack, mock_clock, monkeypatch
) -> None:
    """The shared rule is the controller's: widened to StartUpstream, the real controller wedges the pause (the
    pause's own bound, which would rescue it, is set out of the way)."""
    monkeypatch.setattr(gm, "WAITS_FOR_CLIENT", (gm.StartUpstream,))
    stack = await start_stack(script=[{"session": "s", "output": LONG}], engine=SLOW, partial_rollout=True,
                              pause_abort_timeout=3600.0)
    async with trio.open_nursery() as nursery:
        generation = await _unread_stream(stack, nursery)
        assert not await _pause_resume_pause(stack, generation, bound=60.0)
        state = stack.gate.statistics()
        assert (state.state, state.in_flight) == ("PAUSING", 1)
        assert not stack.engine.active_requests()  # the engine runs nothing: the continuation was never sent
        generation.client_gone()  # a client gone is noticed: the pause returns
        await trio.testing.wait_all_tasks_blocked()
        assert stack.gate.statistics().state == "PAUSED"
        nursery.cancel_scope.cancel()


def _http_scope(body: bytes) -> dict:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"x-session-id", b"s"),
                    (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8800), "extensions": {},
    }


@pytest.mark.parametrize("hooked", [True, False], ids=["request-end hook", "without it"])
async def test_a_client_gone_before_the_stream_body_started_releases_the_generation(
    start_stack, mock_clock, hooked
) -> None:
    """The ASGI server reports the disconnect while quart sends the response start: the body generator never runs.
    Only the request-end hook tells the generation (without it, it stays in flight, streaming to nobody)."""
    stack = await start_stack(script=[{"session": "s", "output": LONG}], engine=SLOW, partial_rollout=True)
    app = create_proxy_app(stack.services)
    if not hooked:
        # The quart app without RequestEndHooks (still inside the outer wrappers: RequestIdMiddleware, the access log).
        outer = app.asgi_app
        while not isinstance(outer.app, RequestEndHooks):
            outer = outer.app
        outer.app = outer.app.app
    body = json.dumps(BODY).encode()
    started = trio.Event()
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        if messages:
            return messages.pop(0)
        await started.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            started.set()
            await trio.sleep_forever()  # the write blocks; the disconnect cancels it

    async with trio.open_nursery() as nursery:
        app.nursery = nursery
        await app(_http_scope(body), receive, send)
        await trio.testing.wait_all_tasks_blocked()
        controller = app.extensions["dressage_generation_controller"]
        in_flight = stack.gate.statistics().in_flight
        if hooked:
            assert (controller.statistics().cancelled, controller.statistics().active, in_flight) == (1, 0, 0)
        else:
            assert (controller.statistics().cancelled, in_flight) == (0, 1)
        nursery.cancel_scope.cancel()


async def test_the_pause_bound_rescues_a_wedged_driver_by_failing_it_closed(start_stack, mock_clock,
                                                                          monkeypatch) -> None:
    """The last line of defence: a generation still in flight at --pause-abort-timeout with no upstream request open
    (its driver is not where it must be) fails closed, which releases its gate slot; the pause returns and names
    it."""
    monkeypatch.setattr(gm, "WAITS_FOR_CLIENT", (gm.StartUpstream,))
    stack = await start_stack(script=[{"session": "s", "output": LONG}], engine=SLOW, partial_rollout=True,
                              pause_abort_timeout=5.0)
    async with trio.open_nursery() as nursery:
        generation = await _unread_stream(stack, nursery)
        await generated_at_least(stack.engine, 40)
        await stack.post("/v1/rollout/pause")
        await stack.post("/v1/rollout/resume", {"weight_version": "v1"})
        await trio.testing.wait_all_tasks_blocked()
        began = trio.current_time()
        second = (await stack.post("/v1/rollout/pause")).json()
        assert 5.0 - 1e-6 <= trio.current_time() - began < 6.0
        assert [entry["id"] for entry in second["force_cut"]] == [generation.completion_id]
        assert generation.statistics().state == "FAILED"
        assert (stack.gate.statistics().in_flight, stack.gate.statistics().waiting) == (0, 0)
        nursery.cancel_scope.cancel()
