"""Scripted generation: JSON-lines entries that say exactly what the "model" emits for a session.

One entry per line::

    {"session": "s1", "output": "<think>\\nhm\\n</think>\\n\\nHello!"}
    {"session": "*", "output": "fallback reply", "eos": false, "latency": 0.5, "token_rate": 20}

A request's session key is its ``X-SMG-Routing-Key`` header, else the body's ``routing_key``, else its rid. It
takes the next unused entry whose ``session`` equals that key (header/body key first, then rid); when none is
left, the next unused ``"*"`` entry; when none is left either, the default policy (``policy.py``).

An entry that was cut short (finished by ``abort`` or ``length`` before all its tokens were emitted) stays open
for its session: the next request of that session resumes it at the longest prefix of the entry's tokens that
its input ends with, the way a model continues a partial reply that is fed back to it. Several requests of one
session cut at once (the choices of an ``n > 1`` request, paused) leave several entries open: each continuation
resumes the one its input continues; a request that continues none takes the last one left open (the others are
dropped). An entry with a ``protocol_fault`` is used up by the one request it answered (the client gives up on the
broken answer): it is never resumed.

``protocol_fault`` makes the answer break SGLang's protocol (``faults.py`` applies it to the built chunks):
``fault_after`` is the output position it hits, see :data:`PROTOCOL_FAULTS`.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

WILDCARD = "*"

_KEYS = frozenset({
    "session", "output", "eos", "error_status", "drop_after", "latency", "token_rate", "protocol_fault", "fault_after",
})

#: The answers that break the protocol, by ``protocol_fault`` name. Each hits every chunk (or the non-streaming body)
#: that carries output token ``fault_after`` (0-based; default 0), so the tokens before it arrive intact.
PROTOCOL_FAULTS = {
    "token_out_of_vocab": "output token fault_after is the id vocab_size, one past the tokenizer's last id",
    "negative_token_id": "output token fault_after is the id -1",
    "logprobs_short": "output_token_logprobs holds one triple fewer than output_ids",
    "logprobs_mismatch": "the logprob triple of output token fault_after names another token id",
    "no_output_ids": "the chunk has no output_ids",
    "no_meta_info": "the chunk has no meta_info",
    "not_json": "the chunk's data line (non-streaming: the body) is cut in the middle of its JSON",
    "bad_finish_reason": "the final chunk's finish_reason has an unknown type (fault_after is not used)",
}


class ScriptError(ValueError):
    """A script line is not a valid entry."""


@attrs.frozen
class ScriptEntry:
    """One scripted reply and its optional per-entry faults."""

    #: Session key, or ``"*"`` for any request without a keyed entry left.
    session: str
    #: Raw model text, tokenized with the real tokenizer (reasoning and tool-call markup included).
    output: str
    #: Append the end-of-turn token ``<|im_end|>``; false = keep generating filler after the text (truncation).
    eos: bool = True
    #: Answer the request with this HTTP status instead of generating (the entry is consumed).
    error_status: int | None = None
    #: Streaming only: cut the connection (no ``[DONE]``) once this many tokens were produced.
    drop_after: int | None = None
    #: Extra seconds before the first token.
    latency: float = 0.0
    #: Tokens per second for this entry (overrides the engine's ``token_rate``).
    token_rate: float | None = None
    #: Break the protocol in the answer (a name of :data:`PROTOCOL_FAULTS`); None: a faithful answer.
    protocol_fault: str | None = None
    #: The output position the protocol fault hits.
    fault_after: int = 0
    #: Position in the script (line order), for logs.
    index: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any], index: int = 0) -> ScriptEntry:
        if not isinstance(data, Mapping):
            raise ScriptError(f"script entry {index}: expected an object, got {type(data).__name__}")
        unknown = sorted(set(data) - _KEYS)
        if unknown:
            raise ScriptError(f"script entry {index}: unknown keys {unknown}")
        session, output = data.get("session"), data.get("output")
        if not isinstance(session, str) or not session:
            raise ScriptError(f"script entry {index}: 'session' must be a non-empty string")
        if not isinstance(output, str):
            raise ScriptError(f"script entry {index}: 'output' must be a string")
        error_status = data.get("error_status")
        if error_status is not None and (not isinstance(error_status, int) or not 400 <= error_status <= 599):
            raise ScriptError(f"script entry {index}: 'error_status' must be an HTTP error status")
        drop_after = data.get("drop_after")
        if drop_after is not None and (not isinstance(drop_after, int) or drop_after < 0):
            raise ScriptError(f"script entry {index}: 'drop_after' must be an integer >= 0")
        latency = data.get("latency", 0.0)
        token_rate = data.get("token_rate")
        if not isinstance(latency, (int, float)) or latency < 0:
            raise ScriptError(f"script entry {index}: 'latency' must be a number >= 0")
        if token_rate is not None and (not isinstance(token_rate, (int, float)) or token_rate < 0):
            raise ScriptError(f"script entry {index}: 'token_rate' must be a number >= 0")
        eos = data.get("eos", True)
        if not isinstance(eos, bool):
            raise ScriptError(f"script entry {index}: 'eos' must be a boolean")
        protocol_fault = data.get("protocol_fault")
        if protocol_fault is not None and protocol_fault not in PROTOCOL_FAULTS:
            raise ScriptError(f"script entry {index}: 'protocol_fault' must be one of {sorted(PROTOCOL_FAULTS)}")
        fault_after = data.get("fault_after", 0)
        if not isinstance(fault_after, int) or isinstance(fault_after, bool) or fault_after < 0:
            raise ScriptError(f"script entry {index}: 'fault_after' must be an integer >= 0")
        return cls(
            session=session,
            output=output,
            eos=eos,
            error_status=error_status,
            drop_after=drop_after,
            latency=float(latency),
            token_rate=None if token_rate is None else float(token_rate),
            protocol_fault=protocol_fault,
            fault_after=fault_after,
            index=index,
        )


def load_script(path: Path | None, lines: Iterable[Mapping[str, Any]] = ()) -> list[ScriptEntry]:
    """Entries of a JSON-lines file (blank lines and ``#`` comments skipped), then the in-memory ``lines``."""
    raw: list[Any] = []
    if path is not None:
        for number, line in enumerate(Path(path).read_text().splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                raw.append(json.loads(line))
            except ValueError as exc:
                raise ScriptError(f"{path}:{number}: not JSON: {exc}") from None
    raw.extend(lines)
    return [ScriptEntry.from_json(item, index) for index, item in enumerate(raw)]


@attrs.define(eq=False)
class OpenEntry:
    """An entry cut short: its tokens and how many of them were emitted in total."""

    entry: ScriptEntry
    tokens: tuple[int, ...]
    emitted: int


@attrs.define(eq=False)
class ScriptBook:
    """Hands out script entries to requests, in order, per session key."""

    _keyed: dict[str, deque[ScriptEntry]] = attrs.field(factory=dict)
    _wildcard: deque[ScriptEntry] = attrs.field(factory=deque)
    _open: dict[str, list[OpenEntry]] = attrs.field(factory=dict)

    @classmethod
    def from_entries(cls, entries: Iterable[ScriptEntry]) -> ScriptBook:
        book = cls()
        for entry in entries:
            if entry.session == WILDCARD:
                book._wildcard.append(entry)
            else:
                book._keyed.setdefault(entry.session, deque()).append(entry)
        return book

    def take_open(self, key: str, fit: Callable[[OpenEntry], int] = lambda _entry: 0) -> OpenEntry | None:
        """The entry a previous request of ``key`` left unfinished, if any (removed from the book): the one with
        the best positive ``fit`` (how many of its tokens the request's input continues), else the last one left
        open, dropping the others."""
        entries = self._open.get(key)
        if not entries:
            return None
        scores = [fit(entry) for entry in entries]
        best = max(range(len(entries)), key=lambda index: (scores[index], -index))
        if scores[best] > 0:
            chosen = entries.pop(best)
            if not entries:
                del self._open[key]
            return chosen
        del self._open[key]
        return entries[-1]

    def take(self, keys: Iterable[str]) -> ScriptEntry | None:
        """The next unused entry for the first of ``keys`` that has one, else the next ``"*"`` entry."""
        for key in keys:
            queue = self._keyed.get(key)
            if queue:
                return queue.popleft()
        return self._wildcard.popleft() if self._wildcard else None

    def leave_open(self, key: str, entry: ScriptEntry, tokens: tuple[int, ...], emitted: int) -> None:
        self._open.setdefault(key, []).append(OpenEntry(entry, tokens, emitted))

    def remaining(self) -> dict[str, int]:
        """Unused entries per session key (``"*"`` included), for statistics."""
        counts = {key: len(queue) for key, queue in self._keyed.items() if queue}
        if self._wildcard:
            counts[WILDCARD] = len(self._wildcard)
        return counts
