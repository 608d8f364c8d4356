"""The generation controller: one per proxy; it starts one generation per chat-completions request (or choice).

Theory of operation (``docs/request-path.md`` has the diagrams and the decisions)
--------------------------------------------------------------------------------
``GenerationController.start(request, nursery)`` makes the request's
:class:`~proxy.controllers.generation_driver.Generation` and prepares it in the caller's task (the HTTP handler):
the session registry walks the trie and tokenizes (long full encodes in a worker thread), then context safety
decides the token budget. A refusal there raises ``ApiError`` before any byte is sent. Otherwise the machine is told
``Prepared``, asks the gate at once, and the generation's **driver task** starts in ``nursery`` (the app's nursery,
never the response body's task). The HTTP handler only waits on the generation's output channel: a non-streaming
handler for the one final item; a streaming response body drains everything buffered and writes it in one go
(stack-notes pitfalls 3 and 6).

A generation is three parts, each with one job: its driver (``proxy/controllers/generation_driver.py``: the
machine and the dispatch of its effects, the gate membership, the session's prepare and commit), its upstream
requests (``proxy/controllers/upstream_request.py``: start, read, the abort policy) and its output
(``proxy/controllers/step_output.py``: the token buffers, the text decode, the parser, the response channel).

The controller holds what every generation shares (the services, the end-of-generation token ids, the served model
name) and the request path's counters (:class:`GenerationControllerStatistics`).
"""

from __future__ import annotations

import collections
import time

import attrs
import trio

from proxy.api import ApiError, ChatCompletionRequest, CompletionMeta
from proxy.config import ProxyConfig
from proxy.controllers.context_window import ContextWindow
from proxy.controllers.gate import GateController
from proxy.controllers.generation_driver import Generation
from proxy.controllers.lifecycle import LifecycleController
from proxy.controllers.response_render import ResponseRenderer
from proxy.controllers.session_registry import SessionRegistry
from proxy.controllers.step_output import ChoiceSlot, StepOutput
from proxy.controllers.upstream_request import UpstreamRequest
from proxy.observability.metrics import NO_METRICS, MetricsHooks
from proxy.parsing import MessageParser
from proxy.random_ids import new_completion_id
from proxy.tokenization import TitoTokenizer
from proxy.upstream.client import SGLangClient
from proxy.upstream.errors import UpstreamError

#: how long the first request without a model name waits for the upstream's /v1/models
MODEL_NAME_TIMEOUT = 2.0
#: the end-of-generation special tokens that are not text (SGLang's ``text`` leaves them out)
END_TOKENS = ("<|im_end|>", "<|endoftext|>")


@attrs.frozen
class GenerationControllerStatistics:
    """Counters of the request path (reporting only)."""

    active: int
    started: int
    responded: int
    failed: int
    #: generations whose client left before an answer (their machine answered nobody)
    cancelled: int
    refused: int
    dropped_tokens: int


@attrs.define(eq=False)
class GenerationController:
    """Starts one :class:`~proxy.controllers.generation_driver.Generation` per chat-completions request (one
    controller per proxy process); the generations' ``GenerationHost``."""

    config: ProxyConfig
    sessions: SessionRegistry
    upstream: SGLangClient
    parser: MessageParser
    tokenizer: TitoTokenizer
    gate: GateController
    #: the model's context window (the services'; tests that build a controller by hand get one over ``upstream``)
    context_window: ContextWindow | None = None
    #: the process's lifecycle (the services'; tests that build a controller by hand get one of their own): it
    #: admits every generation and cuts those left when the shutdown's grace runs out
    lifecycle: LifecycleController | None = None
    #: where generations report their start, first token, tokens and end (the services'; none for hand-built ones)
    metrics: MetricsHooks = NO_METRICS
    #: the end-of-generation token ids (not text)
    end_ids: frozenset[int] = attrs.field(init=False)
    #: the request path's counters, kept by the generations
    counts: collections.Counter[str] = attrs.field(factory=collections.Counter, init=False)
    _model_name: str | None = attrs.field(default=None, init=False)
    _active: set[Generation] = attrs.field(factory=set, init=False)

    def __attrs_post_init__(self) -> None:
        ids = set()
        for text in END_TOKENS:
            encoded = self.tokenizer.encode_text(text)
            if len(encoded) == 1:
                ids.add(encoded[0])
        ids.add(self.tokenizer.end_of_turn_id)
        ids.update(getattr(self.tokenizer, "end_of_turn_ids", ()))  # GLM: every role token the model stops on
        self.end_ids = frozenset(ids)
        if self.context_window is None:
            self.context_window = ContextWindow(self.upstream, self.config.context_window, self.config.tokenizer_path)
        if self.lifecycle is None:
            self.lifecycle = LifecycleController(self.config.shutdown_grace, self.sessions.store)

    async def start(
        self, request: ChatCompletionRequest, nursery: trio.Nursery, *, choice: ChoiceSlot | None = None
    ) -> Generation:
        """Prepare the step, decide its budget, ask the gate, start its driver in ``nursery``; ``choice``: the
        generation is one choice of an ``n > 1`` answer (``proxy.controllers.choices``).

        Raises ``ApiError`` (nothing recorded, nothing sent upstream) when the proxy is shutting down, or the
        session layer or context safety refuses the request. A cancellation (the client left) propagates after the
        machine was told.
        """
        model = request.model or await self._served_model_name()
        generation = self._new_generation(request, model, nursery, choice)
        assert self.lifecycle is not None
        try:
            self.lifecycle.admit(generation)
        except ApiError:
            self.counts["refused"] += 1
            raise
        self.counts["started"] += 1
        try:
            await generation.prepare()
        except BaseException:
            self.lifecycle.ended(generation)
            raise
        self._active.add(generation)
        self.metrics.generation_started()
        nursery.start_soon(generation.drive, name=f"generation {generation.completion_id}")
        return generation

    def _new_generation(
        self, request: ChatCompletionRequest, model: str, nursery: trio.Nursery, choice: ChoiceSlot | None
    ) -> Generation:
        """A generation and its parts: its output (rendered under the answer's id and time: one choice of several
        shares its answer's) and its upstream requests."""
        if choice is None:
            completion_id, created = new_completion_id(), int(time.time())
        else:
            completion_id, created = choice.completion_id, choice.created
        config, tokenizer = self.config, self.tokenizer
        choice_index = 0 if choice is None else choice.index
        render = ResponseRenderer(
            request, CompletionMeta(completion_id, created, model), tokenizer, self.end_ids,
            token_ids_default=config.return_token_ids, choice_index=choice_index, multiplexed=choice is not None,
        )
        output = StepOutput(
            request, tokenizer, self.parser, self.end_ids, render, choice, completion_id,
            pause_wait_timeout=config.pause_wait_timeout,
        )
        upstream = UpstreamRequest(
            self.upstream, config, self.gate, nursery, request, choice_index, tokenizer.vocab_size, completion_id,
        )
        return Generation(self, request, nursery, choice, completion_id, output, upstream)

    def ended(self, generation: Generation) -> None:
        """A generation's driver ended (reported with its machine's final state, read from its report)."""
        self._active.discard(generation)
        self.metrics.generation_ended(
            generation.statistics().state.lower(), trio.current_time() - generation.began, len(generation.output.ids)
        )
        assert self.lifecycle is not None
        self.lifecycle.ended(generation)

    def statistics(self) -> GenerationControllerStatistics:
        counts = self.counts
        return GenerationControllerStatistics(
            active=len(self._active), started=counts["started"], responded=counts["responded"],
            failed=counts["failed"], cancelled=counts["cancelled"], refused=counts["refused"],
            dropped_tokens=counts["dropped_tokens"],
        )

    async def _served_model_name(self) -> str:
        """The upstream's first model id (asked once; ``"default"`` while the upstream cannot say)."""
        if self._model_name is None:
            with trio.move_on_after(MODEL_NAME_TIMEOUT):
                try:
                    cards = await self.upstream.models()
                except UpstreamError:
                    cards = ()
                if cards:
                    self._model_name = cards[0].id
        return self._model_name or "default"


__all__ = ["END_TOKENS", "GenerationController", "GenerationControllerStatistics", "MODEL_NAME_TIMEOUT"]
