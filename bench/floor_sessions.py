"""Multi-turn chat sessions for ``bench/floor_bench.py``: the per-turn growth and the memory phases.

A :class:`ChatSession` holds one conversation and echoes every answer back exactly as it was returned (content,
and ``reasoning_content`` when the server split it out), so a trajectory-recording server keeps one chain per
session. The same sessions run against the proxy and the reference gateway (both read ``session_id`` in the body).

- :func:`growth`: ``sessions`` conversations advance turn by turn (~``user_tokens``-token user turns, short
  answers), one request at a time, each timed by the server's exact CPU count; turns 91-100 are measured alongside
  turns 1-10 of as many fresh sessions (:func:`timed_growth`), so the machine's drift does not enter the ratio.
- :func:`memory`: ``sessions`` live conversations of ``turns`` turns, ``concurrency`` at a time; the server's
  RSS growth over the phase, and the tokens it now holds (last prompt + last answer of every session).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import Connection  # noqa: E402
from real_text import real_text  # noqa: E402
from servers import cpu_since, thread_cpu_seconds  # noqa: E402

def user_text(session: int, turn: int, words: int) -> str:
    """About ``words`` tokens of real text (``real_text.py``: a word list would compress 30x), different for every
    session and turn."""
    return f"Turn {turn} of session {session}: " + real_text(words, session * 1_009 + turn)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


@attrs.define
class ChatSession:
    """One conversation through a chat-completions server."""

    session_id: str
    index: int
    user_words: int
    extra: dict[str, Any] = attrs.field(factory=dict)
    messages: list[dict[str, Any]] = attrs.field(factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failures: int = 0
    #: the last failed answer (status and the start of its body), for the bench's report
    last_failure: str = ""

    def body(self) -> dict[str, Any]:
        turn = len(self.messages) // 2
        self.messages.append({"role": "user", "content": user_text(self.index, turn, self.user_words)})
        return {"model": "bench", "messages": self.messages, "session_id": self.session_id, **self.extra}

    def answered(self, status: int, payload: bytes) -> None:
        try:
            answer = json.loads(payload) if status == 200 else None
            message = answer["choices"][0]["message"] if answer else None
        except (ValueError, KeyError, IndexError, TypeError):
            message = None
        if message is None:
            self.failures += 1
            self.last_failure = f"HTTP {status}: {payload[:300]!r}"
            self.messages.pop()  # retry the same turn
            return
        echo = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("reasoning_content"):
            echo["reasoning_content"] = message["reasoning_content"]
        self.messages.append(echo)
        self.prompt_tokens = answer["usage"]["prompt_tokens"]
        self.completion_tokens = answer["usage"]["completion_tokens"]

    async def turn(self, conn: Connection) -> None:
        status, payload = await conn.request("POST", "/v1/chat/completions", json.dumps(self.body()).encode())
        self.answered(status, payload)


#: how long a timed request's window stays open after its answer: what the request leaves to do (the store's
#: writer, freeing its body) is counted in it, not in the next request, which may be another session's of another
#: length
SETTLE_SECONDS = 0.01


async def timed_growth(pid: int, old: Sequence[Callable[[], Awaitable[Any]]],
                       young: Sequence[Callable[[], Awaitable[Any]]], *, turns: int, window: int,
                       on_turn: Callable[[int], None] = lambda turn: None) -> list[float]:
    """CPU seconds of process ``pid`` per turn, summed over the sessions; each call of an element of ``old`` or
    ``young`` sends its session's next turn. Every request is timed alone by the scheduler's exact count
    (``servers.cpu_since``).

    The ``old`` sessions grow to ``turns - window`` turns one request at a time; then the first ``window`` turns of
    the ``young`` sessions (the same shape, fresh) alternate request by request with the ``old`` sessions' last
    ``window`` turns, so the two ends of the growth are measured in the same minutes: a shared machine drifts by
    more than the growth between a run's first minute and its last (issue 21 item 4). The first ``window`` entries
    are the young sessions', the rest the old ones'. ``on_turn(n)`` is called before the old sessions' turn ``n``
    (1-based; a profiler starts or stops there)."""
    if len(young) != len(old):
        raise ValueError("as many young sessions as old ones")

    async def timed(turn: Callable[[], Awaitable[Any]]) -> float:
        before = thread_cpu_seconds(pid)
        await turn()
        await trio.sleep(SETTLE_SECONDS)
        return cpu_since(pid, before)

    per_turn = [0.0] * turns
    for index in range(turns - window):
        on_turn(index + 1)
        for turn in old:
            spent = await timed(turn)
            if index >= window:  # the old sessions' first turns are not counted: the young ones' stand for them
                per_turn[index] += spent
    for index in range(window):
        on_turn(turns - window + index + 1)
        for young_turn, old_turn in zip(young, old, strict=True):
            per_turn[index] += await timed(young_turn)
            per_turn[turns - window + index] += await timed(old_turn)
    return per_turn


async def growth(port: int, pid: int, *, name: str, sessions: int, turns: int, user_tokens: int, window: int = 10
                 ) -> tuple[list[float], list[ChatSession], list[ChatSession]]:
    """CPU seconds of process ``pid`` per turn (all sessions together; turns 1 to ``window`` from fresh sessions
    measured alongside the last ``window``: :func:`timed_growth`), and the grown sessions. One request at a time:
    the issue's figure is one session's cost per request, and requests in flight together would share their fixed
    costs (``bench/turn_growth.py --lockstep`` gives that figure too). Returns the CPU per turn, the grown sessions
    and the fresh ones."""
    chats = [ChatSession(f"{name}.growth.{i}", i, user_tokens) for i in range(sessions)]
    fresh = [ChatSession(f"{name}.growth-fresh.{i}", sessions + i, user_tokens) for i in range(sessions)]
    conns = [Connection("127.0.0.1", port) for _ in chats + fresh]
    window = min(window, turns // 2)
    try:
        per_turn = await timed_growth(
            pid, [partial(chat.turn, conn) for chat, conn in zip(chats, conns, strict=False)],
            [partial(chat.turn, conn) for chat, conn in zip(fresh, conns[len(chats):], strict=True)],
            turns=turns, window=window)
    finally:
        for conn in conns:
            await conn.aclose()
    return per_turn, chats, fresh


async def memory(port: int, pid: int, *, name: str, sessions: int, turns: int, user_words: int,
                 concurrency: int, extra: dict[str, Any] | None = None, settle: float = 0.5) -> tuple[int, int, int]:
    """(RSS growth in bytes, tokens held at the end, failed requests) of ``sessions`` live sessions; the end is read
    ``settle`` seconds after the last answer (the last recordings land; a proxy trimming every second has trimmed)."""
    chats = [ChatSession(f"{name}.{i}", i, user_words, dict(extra or {})) for i in range(sessions)]
    queue = iter(chats)
    before = rss_bytes(pid)

    async def worker() -> None:
        conn = Connection("127.0.0.1", port)
        try:
            for chat in queue:
                for _ in range(turns):
                    await chat.turn(conn)
        finally:
            await conn.aclose()

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    await trio.sleep(settle)
    growth_bytes = rss_bytes(pid) - before
    tokens = sum(c.prompt_tokens + c.completion_tokens for c in chats)
    return growth_bytes, tokens, sum(c.failures for c in chats)
