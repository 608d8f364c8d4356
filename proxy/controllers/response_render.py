"""What a generation's client sees, rendered with ``proxy.api.render``: streamed chunks as tokens arrive, the last
chunks of a stream, or the whole ``chat.completion`` object.

Pure (no I/O). Logprobs and the token extension fields (``token_ids``, ``token_logprobs``, ``weight_versions``) of
a stream are attached to the next chunk that carries a delta: the parser holds text back while it could still be
markup, so tokens and deltas do not align one to one; tokens still unattached at the end get a chunk of their own
(an empty ``delta``). The end-of-turn tokens are not text: they are left out of the OpenAI ``logprobs`` (which
describe the content) but kept in the token extension fields (which are token-exact).

One choice of an ``n > 1`` answer (``choice_index``, ``multiplexed``): its chunks carry its index; its opening chunk
(the role) is not rendered with its first token but by the answer, which opens with every choice's opening chunk in
index order (``opening_chunk``); its stream ends with its finish chunk: the usage chunk and ``[DONE]`` are the whole
answer's (``proxy.controllers.choices``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import attrs

from proxy.api import (
    SSE_DONE,
    AssistantTurn,
    ChatCompletionRequest,
    ChunkFormat,
    CompletionMeta,
    Delta,
    TokenExtras,
    TokenLogprob,
    ToolCall,
    ToolCallDelta,
    TopLogprob,
    Usage,
    render_completion,
    sse_events,
)
from proxy.parsing import ContentDelta, ParsedMessage, ReasoningDelta
from proxy.upstream.events import Token


class ResponseRenderer:
    """Renders one response (one per generation; ``reset()`` when the step restarts from scratch)."""

    def __init__(
        self, request: ChatCompletionRequest, meta: CompletionMeta, tokenizer: Any, end_ids: Collection[int],
        *, token_ids_default: bool, choice_index: int = 0, multiplexed: bool = False,
    ) -> None:
        self.request = request
        self.meta = meta
        self._tokenizer = tokenizer
        self._end_ids = end_ids
        self._extras = request.wants_token_ids(token_ids_default)
        self.choice_index = choice_index
        #: one choice of several: no usage chunk, no ``[DONE]`` (the whole answer's)
        self.multiplexed = multiplexed
        self.format = attrs.evolve(
            ChunkFormat.for_request(request, meta, token_ids_default=token_ids_default),
            index=choice_index, include_usage=request.include_usage and not multiplexed,
        )
        # Tokens (with their versions) not yet carried by a chunk, when logprobs or extras are rendered.
        self._unattached: list[tuple[Token, str | None]] = []
        #: the first chunk (the assistant role) was rendered
        self.opened = False

    def reset(self) -> None:
        self._unattached.clear()

    # -- streaming -----------------------------------------------------------------------------------------------

    def token_events(
        self, tokens: Sequence[Token], version: str | None, deltas: Sequence[Any], prompt_ids: Sequence[int] | None
    ) -> bytes:
        """The SSE events the accepted tokens of one read produce (the opening chunk with the first token)."""
        if self.format.logprobs or self.format.token_extras:
            self._unattached.extend((token, version) for token in tokens)
        chunks = self._open(prompt_ids)
        chunks.extend(self._delta_chunks(deltas))
        return sse_events(chunks) if chunks else b""

    def final_events(
        self, deltas: Sequence[Any], finish_reason: str, usage: Usage, prompt_ids: Sequence[int] | None
    ) -> bytes:
        """The last deltas, the finish chunk, the usage chunk (when asked), ``[DONE]`` (the last two not for one
        choice of several)."""
        chunks = self._open(prompt_ids)
        chunks.extend(self._delta_chunks(deltas))
        if self._unattached:
            chunks.append(self.format.delta(self._attach(Delta())))
        chunks.extend(self.format.finish(finish_reason, usage))
        return sse_events(chunks) + (b"" if self.multiplexed else SSE_DONE)

    def _open(self, prompt_ids: Sequence[int] | None) -> list[dict[str, Any]]:
        if self.opened:
            return []
        self.opened = True
        return [] if self.multiplexed else [self.format.first(prompt_token_ids=prompt_ids)]

    def opening_chunk(self, prompt_ids: Sequence[int] | None) -> dict[str, Any]:
        """The opening chunk (the assistant role; the prompt ids with the token extension), for the answer of
        several choices to send itself."""
        return self.format.first(prompt_token_ids=prompt_ids)

    def _delta_chunks(self, deltas: Sequence[Any]) -> list[dict[str, Any]]:
        chunks = []
        for delta in deltas:
            if isinstance(delta, ReasoningDelta):
                api_delta = Delta(reasoning_content=delta.text)
            elif isinstance(delta, ContentDelta):
                api_delta = Delta(content=delta.text)
            else:
                api_delta = Delta(
                    tool_calls=(ToolCallDelta(delta.index, delta.id, delta.name, delta.arguments_fragment),)
                )
            chunks.append(self.format.delta(self._attach(api_delta)))
        return chunks

    def _attach(self, delta: Delta) -> Delta:
        """Give this delta the logprobs / token extras of the tokens no chunk carried yet."""
        if not self._unattached:
            return delta
        tokens, self._unattached = self._unattached, []
        logprobs = tuple(
            self.token_logprob(token.token_id, token.logprob, token.top_logprobs)
            for token, _ in tokens if token.logprob is not None and token.token_id not in self._end_ids
        )
        extras = None
        if self.format.token_extras:
            values = [token.logprob for token, _ in tokens]
            extras = TokenExtras(
                token_ids=[token.token_id for token, _ in tokens],
                token_logprobs=values if all(v is not None for v in values) else None,
                weight_versions=[version for _, version in tokens],
            )
        return attrs.evolve(delta, logprobs=logprobs, extras=extras)

    # -- non-streaming -------------------------------------------------------------------------------------------

    def completion(
        self, message: ParsedMessage, *, truncated: bool, usage: Usage, prompt_ids: Sequence[int] | None,
        ids: Sequence[int], logprobs: Sequence[float | None], versions: Sequence[str | None],
        tops: Sequence[tuple[tuple[int, float], ...]] = (),
    ) -> dict[str, Any]:
        """The ``chat.completion`` object."""
        turn = AssistantTurn(
            content=message.to_openai()["content"], reasoning_content=message.reasoning_content,
            tool_calls=tuple(ToolCall(c.id, c.name, c.arguments_json) for c in message.tool_calls),
            truncated=truncated,
        )
        entries = None
        if self.request.logprobs:
            alternatives = tops or ((),) * len(ids)
            entries = [
                self.token_logprob(token_id, value, top)
                for token_id, value, top in zip(ids, logprobs, alternatives, strict=True)
                if value is not None and token_id not in self._end_ids
            ]
        extras = None
        if self._extras:
            aligned = all(value is not None for value in logprobs)
            extras = TokenExtras(
                prompt_token_ids=prompt_ids, token_ids=ids, token_logprobs=logprobs if aligned else None,
                weight_versions=versions,
            )
        return render_completion(self.meta, turn, usage, logprobs=entries, extras=extras, index=self.choice_index)

    def token_logprob(self, token_id: int, logprob: float, top: Sequence[tuple[int, float]] = ()) -> TokenLogprob:
        """One token's OpenAI logprob entry, with up to the request's ``top_logprobs`` alternatives."""
        text, data = self._token_text(token_id)
        alternatives = []
        for alt_id, alt_logprob in top[: self.request.top_logprobs]:
            alt_text, alt_data = self._token_text(alt_id)
            alternatives.append(TopLogprob(alt_text, alt_logprob, alt_data))
        return TokenLogprob(text, logprob, data, tuple(alternatives))

    def _token_text(self, token_id: int) -> tuple[str, tuple[int, ...]]:
        data = self._tokenizer.token_bytes(token_id)
        return data.decode("utf-8", "replace"), tuple(data)


__all__ = ["ResponseRenderer"]
