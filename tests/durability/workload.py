"""The scripted multi-session workload of the durability tests: agents and a trainer over HTTP, crash-tolerant.

Every session is one agent (:func:`run_agent`) holding a conversation with the proxy over real HTTP (httpx, no
SDK retries), one request at a time, then finalizing it; a trainer (:func:`run_trainer`) drains each finalized
session with two-phase reads (``/trajectory/read`` with ``drain``, then ``/trajectory/ack`` of the lease) and keeps
every segment by ``trajectory_id``. Answers come from the proxy's embedded engine's default policy, which depends
only on its seed and the conversation (docs/engine.md), so two runs of the workload are the same byte for byte.

Kinds of sessions (:data:`PLANS`): tool calls (the engine calls the calculator, the agent answers with the
result), plain chat (some streamed), a branch (the agent rewrites its history: a second segment), and a scripted
retry (one request sent twice: the proxy refreshes the node). Every request carries an ``Idempotency-Key``.

Crash tolerance, as a real agent would do it: a connection error or a 5xx means "send the same request again once
the proxy is back" (:meth:`ProxyProcess.wait_past`); the trainer's recipe is exactly-once by ``trajectory_id``: a
segment read again (a lost response, an expired lease) must carry the same bytes, and a session is done when every
trajectory id its finalize named was read and the session holds no segment any more.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
import httpx
import trio

from tests.durability.proxy_process import ProxyProcess
from tests.e2e.harness import CALCULATOR_TOOLS

NO_THINKING = {"enable_thinking": False}
#: every request's answer bound (the default policy's answers are shorter; a tool call is never cut)
MAX_TOKENS = 200
#: 5xx answers in a row a request tolerates (a restart in between resets nothing: a crash loop fails too)
MAX_SERVER_ERRORS = 50
#: seconds the trainer waits before reading a session again when its segments are leased by a lost read
RELEASE_POLL = 0.25


def canonical(value: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@attrs.frozen
class Plan:
    """One session's script."""

    session_id: str
    kind: str  # "tools", "chat", "branch"
    #: send the second request twice (a scripted retry, in every run)
    retry: bool = False
    #: stream the answers (chat sessions)
    stream: bool = False


def plans(count: int = 12) -> tuple[Plan, ...]:
    kinds = ("tools", "chat", "branch")
    return tuple(
        Plan(f"crash-{i:02d}", kinds[i % 3], retry=i % 4 == 3, stream=i % 3 == 1 and i % 2 == 1) for i in range(count)
    )


PLANS = plans()


@attrs.define
class Progress:
    """Completed HTTP exchanges of the run (the random killer aims at them), the retries they needed, and the
    answers the proxy replayed for an Idempotency-Key (``Idempotent-Replayed: true``: after a crash, a request whose
    step was durable before its answer was lost)."""

    exchanges: int = 0
    retries: int = 0
    replayed: int = 0
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def advance(self) -> None:
        self.exchanges += 1
        self._changed.set()
        self._changed = trio.Event()

    async def reach(self, exchanges: int) -> None:
        while self.exchanges < exchanges:
            await self._changed.wait()


@attrs.define
class Outcome:
    """What a run of the workload produced."""

    #: session id -> its finalize answer (the first one the agent received)
    finalized: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    #: trajectory id -> the segment's canonical JSON bytes, as the trainer read it
    segments: dict[str, bytes] = attrs.field(factory=dict)
    #: segments read more than once (a lost response, an expired lease), each with the same bytes
    reread: int = 0
    #: segments read more than once with DIFFERENT bytes: (trajectory id, first bytes, later bytes)
    changed: list[tuple[str, bytes, bytes]] = attrs.field(factory=list)
    #: finalized sessions the proxy answered 404 for when the trainer read them
    unknown_sessions: list[str] = attrs.field(factory=list)
    #: the proxy's /trajectory/stats once everything was drained
    final_stats: dict[str, Any] = attrs.field(factory=dict)


class Client:
    """HTTP calls that survive the proxy's deaths: a connection error or a 5xx is retried once the proxy is back."""

    def __init__(self, proxy: ProxyProcess, http: httpx.AsyncClient, progress: Progress) -> None:
        self.proxy, self.http, self.progress = proxy, http, progress

    async def post(self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
        errors = 0
        while True:
            generation, url = await self.proxy.current()
            try:
                response = await self.http.post(url + path, json=body, headers=headers)
            except httpx.TransportError:
                response = None
            if response is not None and response.status_code < 500:
                self.progress.replayed += response.headers.get("Idempotent-Replayed") == "true"
                self.progress.advance()
                return response
            if response is not None:
                errors += 1
                # A live proxy that keeps answering 5xx is a failure to report, not a crash to wait out.
                assert errors < MAX_SERVER_ERRORS, f"{path}: {response.status_code} {response.text}"
            self.progress.retries += 1
            await self.proxy.wait_past(generation)

    async def stream_chat(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """A streamed chat completion, reassembled into a message (content only: streamed sessions use no tools)."""
        while True:
            generation, url = await self.proxy.current()
            content: list[str] = []
            status = 0
            try:
                async with self.http.stream("POST", url + "/v1/chat/completions", json=body,
                                            headers=headers) as response:
                    status = response.status_code
                    replayed = response.headers.get("Idempotent-Replayed") == "true"
                    if status < 500:
                        done = False
                        async for line in response.aiter_lines():
                            if line == "data: [DONE]":
                                done = True
                            elif line.startswith("data: "):
                                chunk = json.loads(line[len("data: "):])
                                if "error" in chunk:
                                    raise AssertionError(f"stream error event: {chunk}")
                                for choice in chunk.get("choices", ()):
                                    content.append(choice["delta"].get("content") or "")
                        if not done:
                            # a cut stream (the proxy died while sending it): send it again
                            raise httpx.RemoteProtocolError("stream ended without [DONE]")
            except httpx.TransportError:
                status = 0
            if 0 < status < 500:
                self.progress.replayed += replayed
                self.progress.advance()
                return status, {"role": "assistant", "content": "".join(content)}
            self.progress.retries += 1
            await self.proxy.wait_past(generation)


def _tool_result(call: dict[str, Any]) -> dict[str, Any]:
    arguments = json.loads(call["function"]["arguments"])
    a, b = int(arguments.get("a", 0)), int(arguments.get("b", 0))
    value = a + b if call["function"]["name"] == "add" else a * b
    return {"role": "tool", "tool_call_id": call["id"], "content": str(value)}


def _echo(message: dict[str, Any]) -> dict[str, Any]:
    """The assistant message as the agent sends it back (no reasoning, as most agents do)."""
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["function"]["name"],
                                                             "arguments": c["function"]["arguments"]}}
            for c in message["tool_calls"]
        ]
    return out


class Agent:
    """One session's conversation (see :func:`run_agent`)."""

    def __init__(self, plan: Plan, client: Client) -> None:
        self.plan, self.client = plan, client
        self.requests = 0

    async def ask(self, messages: list[dict[str, Any]], *, tools: bool = False) -> dict[str, Any]:
        """One chat request (retried through crashes); the assistant message. The scripted retry sends the
        session's second request twice, under two keys (a real second sample)."""
        self.requests += 1
        message = await self._send(messages, tools, key=f"{self.plan.session_id}-r{self.requests}")
        if self.plan.retry and self.requests == 2:
            again = await self._send(messages, tools, key=f"{self.plan.session_id}-r{self.requests}-again")
            assert again == message, f"{self.plan.session_id}: the scripted retry was answered differently"
        return message

    async def _send(self, messages: list[dict[str, Any]], tools: bool, key: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "m", "messages": messages, "max_tokens": MAX_TOKENS}
        if tools:
            body["tools"] = CALCULATOR_TOOLS
        else:
            body["chat_template_kwargs"] = NO_THINKING
        headers = {"X-Session-Id": self.plan.session_id, "Idempotency-Key": key}
        if self.plan.stream:
            status, message = await self.client.stream_chat({**body, "stream": True}, headers)
        else:
            response = await self.client.post("/v1/chat/completions", body, headers)
            status = response.status_code
            message = response.json()["choices"][0]["message"] if status == 200 else response.json()
        assert status == 200, f"{self.plan.session_id} request {self.requests}: {status} {message}"
        return message

    async def tools_session(self) -> None:
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful calculator."}]
        for question in ("What is 17 plus 25?", "Now multiply that by 3."):
            messages.append({"role": "user", "content": question})
            for _ in range(3):
                message = await self.ask(messages, tools=True)
                messages.append(_echo(message))
                if not message.get("tool_calls"):
                    break
                messages.extend(_tool_result(call) for call in message["tool_calls"])

    async def chat_session(self, turns: int = 4) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
        for turn in range(turns):
            messages.append({"role": "user", "content": f"{self.plan.session_id}: tell me fact number {turn}."})
            messages.append(_echo(await self.ask(messages)))
        return messages

    async def branch_session(self) -> None:
        messages = await self.chat_session(turns=2)
        # The agent rewrites its history after the first answer: the proxy forks a second segment.
        messages = messages[:3] + [{"role": "user", "content": "Forget that; tell me something else."}]
        for turn in range(2):
            messages.append(_echo(await self.ask(messages)))
            messages.append({"role": "user", "content": f"And another thing ({turn})?"})


async def run_agent(plan: Plan, client: Client, outcome: Outcome, finalized: trio.MemorySendChannel) -> None:
    """The session's conversation, then its finalize; hands the session to the trainer."""
    agent = Agent(plan, client)
    await {"tools": agent.tools_session, "chat": agent.chat_session, "branch": agent.branch_session}[plan.kind]()
    body = {"session_id": plan.session_id, "instance_id": f"prompt-{plan.session_id}",
            "reward_info": {"reward": len(plan.session_id)}}
    response = await client.post("/session/finalize", body)
    assert response.status_code == 200, f"finalize {plan.session_id}: {response.status_code} {response.text}"
    result = response.json()
    outcome.finalized[plan.session_id] = result
    async with finalized:
        await finalized.send((plan.session_id, tuple(result["trajectory_ids"])))


async def drain_session(client: Client, session_id: str, expected: tuple[str, ...], outcome: Outcome) -> None:
    """The trainer's recipe (docs/api.md, "Exactly once"): drain (read with ``drain``), keep what is new by
    ``trajectory_id`` (a segment read again must carry the same bytes), acknowledge the lease; until every expected
    segment was read AND the session holds nothing any more (a lost ack, or a lease that expired during a restart,
    gives segments back: they are read again, skipped, and acknowledged then)."""
    while True:
        response = await client.post("/trajectory/read", {"session_id": session_id, "drain": True})
        if response.status_code == 404:
            # The proxy does not know the session any more: what it held is lost (compare() reports it).
            outcome.unknown_sessions.append(session_id)
            return
        assert response.status_code == 200, f"read {session_id}: {response.status_code} {response.text}"
        answer = response.json()
        for segment in answer["data"]:
            tid, data = segment["trajectory_id"], canonical(segment)
            if tid in outcome.segments:
                outcome.reread += 1
                if outcome.segments[tid] != data:
                    outcome.changed.append((tid, outcome.segments[tid], data))
            else:
                outcome.segments[tid] = data
        if answer.get("lease_id"):
            ack = await client.post("/trajectory/ack", {"lease_id": answer["lease_id"]})
            assert ack.status_code == 200, f"ack {session_id}: {ack.status_code} {ack.text}"
        if answer["data"]:
            continue
        if set(expected) <= set(outcome.segments):
            left = await client.post("/trajectory/read", {"session_id": session_id})
            assert left.status_code == 200, f"read {session_id}: {left.status_code} {left.text}"
            if not left.json()["data"]:
                return
        # Leased by a read whose answer (or ack) was lost: they come back when its lease expires.
        await trio.sleep(RELEASE_POLL)


async def run_trainer(client: Client, finalized: trio.MemoryReceiveChannel, outcome: Outcome) -> None:
    async with trio.open_nursery() as nursery, finalized:
        async for session_id, trajectory_ids in finalized:
            nursery.start_soon(drain_session, client, session_id, trajectory_ids, outcome)


async def run_workload(
    proxy: ProxyProcess, progress: Progress, *, workload: tuple[Plan, ...] = PLANS,
    on_done: Callable[[], None] | None = None,
) -> Outcome:
    """Every plan's agent at once, and the trainer; then the proxy's stats (everything must be drained)."""
    outcome = Outcome()
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as http:
        client = Client(proxy, http, progress)
        send, receive = trio.open_memory_channel[tuple[str, tuple[str, ...]]](len(workload))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_trainer, client, receive, outcome)
            async with send:
                for plan in workload:
                    nursery.start_soon(run_agent, plan, client, outcome, send.clone())
        if on_done is not None:
            on_done()
        while True:
            generation, url = await proxy.current()
            try:
                stats = await http.get(url + "/trajectory/stats")
            except httpx.TransportError:
                await proxy.wait_past(generation)
                continue
            outcome.final_stats = stats.json()
            return outcome


__all__ = ["Client", "Outcome", "PLANS", "Plan", "Progress", "canonical", "run_workload"]
