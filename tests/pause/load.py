"""A bounded pause/resume load: many agents (half streaming), random client disconnects, pauses at random intervals.

This is the mix that once wedged the gate (issue 13): under ``--dressage-partial-rollout`` a streaming generation
was interrupted by a pause and continued, its client then left, and the next pause never returned. Everything is
real: the embedded engine and the proxy on ``127.0.0.1:0`` over HTTP, in real time (a pause race needs real
scheduling), with every random choice drawn from one seeded ``random.Random``.

:func:`run_load` returns a :class:`LoadReport`: every pause (acknowledged or not, how long it took), every agent's
committed turns (the ids the client received), and every session's export. ``test_pause_load.py`` asserts on it;
``python -m tests.pause.load --seconds 60 --agents 64`` runs a longer soak by hand.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from tests.pause.harness import NO_THINKING, PauseStack, serve_pause_stack

#: how long one pause may take before the load calls it wedged (far above any honest pause on a busy machine)
PAUSE_BOUND = 20.0


@attrs.define
class PauseRecord:
    index: int
    seconds: float | None  # None: not acknowledged within PAUSE_BOUND
    in_flight_left: int = 0
    force_cut: int = 0


@attrs.define
class Turn:
    """A committed step as its client saw it: the prompt and completion ids of the answer."""

    prompt_ids: list[int]
    completion_ids: list[int]


@attrs.define
class AgentRecord:
    session_id: str
    streaming: bool
    turns: list[Turn] = attrs.field(factory=list)
    disconnects: int = 0
    errors: list[str] = attrs.field(factory=list)


@attrs.define
class LoadReport:
    pauses: list[PauseRecord]
    agents: list[AgentRecord]
    exports: dict[str, list[dict[str, Any]]]
    gate_after: dict[str, Any]


def _sse_answer(raw: bytes) -> tuple[str, list[int], list[int], str | None] | None:
    """(text, prompt ids, completion ids, error code) of a finished SSE stream; None if it did not end."""
    text, prompt, completion, error = [], [], [], None
    done = False
    for frame in raw.split(b"\n\n"):
        frame = frame.strip()
        if not frame.startswith(b"data: "):
            continue
        payload = frame[len(b"data: "):]
        if payload == b"[DONE]":
            done = True
            continue
        chunk = json.loads(payload)
        if "error" in chunk:
            error = chunk["error"].get("code")
            continue
        if chunk.get("prompt_token_ids"):
            prompt = chunk["prompt_token_ids"]
        completion.extend(chunk.get("token_ids") or ())
        for choice in chunk.get("choices", ()):
            delta = choice.get("delta") or {}
            text.append(delta.get("content") or "")
    if not done:
        return None
    return "".join(text), prompt, completion, error


async def _agent(stack: PauseStack, record: AgentRecord, rng: random.Random, stop_at: float) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"count for {record.session_id}"}]
    headers = {"X-Session-Id": record.session_id, "content-type": "application/json"}
    async with httpx.AsyncClient(timeout=None, base_url=stack.url) as client:
        while trio.current_time() < stop_at:
            body = {
                "messages": messages, "chat_template_kwargs": NO_THINKING, "return_token_ids": True,
                "max_tokens": rng.randint(8, 48), "stream": record.streaming,
            }
            # About one request in four is abandoned by its client at a random moment.
            leave_after = rng.uniform(0.02, 0.6) if rng.random() < 0.25 else None
            answer = None
            with trio.move_on_after(leave_after if leave_after is not None else float("inf")) as scope:
                if record.streaming:
                    async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
                        raw = b"".join([piece async for piece in response.aiter_bytes()])
                        status = response.status_code
                    if status == 200:
                        answer = _sse_answer(raw)
                    else:
                        record.errors.append(f"{status} {raw[:200]!r}")
                else:
                    response = await client.post("/v1/chat/completions", json=body, headers=headers)
                    if response.status_code == 200:
                        data = response.json()
                        message = data["choices"][0]["message"]
                        answer = (message.get("content") or "", data.get("prompt_token_ids") or [],
                                  data.get("token_ids") or [], None)
                    else:
                        record.errors.append(f"{response.status_code} {response.text[:200]}")
            if scope.cancelled_caught:
                record.disconnects += 1
                continue
            if answer is None:
                record.errors.append("stream ended without [DONE]")
                continue
            text, prompt, completion, error = answer
            if error is not None:
                record.errors.append(f"stream error {error}")
                continue
            record.turns.append(Turn(list(prompt), list(completion)))
            messages = [*messages, {"role": "assistant", "content": text},
                        {"role": "user", "content": f"again {len(record.turns)}"}]


async def _trainer(stack: PauseStack, pauses: list[PauseRecord], rng: random.Random, stop_at: float) -> None:
    version = 0
    async with httpx.AsyncClient(timeout=None, base_url=stack.url) as client:
        while trio.current_time() < stop_at:
            await trio.sleep(rng.uniform(0.3, 1.5))
            record = PauseRecord(len(pauses), None)
            pauses.append(record)
            began = trio.current_time()
            with trio.move_on_after(PAUSE_BOUND):
                response = await client.post("/v1/rollout/pause", json={})
                assert response.status_code == 200, response.text
                record.seconds = trio.current_time() - began
                record.force_cut = len(response.json()["force_cut"])
            if record.seconds is None:
                record.in_flight_left = stack.gate.statistics().in_flight
                return  # wedged: the report says so; nothing else can go on
            await trio.sleep(rng.uniform(0.0, 0.2))  # the "weight update"
            version += 1
            response = await client.post("/v1/rollout/resume", json={"weight_version": f"v{version}"})
            assert response.status_code == 200, response.text


async def run_load(
    tokenizer_path: Path, *, seed: int, seconds: float, agents: int = 64, token_rate: float = 200.0,
    **config: Any,
) -> LoadReport:
    """Run the load for ``seconds`` (then let every client finish) and report."""
    rng = random.Random(seed)
    config.setdefault("partial_rollout", True)
    async with trio.open_nursery() as nursery:
        stack: PauseStack = await nursery.start(lambda task_status: serve_pause_stack(
            tokenizer_path, engine={"token_rate": token_rate, "seed": seed}, task_status=task_status, **config,
        ))
        records = [AgentRecord(f"load-{seed}-{index}", streaming=index % 2 == 0) for index in range(agents)]
        pauses: list[PauseRecord] = []
        stop_at = trio.current_time() + seconds
        async with trio.open_nursery() as load:
            for record in records:
                load.start_soon(_agent, stack, record, random.Random(rng.random()), stop_at)
            load.start_soon(_trainer, stack, pauses, random.Random(rng.random()), stop_at)
        # The gate is running again unless a pause wedged; finalize and read every session.
        gate_after = attrs.asdict(stack.gate.statistics())
        exports = {}
        if all(p.seconds is not None for p in pauses):
            for record in records:
                exports[record.session_id] = await stack.segments(record.session_id)
        nursery.cancel_scope.cancel()
    return LoadReport(pauses, records, exports, gate_after)


def problems(report: LoadReport) -> list[str]:
    """Everything the load found wrong: pauses that did not return or cut on their own; answers the export lost or
    changed; a gate not back to RUNNING with nothing in flight."""
    found = [f"pause {p.index} not acknowledged within {PAUSE_BOUND} s ({p.in_flight_left} in flight)"
             for p in report.pauses if p.seconds is None]
    found += [f"pause {p.index} had to cut {p.force_cut} request(s) itself" for p in report.pauses if p.force_cut]
    found += [f"{agent.session_id}: {error}" for agent in report.agents for error in agent.errors]
    gate = report.gate_after
    if (gate["state"], gate["in_flight"], gate["waiting"]) != ("RUNNING", 0, 0):
        found.append(f"gate after the load: {gate}")
    for agent in report.agents:
        segments = report.exports.get(agent.session_id, [])
        for number, turn in enumerate(agent.turns):
            whole = turn.prompt_ids + turn.completion_ids
            if not turn.prompt_ids or not turn.completion_ids:
                found.append(f"{agent.session_id} turn {number}: the answer carried no token ids")
                continue
            # The answer the client got is in the export exactly: its prompt then its completion, the completion
            # trained, in some segment (a segment holds a conversation; each of its steps is a prefix of it).
            if not any(segment["token_ids"][:len(whole)] == whole
                       and all(segment["loss_mask"][len(turn.prompt_ids):len(whole)]) for segment in segments):
                found.append(f"{agent.session_id} turn {number}: not exported exactly")
        steps = sum(segment["num_turns"] for segment in segments)
        if steps < len(agent.turns):
            found.append(f"{agent.session_id}: {steps} steps exported for {len(agent.turns)} answers")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", type=Path, default=None)
    args = parser.parse_args()
    from serving.tokenizer_files import ensure_tokenizers, model_tokenizer_path  # noqa: PLC0415 - command line only

    path = args.tokenizer or model_tokenizer_path("qwen3", ensure_tokenizers())
    report = trio.run(lambda: run_load(path, seed=args.seed, seconds=args.seconds, agents=args.agents))
    wedged = [p for p in report.pauses if p.seconds is None]
    slowest = max((p.seconds for p in report.pauses if p.seconds is not None), default=0.0)
    print(f"pauses {len(report.pauses)}, wedged {len(wedged)}, slowest {slowest:.2f} s; gate {report.gate_after}")
    print(f"turns {sum(len(a.turns) for a in report.agents)}, disconnects {sum(a.disconnects for a in report.agents)}")
    for problem in problems(report):
        print("PROBLEM", problem)


if __name__ == "__main__":
    main()
