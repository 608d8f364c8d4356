"""Fork types end to end through the async openai SDK (Qwen3): a sub-agent returning to its main chain,
best-of-N through concurrent requests, compaction (a recap and a mid-history splice), and an idempotent retry."""

from __future__ import annotations

import json
from typing import Any

import trio

from tests.e2e.harness import CALCULATOR_TOOLS, assistant_echo

SYSTEM = "You are a careful assistant."


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


async def ask(client: Any, session: str, messages: list[dict], **kwargs: Any) -> Any:
    completion = await client.chat.completions.create(
        model="m", messages=messages, tools=CALCULATOR_TOOLS, extra_headers={"X-Session-Id": session},
        extra_body={"return_token_ids": True}, **kwargs,
    )
    return completion


def by_step(segments: list[dict]) -> dict[tuple[int, ...], dict]:
    return {tuple(segment["step_ids"]): segment for segment in segments}


async def test_subagent_with_its_own_system_prompt_returns_to_the_main_chain(start_proxy) -> None:
    session = "subagent"
    outputs = [
        "I'll delegate the sum.\n" + call("add", a=2, b=2),   # main, step 1
        "2 plus 2 is 4.",                                        # sub-agent, step 2
        "The result is 4.",                                      # main again, step 3
    ]
    proxy = await start_proxy(script=[{"session": session, "output": o} for o in outputs])
    main = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2 + 2?"}]
    async with proxy.async_client() as client:
        first = await ask(client, session, main)
        sub = [{"role": "system", "content": "You are a sub-agent that adds."}, {"role": "user", "content": "2+2"}]
        answer = await ask(client, session, sub)
        assert answer.choices[0].message.content == "2 plus 2 is 4."
        main += [assistant_echo(first.choices[0].message),
                 {"role": "tool", "content": "4", "tool_call_id": first.choices[0].message.tool_calls[0].id}]
        last = await ask(client, session, main)
    assert last.choices[0].message.content == "The result is 4."
    step1, step3 = first.model_extra, last.model_extra
    # The main chain continued: step 3's prompt starts with step 1's prompt and generated tokens.
    prefix = step1["prompt_token_ids"] + step1["token_ids"]
    assert step3["prompt_token_ids"][: len(prefix)] == prefix
    segments = await proxy.segments(session)
    assert [segment["step_ids"] for segment in segments] == [[2], [1, 3]]  # commit order: main chain last
    sub_segment, main_segment = segments
    assert sub_segment["boundary_reason"] == "new_conversation"
    assert main_segment["boundary_reason"] == "session_start" and main_segment["num_turns"] == 2
    assert main_segment["token_ids"] == step3["prompt_token_ids"] + step3["token_ids"]
    generated = {index for index, bit in enumerate(main_segment["loss_mask"]) if bit}
    spans = [range(len(step1["prompt_token_ids"]), len(prefix)),
             range(len(step3["prompt_token_ids"]), len(main_segment["token_ids"]))]
    assert generated == {index for span in spans for index in span}


async def test_best_of_n_concurrent_samples_are_siblings_and_the_chosen_one_continues(start_proxy) -> None:
    session = "best-of-3"
    samples = ["Answer A.", "Answer B.", "Answer C."]
    proxy = await start_proxy(
        # Each sample spends 0.5 s before its first token, so the three requests are upstream at the same time.
        script=[{"session": session, "output": o, "latency": 0.5} for o in samples]
        + [{"session": session, "output": "Continuing from B."}],
    )
    prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Give me an answer."}]
    results: dict[str, Any] = {}
    async with proxy.async_client() as client:
        async def sample(index: int) -> None:
            completion = await ask(client, session, prompt)
            results[completion.choices[0].message.content] = completion

        overlapped = trio.Event()

        async def watch() -> None:
            engine = proxy.engine
            await engine.wait_until(lambda: engine.statistics().running == 3)
            overlapped.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            for index in range(3):
                nursery.start_soon(sample, index)
            with trio.move_on_after(30):
                await overlapped.wait()
            nursery.cancel_scope.deadline = trio.current_time() + 30
        # The three upstream requests ran at the same time: the proxy does not serialize a session's generations.
        assert overlapped.is_set()
        assert sorted(results) == samples
        chosen = results["Answer B."]
        follow = await ask(client, session, prompt + [assistant_echo(chosen.choices[0].message),
                                                      {"role": "user", "content": "Go on."}])
    assert follow.choices[0].message.content == "Continuing from B."
    prefix = chosen.model_extra["prompt_token_ids"] + chosen.model_extra["token_ids"]
    assert follow.model_extra["prompt_token_ids"][: len(prefix)] == prefix
    segments = await proxy.segments(session)
    assert len(segments) == 3
    lengths = sorted(len(segment["step_ids"]) for segment in segments)
    assert lengths == [1, 1, 2]
    continued = next(segment for segment in segments if len(segment["step_ids"]) == 2)
    assert continued["token_ids"] == follow.model_extra["prompt_token_ids"] + follow.model_extra["token_ids"]
    shared = len(chosen.model_extra["prompt_token_ids"])
    assert all(segment["token_ids"][:shared] == chosen.model_extra["prompt_token_ids"] for segment in segments)
    assert segments[-1] is continued  # the last interaction is last


async def test_compaction_recap_and_mid_history_splice(start_proxy) -> None:
    session = "compaction"
    outputs = [
        "Step one.\n" + call("add", a=1, b=2),
        "Step two.\n" + call("multiply", a=3, b=3),
        "Done: 9.",
        "Recap answer.",
        "Spliced answer.",
    ]
    proxy = await start_proxy(script=[{"session": session, "output": o} for o in outputs])
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Compute (1+2)*3."}]
    async with proxy.async_client() as client:
        first = await ask(client, session, history)
        call1 = first.choices[0].message.tool_calls[0]
        history += [assistant_echo(first.choices[0].message), {"role": "tool", "content": "3", "tool_call_id": call1.id}]
        second = await ask(client, session, history)
        call2 = second.choices[0].message.tool_calls[0]
        at_step_two = history + [assistant_echo(second.choices[0].message)]
        third = await ask(client, session, at_step_two + [{"role": "tool", "content": "9", "tool_call_id": call2.id}])
        assert third.choices[0].message.content == "Done: 9."
        recap = await ask(client, session, [history[0], {"role": "user", "content": "Recap: (1+2)*3 = 9. Confirm."}])
        assert recap.choices[0].message.content == "Recap answer."
        splice = await ask(client, session, at_step_two + [{"role": "user", "content": "Summary: multiplying."}])
        assert splice.choices[0].message.content == "Spliced answer."
    checkpoint_two = second.model_extra["prompt_token_ids"] + second.model_extra["token_ids"]
    assert splice.model_extra["prompt_token_ids"][: len(checkpoint_two)] == checkpoint_two
    segments = by_step(await proxy.segments(session))
    assert set(segments) == {(1, 2, 3), (4,), (1, 2, 5)}
    main, recap_segment, spliced = segments[(1, 2, 3)], segments[(4,)], segments[(1, 2, 5)]
    assert main["boundary_reason"] == "session_start"
    assert recap_segment["boundary_reason"] == "history_rewritten"
    assert spliced["forked_from_step"] == 2
    assert spliced["token_ids"] == splice.model_extra["prompt_token_ids"] + splice.model_extra["token_ids"]
    # Step 2's tokens are trained in the main chain only; in the splice they are context.
    assert sum(spliced["loss_mask"]) == len(splice.model_extra["token_ids"])


async def test_retry_with_an_identical_answer_refreshes_the_node_and_the_chain_continues(start_proxy) -> None:
    session = "retry"
    same = "Let me add.\n" + call("add", a=4, b=5)
    proxy = await start_proxy(script=[{"session": session, "output": o} for o in (same, same, "It is 9.")])
    prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "4+5?"}]
    async with proxy.async_client() as client:
        first = await ask(client, session, prompt)
        retry = await ask(client, session, prompt)
        # Deterministic tool-call ids: the retry's message is identical, so the trie node is refreshed.
        assert retry.choices[0].message.model_dump() == first.choices[0].message.model_dump()
        view = await proxy.debug(session)
        assert view["steps"] == 2 and view["trie"]["checkpoints"] == 1
        call_id = retry.choices[0].message.tool_calls[0].id
        final = await ask(client, session, prompt + [assistant_echo(retry.choices[0].message),
                                                     {"role": "tool", "content": "9", "tool_call_id": call_id}])
    assert final.choices[0].message.content == "It is 9."
    segments = await proxy.segments(session)
    # The retry replaced the first attempt at the chain's tip: one segment holds the answer once.
    assert [segment["step_ids"] for segment in segments] == [[2, 3]]
    assert segments[0]["token_ids"] == final.model_extra["prompt_token_ids"] + final.model_extra["token_ids"]
    assert segments[0]["boundary_reason"] == "session_start"
