"""The instrumentation of the interleaving tests: every upstream request and every token the proxy receives.

:class:`RecordingUpstream` stands between the real generation controller and the real SGLang client (it delegates
everything else, abort included). For each ``/generate`` it records a :class:`Piece`: which client's generation sent
it, the rid, ``input_ids``, the ``max_new_tokens`` and routed-experts start it asked for, and, for every token event
the controller's reader takes from the stream, the token id, the version SGLang reported, and the **gate's state at
that instant** (``GateController.statistics().state``). A non-streaming request's tokens all arrive with its answer:
they are recorded with the gate's state when the answer arrived.

Why the gate state at the token event is the honest witness of "no token is received between a pause acknowledgement
and the next resume": the gate is PAUSED exactly from the ``PauseAcknowledged`` effect (the moment the pause call is
released) to the next effective resume, and nothing else makes it PAUSED. The recorder reads it synchronously in the
reader's ``async for`` step, with no checkpoint between the event leaving the stream and the controller feeding it to
its machine (``TokensReceived``, which accepts and records it): so a token recorded while PAUSED is a token the proxy
took from upstream inside that window, and one taken there would be recorded as such. Mock-clock timestamps would be
weaker (many steps share one instant).

Which generation a request belongs to comes from a context variable (:data:`CLIENT`) that each client task sets
before it calls ``GenerationController.start``: trio copies the spawning task's context into the tasks it starts,
so the generation's driver task (which reads upstream) carries its client's name.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import Any

import attrs

from proxy.upstream.events import Finished, Token

#: the name of the client whose generation the current task works for
CLIENT: contextvars.ContextVar[str] = contextvars.ContextVar("interleavings_client", default="?")


@attrs.frozen
class Received:
    """One token the proxy's reader took from an upstream stream."""

    token_id: int
    #: ``meta_info.weight_version`` of the chunk that carried it
    reported_version: str | None
    #: the gate's state when the reader took it: RUNNING, PAUSING or PAUSED
    gate_state: str


@attrs.define(eq=False)
class Piece:
    """One upstream request of a generation, as sent and as received."""

    client: str
    rid: str
    input_ids: tuple[int, ...]
    max_new_tokens: int | None
    routed_experts_start_len: int | None
    tokens: list[Received] = attrs.field(factory=list)
    finished: Finished | None = None

    @property
    def ids(self) -> list[int]:
        return [token.token_id for token in self.tokens]


class _RecordingEvents:
    """The stream, recording each event as the reader takes it (a batch: each of its events, with the gate's state
    at that moment)."""

    def __init__(self, stream: Any, piece: Piece, gate: Any) -> None:
        self._stream = stream
        self._piece = piece
        self._gate = gate

    def __aiter__(self) -> _RecordingEvents:
        return self

    async def __anext__(self) -> Any:
        event = await self._stream.__anext__()
        self._record(event)
        return event

    async def receive_batch(self) -> list[Any]:
        batch = await self._stream.receive_batch()
        for event in batch:
            self._record(event)
        return batch

    def _record(self, event: Any) -> None:
        if isinstance(event, Token):
            self._piece.tokens.append(Received(event.token_id, event.weight_version, self._gate.statistics().state))
        elif isinstance(event, Finished):
            self._piece.finished = event


class _RecordingStream:
    """``generate_stream``'s async context manager, handing out the recording iterator."""

    def __init__(self, stream: Any, piece: Piece, gate: Any) -> None:
        self._stream = stream
        self._piece = piece
        self._gate = gate

    async def __aenter__(self) -> _RecordingEvents:
        return _RecordingEvents(await self._stream.__aenter__(), self._piece, self._gate)

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._stream.__aexit__(*exc)


@attrs.define(eq=False)
class RecordingUpstream:
    """The real SGLang client, with every ``generate_stream`` recorded as a :class:`Piece` (in the order sent)."""

    real: Any
    gate: Any
    pieces: list[Piece] = attrs.field(factory=list)

    def generate_stream(self, input_ids: Sequence[int], sampling_params: Any, **kwargs: Any) -> _RecordingStream:
        piece = self._piece(input_ids, sampling_params, kwargs)
        return _RecordingStream(self.real.generate_stream(input_ids, sampling_params, **kwargs), piece, self.gate)

    async def generate(self, input_ids: Sequence[int], sampling_params: Any, **kwargs: Any) -> Finished:
        """A non-streaming request: its tokens are all received when its answer arrives (the gate's state then)."""
        piece = self._piece(input_ids, sampling_params, kwargs)
        finished = await self.real.generate(input_ids, sampling_params, **kwargs)
        state = self.gate.statistics().state
        piece.tokens = [Received(token, version, state)
                        for token, version in zip(finished.output_ids, finished.weight_versions, strict=True)]
        piece.finished = finished
        return finished

    def _piece(self, input_ids: Sequence[int], sampling_params: Any, kwargs: dict[str, Any]) -> Piece:
        piece = Piece(
            CLIENT.get(), kwargs["rid"], tuple(input_ids), sampling_params.get("max_new_tokens"),
            kwargs.get("routed_experts_start_len"),
        )
        self.pieces.append(piece)
        return piece

    def of(self, client: str) -> list[Piece]:
        """The pieces of one client's generation, in the order they were sent."""
        return [piece for piece in self.pieces if piece.client == client]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


__all__ = ["CLIENT", "Piece", "Received", "RecordingUpstream"]
