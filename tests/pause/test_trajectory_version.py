"""``trajectory_version_changed`` (spec 7): without partial rollout a session is single-version. Its steps' rollout
epoch and weight version are remembered (the session's ``version_stamp``, set by its first commit); a step is checked
before it generates (the gate's epoch at admission, and again at a restart after a pause) and at commit (the version
SGLang reported, and a racing commit). With ``--dressage-partial-rollout`` there is no such check."""

from __future__ import annotations

import pytest
import trio

from proxy.trajectory.session_errors import TrajectoryVersionChangedError
from proxy.trajectory.version_stamp import VersionStamp
from tests.pause.harness import MESSAGES, NO_THINKING, WORDS, engine_idle, generated_at_least

SLOW = {"token_rate": 10.0}
USER2 = {"role": "user", "content": "again"}


def second_step(first_answer: dict) -> list[dict]:
    return [*MESSAGES, {"role": "assistant", "content": first_answer["choices"][0]["message"]["content"]}, USER2]


async def test_without_partial_rollout_a_step_after_a_pause_resume_is_refused_before_generating(
    start_stack, mock_clock
) -> None:
    stack = await start_stack(script=[{"session": "s", "output": "one"}], record_token_versions=True)
    first = await stack.chat("s")
    assert first.status_code == 200
    await stack.post("/v1/rollout/pause")
    await stack.post("/v1/rollout/resume", {"weight_version": "v2"})
    sent = stack.engine.statistics().generate_requests
    for stream in (False, True):
        refused = await stack.chat("s", messages=second_step(first.json()), stream=stream)
        # Refused before any upstream request; a stream that never opened answers a plain HTTP error.
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["type"]) == ("trajectory_version_changed", "invalid_request_error")
        assert "rollout epoch 0" in error["message"] and "rollout epoch 1" in error["message"]
    assert stack.engine.statistics().generate_requests == sent
    assert stack.services.sessions.debug_view("s").in_flight == 0
    # A new session is fine; the refused one still finalizes with its first step.
    assert (await stack.chat("fresh")).status_code == 200
    (segment,) = await stack.segments("s")
    assert segment["num_turns"] == 1


async def test_with_partial_rollout_steps_may_span_epochs_and_versions(start_stack, mock_clock) -> None:
    stack = await start_stack(script=[{"session": "s", "output": "one"}, {"session": "s", "output": "two"}],
                              partial_rollout=True, record_token_versions=True)
    first = await stack.chat("s")
    await stack.post("/v1/rollout/pause")
    stack.engine.update_weight_version("v2", abort_all_requests=False)
    await stack.post("/v1/rollout/resume", {"weight_version": "v2"})
    second = await stack.chat("s", messages=second_step(first.json()))
    assert second.status_code == 200, second.text
    (segment,) = await stack.segments("s")
    assert segment["num_turns"] == 2
    assert {v for v in segment["weight_versions"] if v is not None} == {"default", "v2"}


async def test_a_step_interrupted_and_restarted_in_a_new_epoch_is_refused_at_the_restart(
    start_stack, mock_clock
) -> None:
    stack = await start_stack(script=[{"session": "s", "output": "one"}, {"session": "s", "output": WORDS}],
                              engine=SLOW)
    first = await stack.chat("s")
    results: list = []

    async def step_two() -> None:
        results.append(await stack.chat("s", messages=second_step(first.json())))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(step_two)
        await generated_at_least(stack.engine, 3)  # admitted in epoch 0, like step 1: it generates
        await stack.post("/v1/rollout/pause")
        await stack.post("/v1/rollout/resume")
    (refused,) = results
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "trajectory_version_changed"
    await engine_idle(stack.engine)
    assert len(stack.requests_of("s")) == 2  # no restart request went upstream
    assert stack.gate.statistics().in_flight == 0
    (segment,) = await stack.segments("s")
    assert segment["num_turns"] == 1


async def test_weights_changed_outside_the_proxy_between_steps_are_caught_at_commit(start_stack, mock_clock) -> None:
    stack = await start_stack(script=[{"session": "s", "output": "one"}, {"session": "s", "output": "two"}],
                              record_token_versions=True)
    first = await stack.chat("s")
    # The trainer relabelled the engine's weights without pausing the proxy (same epoch, another version).
    stack.engine.update_weight_version("v9", abort_all_requests=False)
    refused = await stack.chat("s", messages=second_step(first.json()))
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "trajectory_version_changed"
    assert "'default'" in refused.json()["error"]["message"] and "'v9'" in refused.json()["error"]["message"]
    view = stack.services.sessions.debug_view("s")
    assert (view.steps, view.in_flight, view.rejected_commits) == (1, 0, 0)
    (segment,) = await stack.segments("s")
    assert segment["num_turns"] == 1 and set(segment["weight_versions"]) == {None, "default"}


def test_version_stamps_match_on_epoch_and_known_versions() -> None:
    held = VersionStamp(3, "v1")
    assert held.matches(VersionStamp(3, None)) and held.matches(VersionStamp(3, "v1"))
    assert not held.matches(VersionStamp(4, None)) and not held.matches(VersionStamp(3, "v2"))
    assert VersionStamp(3, None).matches(VersionStamp(3, "anything"))
    error = TrajectoryVersionChangedError(held, VersionStamp(4, None))
    assert (error.code, error.http_status) == ("trajectory_version_changed", 400)
    assert "rollout epoch 3, weight version 'v1'" in str(error) and "rollout epoch 4, unknown version" in str(error)


async def test_registry_commit_with_another_stamp_changes_nothing_and_leaves_the_handle_to_drop(
    start_stack, mock_clock
) -> None:
    stack = await start_stack()
    sessions = stack.services.sessions
    answer = {"role": "assistant", "content": "hi"}
    ids = sessions.tokenizer.encode_text("hi") + [sessions.tokenizer.end_of_turn_id]
    first = await sessions.prepare("r", MESSAGES, chat_template_kwargs=NO_THINKING)
    second = await sessions.prepare("r", MESSAGES, chat_template_kwargs=NO_THINKING)
    await sessions.commit(first.handle, ids, None, ["a"] * len(ids), None, "stop", answer,
                          version_stamp=VersionStamp(0, "a"))
    with pytest.raises(TrajectoryVersionChangedError):
        sessions.check_version(second.handle, VersionStamp(1, None))
    with pytest.raises(TrajectoryVersionChangedError):
        await sessions.commit(second.handle, ids, None, ["b"] * len(ids), None, "stop", answer,
                              version_stamp=VersionStamp(0, "b"))
    assert sessions.debug_view("r").in_flight == 1  # still live: the caller drops it
    await sessions.drop(second.handle)
    view = sessions.debug_view("r")
    assert (view.steps, view.in_flight) == (1, 0)
