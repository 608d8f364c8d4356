"""Routing replay (R3, spec 9) across pauses: every request asks only for the rows not held yet
(``routed_experts_start_len``), rows are stored per token without duplicates (field notes 9), and the three export
shapes hold exactly ``len(token_ids) - 1`` rows equal to the engine's ``expected_row`` values.

Each row is recomputed from the engine's own record of the request that produced it: position ``p`` of a request
with input ``I`` and output ``O`` was fed forward under the prefill version (``token_versions[0]``) for ``p < len(I)``,
else under the version of output token ``p - len(I) + 1``."""

from __future__ import annotations

from typing import Any

import trio

from engine import expected_row
from proxy.trajectory.routed_experts import assemble_routed_experts
from tests.pause.harness import MESSAGES, WORDS, engine_idle, generated_at_least, generated_versions

SLOW = {"token_rate": 10.0}
R3 = {"use_rollout_routing_replay": True, "partial_rollout": True, "record_token_versions": True}


def engine_row_bytes(engine: Any, record: Any, position: int) -> bytes:
    """The row the engine computed for input ``position`` of ``record``, as little-endian int32 bytes."""
    config = engine.config
    tokens = record.input_ids + record.output_ids
    version = record.token_versions[0] if position < record.input_len else \
        record.token_versions[position - record.input_len + 1]
    row = expected_row(config.seed, position, tokens[position], version, config.num_layers, config.num_experts,
                       config.experts_per_token)
    return b"".join(expert.to_bytes(4, "little") for layer in row for expert in layer)


def check_rows(engine: Any, segment: dict, producers: list[tuple[int, int, Any]]) -> None:
    """The segment's rows: exactly N - 1, none missing, and position ``p`` equal to the row of the request that
    delivered it (``producers``: ``(start, end, record)`` ranges, contiguous from 0)."""
    rows = assemble_routed_experts(segment)
    count = len(segment["token_ids"]) - 1
    assert (rows.num_rows, rows.missing) == (count, ())
    assert producers[0][0] == 0 and producers[-1][1] == count
    assert all(previous[1] == following[0] for previous, following in zip(producers, producers[1:]))
    for start, end, record in producers:
        assert list(segment["token_ids"][start:end]) == list((record.input_ids + record.output_ids)[start:end])
        for position in range(start, end):
            assert rows.row(position) == engine_row_bytes(engine, record, position), position


async def paused_chat(stack: Any, session: str, count: int, *, version: str, **body: Any) -> tuple[dict, dict]:
    """A chat of ``session`` paused after ``count`` engine tokens, the engine relabelled ``version``, resumed.
    Returns (the chat answer, the pause answer)."""
    results: dict[str, Any] = {}

    async def chat() -> None:
        results["chat"] = await stack.chat(session, **body)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(chat)
        await generated_at_least(stack.engine, count)
        results["pause"] = (await stack.post("/v1/rollout/pause")).json()
        await engine_idle(stack.engine)
        stack.engine.update_weight_version(version, abort_all_requests=False)
        await stack.post("/v1/rollout/resume", {"weight_version": version})
    assert results["chat"].status_code == 200, results["chat"].text
    return results["chat"].json(), results["pause"]


async def test_a_resumed_generation_exports_contiguous_chunks_and_its_continuation_asks_from_len_minus_one(
    start_stack, mock_clock
) -> None:
    stack = await start_stack(script=[{"session": "r", "output": WORDS}], engine=SLOW, **R3)
    answer, paused = await paused_chat(stack, "r", 5, version="v2")
    assert answer["choices"][0]["message"]["content"] == WORDS
    first, second = stack.requests_of("r")
    # The pause read the aborted request to its abort finish: every token the engine generated is kept.
    assert first.finish_reason["type"] == "abort" and paused["tokens_kept"] == len(first.output_ids)
    assert not first.client_disconnected  # aborted by /abort_request, its stream read to the end
    assert second.input_ids == first.input_ids + first.output_ids
    (segment,) = await stack.segments("r")
    chunks = segment["routed_experts_chunks"]
    assert [(c["start_len"], c["num_rows"]) for c in chunks] == [
        (0, first.input_len + len(first.output_ids) - 1),
        (second.input_len - 1, len(second.output_ids)),          # len(input_ids) - 1: no overlapping row
    ]
    assert "routed_experts" not in segment and "routed_experts_parts" not in segment
    check_rows(stack.engine, segment, [
        (0, second.input_len - 1, first), (second.input_len - 1, len(segment["token_ids"]) - 1, second),
    ])
    kept = len(first.output_ids)
    versions = generated_versions(segment)
    assert versions == ["default"] * kept + ["v2"] * (len(versions) - kept)


async def test_without_worker_urls_the_cut_request_s_rows_are_asked_again_by_the_continuation(
    start_stack, mock_clock
) -> None:
    stack = await start_stack(script=[{"session": "c", "output": WORDS}], engine=SLOW, workers=False, **R3)
    answer, paused = await paused_chat(stack, "c", 5, version="v2")
    assert answer["choices"][0]["message"]["content"] == WORDS
    first, second = stack.requests_of("c")
    # The stream was closed at once (no worker to abort the rid): the final chunk with the rows never came, so the
    # continuation asked from the first position without a row (0), and its rows cover the kept tokens too.
    kept = paused["tokens_kept"]
    assert second.input_ids == first.input_ids + first.output_ids[:kept]
    assert first.client_disconnected  # the closed stream was the abort
    (segment,) = await stack.segments("c")
    assert isinstance(segment["routed_experts"], str)
    check_rows(stack.engine, segment, [(0, len(segment["token_ids"]) - 1, second)])


async def test_an_abort_that_cannot_reach_the_workers_falls_back_to_closing_the_stream(start_stack, mock_clock) -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    stack = await start_stack(script=[{"session": "d", "output": WORDS}], engine=SLOW, workers=[dead], **R3)
    answer, _ = await paused_chat(stack, "d", 5, version="v2")
    assert answer["choices"][0]["message"]["content"] == WORDS
    first, second = stack.requests_of("d")
    assert first.client_disconnected
    (segment,) = await stack.segments("d")
    check_rows(stack.engine, segment, [(0, len(segment["token_ids"]) - 1, second)])


async def test_a_multi_step_segment_exports_parts_whose_rows_continue_each_other(start_stack, mock_clock) -> None:
    stack = await start_stack(
        script=[{"session": "m", "output": "one two"}, {"session": "m", "output": WORDS}], engine=SLOW, **R3,
    )
    step1 = await stack.chat("m")
    assert step1.status_code == 200
    messages = [*MESSAGES, {"role": "assistant", "content": "one two"}, {"role": "user", "content": "more"}]
    answer, _ = await paused_chat(stack, "m", 4, version="v2", messages=messages)
    assert answer["choices"][0]["message"]["content"] == WORDS
    one, two_a, two_b = stack.requests_of("m")
    (segment,) = await stack.segments("m")
    assert "routed_experts" not in segment and "routed_experts_chunks" not in segment
    part1, part2 = segment["routed_experts_parts"]
    step1_length = one.input_len + len(one.output_ids)
    assert (part1["start_len"], part1["num_rows"], part1["is_first_step"]) == (0, step1_length - 1, True)
    assert isinstance(part1["routed_experts"], str)
    # Step 2 asked from step 1's last token (never fed forward in step 1), then its continuation from len - 1.
    assert part2["prefix_token_count"] == step1_length
    assert [(c["start_len"], c["num_rows"]) for c in part2["routed_experts_chunks"]] == [
        (step1_length - 1, two_a.input_len + len(two_a.output_ids) - step1_length),
        (two_b.input_len - 1, len(two_b.output_ids)),
    ]
    count = len(segment["token_ids"]) - 1
    check_rows(stack.engine, segment, [
        (0, step1_length - 1, one), (step1_length - 1, two_b.input_len - 1, two_a), (two_b.input_len - 1, count, two_b),
    ])
