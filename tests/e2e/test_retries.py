"""Retries are exact (spec 5.2/5.3, seed 001: same input, same output, same node): a real proxy on its embedded
engine, driven with the official openai SDK. A client that re-sends the same messages and gets the same assistant
message back refreshes the trie node, and the export holds that answer in one segment; the same conversation run
without the retry exports the same bytes but for the ids that name commits (step and generation ids)."""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.harness import CALCULATOR_TOOLS, assistant_echo

SESSION = "agent-7"
PROMPT = [{"role": "system", "content": "You are a careful assistant."},
          {"role": "user", "content": "What is 4 + 5, then times 3?"}]
FIRST = "I'll add first.\n<tool_call>\n" + json.dumps({"name": "add", "arguments": {"a": 4, "b": 5}}) + "\n</tool_call>"
SECOND = "Now I multiply.\n<tool_call>\n" + json.dumps(
    {"name": "multiply", "arguments": {"a": 9, "b": 3}}) + "\n</tool_call>"
LAST = "It is 27."

# The fields of a segment that name commits: the retry's commit has its own step and generation ids.
COMMIT_IDS = ("step_ids", "tip_step")
STEP_COMMIT_IDS = ("step_id", "generation_id")


async def ask(client: Any, messages: list[dict], **kwargs: Any) -> Any:
    return await client.chat.completions.create(
        model="m", messages=messages, tools=CALCULATOR_TOOLS, extra_headers={"X-Session-Id": SESSION},
        extra_body={"return_token_ids": True}, **kwargs,
    )


def tool_result(message: Any, content: str) -> dict:
    return {"role": "tool", "content": content, "tool_call_id": message.tool_calls[0].id}


def without_commit_ids(segment: dict) -> bytes:
    """The segment's canonical JSON bytes, without the ids that name commits."""
    kept = {key: value for key, value in segment.items() if key not in COMMIT_IDS}
    kept["steps"] = [{key: value for key, value in step.items() if key not in STEP_COMMIT_IDS}
                     for step in segment["steps"]]
    return json.dumps(kept, sort_keys=True, separators=(",", ":")).encode()


async def run(
    start_proxy: Any, *, retry_turn: int | None, stream_retry: bool = False
) -> tuple[Any, dict, list[dict]]:
    """Three turns of a calculator conversation; ``retry_turn`` (0, 1 or 2) is sent twice, as a client that timed
    out would, and the model answers the same. Returns the proxy, the session's debug view before finalize and its
    exported segments."""
    outputs = [FIRST, SECOND, LAST]
    if retry_turn is not None:
        outputs.insert(retry_turn, outputs[retry_turn])
    proxy = await start_proxy(script=[{"session": SESSION, "output": output} for output in outputs])
    messages = list(PROMPT)
    async with proxy.async_client() as client:
        for turn in range(3):
            answer = await ask(client, messages)
            if turn == retry_turn:
                again = await ask(client, messages, stream=True) if stream_retry else await ask(client, messages)
                if stream_retry:
                    chunks = [chunk async for chunk in again]
                    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
                        answer.choices[0].message.content)
                else:
                    assert again.choices[0].message.model_dump() == answer.choices[0].message.model_dump()
                    assert again.model_extra["token_ids"] == answer.model_extra["token_ids"]
            if turn < 2:
                messages += [assistant_echo(answer.choices[0].message),
                             tool_result(answer.choices[0].message, ["9", "27"][turn])]
    assert answer.choices[0].message.content == LAST
    view = await proxy.debug(SESSION)
    return proxy, view, await proxy.segments(SESSION)


async def test_a_retried_turn_exports_one_segment_byte_identical_to_the_run_without_the_retry(start_proxy) -> None:
    control_proxy, _, control = await run(start_proxy, retry_turn=None)
    proxy, view, retried = await run(start_proxy, retry_turn=1)
    # The engine generated the retried turn twice (no idempotency key: a real retry) ...
    assert len(proxy.requests_of(SESSION)) == 4 and len(control_proxy.requests_of(SESSION)) == 3
    assert view["steps"] == 4 and view["trie"]["checkpoints"] == 3 and view["branches"] == 1
    # ... and the export holds its answer once: one segment, the retry in the first attempt's place.
    assert [s["step_ids"] for s in control] == [[1, 2, 3]]
    assert [s["step_ids"] for s in retried] == [[1, 3, 4]]
    assert [s["generation_id"] for s in retried[0]["steps"]] == [f"{SESSION}#g{n}" for n in (1, 3, 4)]
    assert without_commit_ids(retried[0]) == without_commit_ids(control[0])


async def test_a_retried_first_turn_keeps_its_segment_start(start_proxy) -> None:
    _, _, control = await run(start_proxy, retry_turn=None)
    proxy, _, retried = await run(start_proxy, retry_turn=0, stream_retry=True)
    assert len(proxy.requests_of(SESSION)) == 4
    assert [s["step_ids"] for s in retried] == [[2, 3, 4]]
    # Still the session's start (the retry replaced the first attempt; it is not a resample beside it).
    assert retried[0]["boundary_reason"] == "session_start"
    assert without_commit_ids(retried[0]) == without_commit_ids(control[0])


async def test_a_retried_last_turn_replaces_the_tip(start_proxy) -> None:
    _, _, control = await run(start_proxy, retry_turn=None)
    _, _, retried = await run(start_proxy, retry_turn=2)
    assert [s["step_ids"] for s in retried] == [[1, 2, 4]]
    assert without_commit_ids(retried[0]) == without_commit_ids(control[0])
