"""``Idempotency-Key`` on ``POST /v1/chat/completions``: a repeated request gets the recorded answer, not a new step.

Agents and SDKs retry on timeouts and 5xx with the same body; without a key, a retry generates again (and an
identical answer only refreshes its trie node, see ``docs/sessions.md``). With the header (IETF httpapi
idempotency-key draft), a repeat is exact: no generation, no step, the same bytes.

The rules (``docs/api.md`` has them for clients):

- **The key**: the ``Idempotency-Key`` request header, 1 to 255 printable ASCII characters (0x20-0x7E) once the
  surrounding whitespace is stripped; the draft's structured-field form (a quoted string, ``"..."`` with ``\\"``
  and ``\\\\`` escapes) is unquoted first, so ``"abc"`` and ``abc`` are one key. Anything else, an empty value, or
  the header sent twice: 400 ``invalid_idempotency_key`` (nothing else happens).
- **Scope and lifetime**: keys are per session (the request's session id) and live as long as the session's data:
  finalize, abort or a failed export frees them with its trie. A key sent to a session that is already finalized
  is not looked up: the request is refused as any other (``session_finalized``).
- **The fingerprint**: SHA-256 of the canonical request, the parsed JSON body serialized with sorted keys at every
  level, no whitespace, ASCII escapes (so key order, spacing and escaping do not matter, but values do: ``1`` and
  ``1.0`` differ, as do ``stream: true`` and ``false``). Headers are not part of it: the session id scopes the key;
  instance and turn ids only label the step the first request recorded.
- **First use**: the request runs normally. If its step **commits** and the whole answer was delivered (the
  ``chat.completion`` body, or every SSE byte through ``[DONE]``), that answer is recorded under the key: its exact
  bytes, its content type and the step id. A request that failed, was refused, or committed nothing (including a
  rejected late commit) records nothing, and the key is free again. A stream whose client went away before its end
  records nothing even if its step committed (the bytes were never all sent); a repeat then generates again, and an
  identical answer refreshes the node (exported once).
- **Repeat, same fingerprint, recorded**: 200 with the recorded bytes (streaming: the same SSE events, ids and
  finish, sent at once) and the header ``Idempotent-Replayed: true``; the engine is not called and no step is added.
- **Repeat while the first is still running**: it waits for the first to end, then replays its answer; if the first
  recorded nothing, the repeat runs normally (it takes the key; concurrent repeats wait for it in turn).
- **Same key, different fingerprint** (recorded or running): 422 ``idempotency_key_reused``; nothing happens.

Replays are answered before the session layer: a repeat of a recorded request is answered even when the session has
meanwhile reached its step limit. Only the first request's response headers that matter to the client are replayed
(the content type, and the stream headers for SSE).

**Across a restart** (``docs/storage.md``, "Recovery"). The recorded bytes live in memory only, but the key and
the fingerprint are journaled with the step the request committed, in the same durable record
(``proxy/trajectory/step_journal.py``: the route puts them on the request,
``ChatCompletionRequest.idempotency``, and the registry's prepare journals them). When a restarted proxy (or the next owner in a fleet) loads the session, the journal's
keys come back (:meth:`IdempotencyKeys.restore`) holding their committed step instead of bytes; a repeat is then
answered from the step (``proxy/controllers/committed_answer.py``: rendered again from the recorded message and
tokens, 200 with ``Idempotent-Replayed: true``, no generation, no step), and that rendering is what later repeats
get. A repeat with another body is 422 as before; a key whose step never became durable is unknown after the
restart, so its repeat runs normally. An ``n > 1`` request is not answered from its steps (its choices are journaled
as separate steps): a repeat after a restart runs again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import attrs
import trio

from proxy.api import ApiError
from proxy.api.errors import ErrorCode
from proxy.trajectory.session_replay import KeyedStep

#: the request header
HEADER = "Idempotency-Key"
#: the response header on a replayed answer
REPLAYED_HEADER = "Idempotent-Replayed"
#: error codes (not in ``proxy.api.errors.ErrorCode``: raised here only)
INVALID_KEY = ErrorCode.INVALID_IDEMPOTENCY_KEY.value
KEY_REUSED = ErrorCode.IDEMPOTENCY_KEY_REUSED.value
#: the longest key accepted
MAX_KEY_LENGTH = 255


def _invalid(message: str) -> ApiError:
    return ApiError.of(INVALID_KEY, message, HEADER)


def _unquote(quoted: str) -> str:
    """The content of a structured-field string (RFC 8941 sf-string) without its quotes."""
    out, escaped = [], False
    for char in quoted:
        if escaped:
            if char not in '"\\':
                raise _invalid(f"the {HEADER} header has an invalid escape \\{char}")
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            raise _invalid(f"the {HEADER} header has an unescaped quote inside its quoted string")
        else:
            out.append(char)
    if escaped:
        raise _invalid(f"the {HEADER} header ends with a lone backslash")
    return "".join(out)


def parse_key(raw: str) -> str:
    """The key of one header value, or ``invalid_idempotency_key`` (400)."""
    value = raw.strip(" \t")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = _unquote(value[1:-1])
    if not value:
        raise _invalid(f"the {HEADER} header is empty: send 1 to {MAX_KEY_LENGTH} printable ASCII characters")
    if len(value) > MAX_KEY_LENGTH:
        raise _invalid(f"the {HEADER} header has {len(value)} characters; at most {MAX_KEY_LENGTH} are allowed")
    bad = next((char for char in value if not 0x20 <= ord(char) <= 0x7E), None)
    if bad is not None:
        raise _invalid(f"the {HEADER} header must be printable ASCII; it holds {bad!r}")
    return value


def key_from_headers(headers: Any) -> str | None:
    """The request's key (None without the header); raises ``invalid_idempotency_key`` (400)."""
    if hasattr(headers, "getlist"):
        values = headers.getlist(HEADER)
    else:
        values = [value for name, value in dict(headers).items() if name.lower() == HEADER.lower()]
    if not values:
        return None
    if len(values) > 1:
        raise _invalid(f"send one {HEADER} header, not {len(values)}")
    return parse_key(values[0])


def fingerprint(body: Any) -> str:
    """SHA-256 (hex) of the canonical request: the parsed JSON body, sorted keys, compact, ASCII escapes."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()



@attrs.frozen
class RecordedResponse:
    """A committed request's answer, as it was sent."""

    body: bytes = attrs.field(repr=lambda body: f"<{len(body)} bytes>")
    content_type: str
    stream: bool
    # The step the first request committed.
    step_id: int


@attrs.define(eq=False)
class _Entry:
    """One key: the fingerprint of the request that holds it, its answer once recorded, and the end of its run."""

    fingerprint: str
    done: trio.Event = attrs.field(factory=trio.Event)
    recorded: RecordedResponse | None = None
    # Restored from the journal after a restart: the step the key committed (no bytes yet, see the docstring).
    committed: KeyedStep | None = None


@attrs.define(eq=False)
class Claim:
    """The right to run the request of a key: :meth:`record` its committed answer, or :meth:`release` the key."""

    _keys: IdempotencyKeys
    key: str
    _entry: _Entry

    @property
    def ended(self) -> bool:
        return self._entry.done.is_set()

    def record(self, response: RecordedResponse) -> None:
        """The request committed and its whole answer was sent: repeats replay it from now on."""
        if self.ended:
            return
        self._entry.recorded = response
        self._entry.done.set()

    def release(self) -> None:
        """The request ended without a recorded answer (idempotent; a no-op after :meth:`record`): the key is free
        again and a waiting repeat runs."""
        if self.ended:
            return
        if self._keys._entries.get(self.key) is self._entry:
            del self._keys._entries[self.key]
        self._entry.done.set()


@attrs.define(eq=False)
class IdempotencyKeys:
    """One session's keys (see the module docstring). Lives on the session and is freed with its data."""

    _entries: dict[str, _Entry] = attrs.field(factory=dict)

    def __len__(self) -> int:
        return len(self._entries)

    @classmethod
    def restore(cls, steps: Mapping[str, KeyedStep]) -> IdempotencyKeys:
        """The keys of a session loaded from its journal, each ended and holding the step it committed."""
        keys = cls()
        for key, step in steps.items():
            entry = keys._entries[key] = _Entry(step.fingerprint, committed=step)
            entry.done.set()
        return keys

    def remember(self, key: str, response: RecordedResponse) -> None:
        """The answer rendered from a restored key's step: later repeats get these bytes."""
        entry = self._entries.get(key)
        if entry is not None and entry.committed is not None and entry.recorded is None:
            entry.recorded = response

    async def claim(
        self, key: str, request_fingerprint: str, *, from_step: bool = True
    ) -> Claim | RecordedResponse | KeyedStep:
        """The recorded answer of ``key``, the step a restored key committed (``from_step``: the caller answers
        from it; else the request runs again), or a :class:`Claim` to run the request (after waiting for a run of
        the same request to end). Raises ``idempotency_key_reused`` (422) for another request under the same
        key."""
        while True:
            entry = self._entries.get(key)
            if entry is None or (entry.committed is not None and entry.recorded is None and not from_step
                                 and entry.fingerprint == request_fingerprint):
                entry = self._entries[key] = _Entry(request_fingerprint)
                return Claim(self, key, entry)
            if entry.fingerprint != request_fingerprint:
                raise ApiError.of(
                    KEY_REUSED,
                    f"the {HEADER} {key!r} was already used in this session for a different request; use a new key "
                    "for a new request",
                    HEADER,
                )
            if entry.recorded is not None:
                return entry.recorded
            if entry.committed is not None:
                return entry.committed
            # The same request is running: wait for its end, then replay it or run (if it recorded nothing).
            await entry.done.wait()


class RecordingBody:
    """A streaming response body that keeps every byte it passes on and, at its end, records the answer if the step
    committed (``committed_step()`` is not None); otherwise, or if it ends early, it releases the claim.

    An async iterator with ``aclose`` (quart closes the body it sent); if quart never starts it (the client left
    between the answer's start and its body), dropping it releases the claim, so a repeat is never left waiting.
    """

    def __init__(self, inner: AsyncIterator[bytes], claim: Claim, committed_step: Callable[[], int | None],
                 content_type: str) -> None:
        self._inner = inner
        self._claim = claim
        self._committed_step = committed_step
        self._content_type = content_type
        self._chunks: list[bytes] = []
        self._token = trio.lowlevel.current_trio_token()

    def __aiter__(self) -> RecordingBody:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self._inner.__anext__()
        except StopAsyncIteration:
            self._end(complete=True)
            raise
        except BaseException:
            self._end(complete=False)
            raise
        self._chunks.append(chunk)
        return chunk

    async def aclose(self) -> None:
        self._end(complete=False)
        close = getattr(self._inner, "aclose", None)
        if close is not None:
            await close()

    def _end(self, *, complete: bool) -> None:
        if self._claim.ended:
            return
        step_id = self._committed_step() if complete else None
        if step_id is None:
            self._claim.release()
        else:
            self._claim.record(RecordedResponse(b"".join(self._chunks), self._content_type, True, step_id))

    def __del__(self) -> None:
        # Never started nor closed: release the key on the trio thread (thread-safe; the run may be over).
        if not self._claim.ended:
            try:
                self._token.run_sync_soon(self._claim.release)
            except trio.RunFinishedError:
                pass


def replay_headers(response: RecordedResponse, stream_headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of a replayed answer."""
    headers = {REPLAYED_HEADER: "true"}
    if response.stream:
        headers.update(stream_headers)
    return headers


__all__ = [
    "HEADER", "INVALID_KEY", "KEY_REUSED", "MAX_KEY_LENGTH", "REPLAYED_HEADER", "Claim", "IdempotencyKeys",
    "KeyedStep", "RecordedResponse", "RecordingBody", "fingerprint", "key_from_headers", "parse_key",
    "replay_headers",
]
