"""A scenario: the real controllers on the embedded engine, driven by a list of operations hypothesis draws.

The stack is the proxy's own, minus its HTTP server: the embedded engine served on ``127.0.0.1:0`` (real sockets, in
the test's trio run), the real ``SGLangClient`` (wrapped by :class:`~tests.interleavings.recording.RecordingUpstream`),
``ProxyServices`` (gate controller, session registry, parser) and a ``GenerationController``. Each client does what
``proxy/routes/chat.py`` does (``ChatCompletionRequest.from_http``, ``controller.start``, then ``result()`` or
``first_output()`` + ``sse_body()``) in its own task and cancel scope: cancelling that scope is a client disconnect,
exactly as quart-trio cancels the handler (or closes the body) when the HTTP client goes away.

Operations (:data:`operations`, drawn by hypothesis): a chat (session, streaming or not, ``max_tokens``, a first turn
or an agent's next turn, which waits for the session's previous chat and continues its conversation); a pause once
some engine request has generated ``k`` tokens (a random token boundary), awaited or left running in the background;
a resume, after a weight update of drawn duration that loads new weights into the engine
(``update_weight_version(..., abort_all_requests=False)``) or keeps them; a client disconnect; a finalize; mock time
passing. At the end the trainer waits for its pause calls, resumes if paused, waits for every client and for the
engine, then finalizes and reads every session. Time is trio's mock clock (``autojump_clock``): the engine decodes 20
tokens per mock second, and nothing waits in real time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import strategies as st

from engine import EngineConfig, serve_engine
from proxy.api import ApiError, ChatCompletionRequest
from proxy.config import ProxyConfig
from proxy.controllers.gate import ResumeRefusedError
from proxy.controllers.generation import GenerationController
from proxy.controllers.generation_driver import Generation
from proxy.services import ProxyServices
from proxy.upstream.client import SGLangClient
from tests.interleavings.recording import CLIENT, RecordingUpstream

SESSIONS = ("s0", "s1")
FIRST_TURN = [{"role": "user", "content": "count"}]
NO_THINKING = {"enable_thinking": False}
#: engine tokens per mock second; a generation of a few tokens spans several pause points
TOKEN_RATE = 20.0
#: how long (mock seconds) a pause waits for its token boundary before pausing anyway
BOUNDARY_WAIT = 3.0
#: how long (mock seconds) the end of a scenario waits for every client; far more than any generation takes
SETTLE = 300.0


# ---- Operations ----------------------------------------------------------------------------------------------------


@attrs.frozen
class Chat:
    """A client sends a chat completion."""

    session: int
    stream: bool
    max_tokens: int
    #: False: the first turn. True: an agent's next turn: it waits for the session's previous chat to end, then
    #: continues the session's last answered conversation (the first turn if there is none)
    next_turn: bool


@attrs.frozen
class Pause:
    """The trainer pauses once some engine request has generated ``k`` tokens (or after BOUNDARY_WAIT); in the
    background (the next operations go on while the pause waits for its boundary and its acknowledgement), or not."""

    k: int
    background: bool = False


@attrs.frozen
class Resume:
    """The trainer resumes: after loading new weights into the engine (taking ``update_seconds``), or keeping them."""

    new_weights: bool
    update_seconds: float = 0.0


@attrs.frozen
class Disconnect:
    """A client goes away (its task's cancel scope is cancelled), if it has not finished."""

    client: int


@attrs.frozen
class Finalize:
    """The trainer finalizes a session."""

    session: int


@attrs.frozen
class Sleep:
    """Mock time passes before the next operation."""

    seconds: float


# Small budgets end by length (their chain closes); 24 lets the engine's reply stop by itself (it can be extended).
_chat = st.builds(Chat, session=st.integers(0, len(SESSIONS) - 1), stream=st.booleans(),
                  max_tokens=st.sampled_from([3, 4, 6, 8, 24, 24]), next_turn=st.booleans())
_pause = st.builds(Pause, k=st.integers(1, 3), background=st.booleans())
_resume = st.builds(Resume, new_weights=st.booleans(), update_seconds=st.sampled_from([0.0, 0.01, 0.2, 1.0]))
# Some sleeps are not multiples of the engine's decode step (0.05 s): requests then decode out of phase, so a pause
# meets them at different points of their steps.
_sleep = st.builds(Sleep, seconds=st.sampled_from([0.0, 0.01, 0.03, 0.05, 0.125, 0.5, 1.0, 2.0]))
_disconnect = st.builds(Disconnect, client=st.integers(0, 7))
# A scenario opens with one to three chats a fraction of a decode step apart (their requests decode out of phase),
# so that the operations after them have something to interleave with.
_opening = st.lists(
    st.tuples(_chat, st.builds(Sleep, seconds=st.sampled_from([0.0, 0.01, 0.02, 0.03]))).map(list),
    min_size=1, max_size=3,
).map(lambda pairs: [op for pair in pairs for op in pair])
# Then chats most often, pauses, resumes and time passing; a finalize rarely (it ends its session's rollout: every
# later chat of the session is refused, and the scenario finalizes every session at its end anyway).
operations = st.builds(
    lambda opening, rest: opening + rest,
    _opening,
    st.lists(
        st.one_of(
            *[_chat] * 6, *[_pause] * 3, *[_resume] * 3, *[_sleep] * 3, *[_disconnect] * 2,
            st.builds(Finalize, session=st.integers(0, len(SESSIONS) - 1)),
        ),
        min_size=2,
        max_size=18,
    ),
)


# ---- The clients and the trainer -----------------------------------------------------------------------------------


@attrs.define(eq=False)
class Client:
    """One chat completion, from the client's side, and the generation it got."""

    name: str
    op: Chat
    session: str
    messages: list[dict[str, Any]]
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    done: trio.Event = attrs.field(factory=trio.Event)
    generation: Generation | None = None
    #: the non-streaming answer, or the streaming payloads (SSE ``data:`` frames, parsed)
    answer: dict[str, Any] | None = None
    payloads: list[Any] = attrs.field(factory=list)
    error: ApiError | None = None
    disconnected: bool = False

    @property
    def content(self) -> str | None:
        """The answer's text as the client got it (None unless it got a complete answer)."""
        if self.answer is not None:
            return self.answer["choices"][0]["message"]["content"]
        if self.payloads and self.payloads[-1] == "[DONE]" and not any(_is_error(p) for p in self.payloads):
            return "".join(
                choice["delta"].get("content") or ""
                for payload in self.payloads if isinstance(payload, dict) for choice in payload.get("choices", ())
            )
        return None


def _is_error(payload: Any) -> bool:
    return isinstance(payload, dict) and "error" in payload


@attrs.define(eq=False)
class Scenario:
    """The stack, the clients and the trainer's record of one example."""

    partial_rollout: bool
    workers: bool
    controller: GenerationController
    services: ProxyServices
    upstream: RecordingUpstream
    engine: Any
    nursery: trio.Nursery
    clients: list[Client] = attrs.field(factory=list)
    #: what the trainer did, in order: ("pause", PauseResult), ("resume", ResumeResult, version),
    #: ("resume refused", error), ("finalize", session id, FinalizeResult)
    trainer: list[tuple] = attrs.field(factory=list)
    #: the trainer's view: a pause call returned and no resume followed
    paused: bool = False
    #: set when each pause call (foreground or background) has returned
    pausing: list[trio.Event] = attrs.field(factory=list)
    versions: int = 0
    #: the last answered conversation per session, the answer included (a next turn continues it)
    last_conversation: dict[str, list[dict[str, Any]]] = attrs.field(factory=dict)
    segments: dict[str, list[dict[str, Any]]] = attrs.field(factory=dict)
    #: the sessions the end of the run finalizes and reads (a subclass may use fewer)
    sessions: tuple[str, ...] = SESSIONS

    @property
    def gate(self) -> Any:
        return self.services.gate

    async def run(self, ops: list[Any]) -> None:
        """Carry out the operations, then settle: resume if paused, wait for every client, finalize and read."""
        for op in ops:
            await self.apply(op)
        # A pause that never returns, a client never answered, an engine request never ended: TooSlowError.
        with trio.fail_after(SETTLE):
            for pausing in self.pausing:
                await pausing.wait()
            if self.paused:
                await self.apply(Resume(new_weights=True))
            for client in self.clients:
                await client.done.wait()
            await self.engine.wait_until(lambda: not self.engine.active_requests())
        await trio.testing.wait_all_tasks_blocked()
        for sid in self.sessions:
            await self.services.sessions.finalize(sid)
            self.segments[sid] = await self.services.sessions.read(session_id=sid)

    async def apply(self, op: Any) -> None:
        if isinstance(op, Chat):
            self.start_client(op)
        elif isinstance(op, Pause):
            done = trio.Event()
            self.pausing.append(done)
            if op.background:
                self.nursery.start_soon(self.pause, op, done)
            else:
                await self.pause(op, done)
        elif isinstance(op, Resume):
            version = None
            if self.paused:
                # The weight update takes a while; the gate stays paused meanwhile.
                await trio.sleep(op.update_seconds)
            if self.paused and op.new_weights:
                # The trainer's weight update: the engine's version first (without aborting anything), then resume.
                self.versions += 1
                version = f"v{self.versions}"
                self.engine.update_weight_version(version, abort_all_requests=False)
            try:
                self.trainer.append(("resume", await self.gate.resume(version), version))
            except ResumeRefusedError as refused:
                # A pause (in the background) is still in progress: the gate refuses, nothing changes.
                self.trainer.append(("resume refused", refused))
            else:
                self.paused = False
        elif isinstance(op, Disconnect):
            if self.clients:
                client = self.clients[op.client % len(self.clients)]
                if not client.done.is_set():
                    client.disconnected = True
                    client.scope.cancel()
        elif isinstance(op, Finalize):
            sid = SESSIONS[op.session]
            self.trainer.append(("finalize", sid, await self.services.sessions.finalize(sid)))
        elif isinstance(op, Sleep):
            await trio.sleep(op.seconds)

    async def pause(self, op: Pause, done: trio.Event) -> None:
        """Wait for the token boundary, pause; the pause returns once every in-flight generation acknowledged."""
        try:
            with trio.move_on_after(BOUNDARY_WAIT):
                await self.engine.wait_until(
                    lambda: any(len(state.output_ids) >= op.k for state in self.engine.active_requests())
                )
            self.trainer.append(("pause", await self.gate.pause()))
            # Paused unless a resume came between the acknowledgement and this call's return (a background pause's
            # caller may wake after the next Resume ran): the trainer loads weights only into a paused gate.
            self.paused = self.gate.statistics().state == "PAUSED"
        finally:
            done.set()

    def start_client(self, op: Chat) -> None:
        sid = SESSIONS[op.session]
        previous = [c for c in self.clients if c.session == sid][-1:] if op.next_turn else []
        client = Client(f"c{len(self.clients)}", op, sid, list(FIRST_TURN))
        self.clients.append(client)
        self.nursery.start_soon(self._client, client, previous, name=client.name)

    async def _client(self, client: Client, previous: list[Client]) -> None:
        """What ``proxy/routes/chat.py`` does for one request, in the client's cancel scope."""
        CLIENT.set(client.name)
        try:
            with client.scope:
                for other in previous:
                    await other.done.wait()
                client.messages = await self.conversation(client)
                body = {
                    "model": "m", "messages": client.messages, "max_tokens": client.op.max_tokens,
                    "stream": client.op.stream, "return_token_ids": True, "chat_template_kwargs": NO_THINKING,
                }
                try:
                    request = ChatCompletionRequest.from_http(body, {"X-Session-Id": client.session})
                    client.generation = await self.controller.start(request, self.nursery)
                    if not client.op.stream:
                        client.answer = await client.generation.result()
                    else:
                        first = await client.generation.first_output()
                        raw = [first]
                        async for data in client.generation.sse_body(first):
                            if data is not first:
                                raw.append(data)
                        client.payloads = _sse_payloads(b"".join(raw))
                except ApiError as error:
                    client.error = error
            content = client.content
            if content is not None:
                self.last_conversation[client.session] = [*client.messages, {"role": "assistant", "content": content}]
        finally:
            client.done.set()


    async def conversation(self, client: Client) -> list[dict[str, Any]]:
        """The messages ``client`` sends, once the session's previous chat ended: a next turn continues the session's
        last answered conversation (the first turn if there is none). A subclass may choose otherwise."""
        if client.op.next_turn and client.session in self.last_conversation:
            return [*self.last_conversation[client.session], {"role": "user", "content": "more"}]
        return client.messages


def _sse_payloads(raw: bytes) -> list[Any]:
    frames = [frame[len(b"data: "):] for frame in raw.split(b"\n\n") if frame.strip()]
    return ["[DONE]" if frame == b"[DONE]" else json.loads(frame) for frame in frames]


async def run_scenario(
    tokenizer_path: Path, ops: list[Any], *, partial_rollout: bool, workers: bool, check: Any,
    scenario: type[Scenario] = Scenario, encode_off_loop: bool = False,
) -> Scenario:
    """Serve the stack, run ``ops`` in a ``scenario`` (a subclass may choose the conversations), call
    ``check(scenario)`` while the stack is still up, then tear it down. ``encode_off_loop``: every encode runs in a
    worker thread, as a long prompt's does (the request's task waits for it, and may be cancelled meanwhile)."""
    async with trio.open_nursery() as nursery:
        handle = await nursery.start(serve_engine, EngineConfig(
            port=0, tokenizer_path=tokenizer_path, token_rate=TOKEN_RATE, weight_version="v0",
        ))
        config = ProxyConfig(
            port=0, tokenizer_path=tokenizer_path, sglang_router_url=handle.url,
            sglang_worker_urls=(handle.url,) if workers else (), tool_call_parse_backend="local",
            reasoning_parse_backend="local", partial_rollout=partial_rollout, record_token_versions=True,
            use_rollout_routing_replay=True,
        )
        async with SGLangClient(handle.url, config.sglang_worker_urls) as real:
            services = ProxyServices.build(config, real)
            if encode_off_loop:
                services.sessions.config = attrs.evolve(services.sessions.config, thread_encode_chars=0)
            upstream = RecordingUpstream(real, services.gate)
            controller = GenerationController(
                config, services.sessions, upstream, services.parser, services.tokenizer, services.gate,
            )
            async with trio.open_nursery() as app_nursery:
                running = scenario(partial_rollout, workers, controller, services, upstream, handle.engine,
                                   app_nursery)
                await running.run(ops)
                check(running)
                app_nursery.cancel_scope.cancel()
        nursery.cancel_scope.cancel()
    return running


__all__ = [
    "Chat", "Client", "Disconnect", "Finalize", "Pause", "Resume", "SESSIONS", "Scenario", "Sleep", "operations",
    "run_scenario",
]
