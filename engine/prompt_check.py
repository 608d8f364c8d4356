"""A request's prompt checked against the model: tokenized (or its ids checked against the vocabulary), within the
context window, and the completion budget that leaves.

The checks and messages are SGLang's (``tokenizer_manager.py`` ``_validate_one_request``, ``SamplingParams.verify``;
sglang-protocol.md §1): every failure is a ``ValueError``, which the app answers with a 400. The scheduler runs this
when a request passes the admission gate, before it checks the rid and registers the request.
"""

from __future__ import annotations

import attrs

from .generate_request import GenerateRequest
from .tokenizer import EngineTokenizer


@attrs.frozen
class CheckedPrompt:
    """What the checks found: the prompt's token ids and how many tokens may be generated after it."""

    input_ids: tuple[int, ...]
    #: the request's ``max_new_tokens`` clamped to the room left in the context window (all of it when unset)
    max_new_tokens: int


def check_prompt(request: GenerateRequest, tk: EngineTokenizer, context: int) -> CheckedPrompt:
    """Tokenize ``request.text`` or check ``request.input_ids``, check the token ids of ``token_ids_logprob`` and
    ``logit_bias``, and fit the prompt and the asked budget into ``context`` tokens; ``ValueError`` otherwise."""
    if request.text is not None:
        try:
            input_ids = tuple(tk.encode(request.text))
        except Exception as exc:  # e.g. lone surrogates from a JSON "\ud800" escape
            raise ValueError(f"The text could not be tokenized: {exc}") from None
        if not input_ids:
            raise ValueError("The input text is empty after tokenization.")
    else:
        assert request.input_ids is not None
        input_ids = request.input_ids
        bad = next((t for t in input_ids if not tk.is_valid_id(t)), None)
        if bad is not None:
            raise ValueError(f"Token id {bad} is out of vocabulary (vocab size {tk.vocab_size}).")
    for token_id in request.token_ids_logprob or ():
        if not tk.is_valid_id(token_id):
            raise ValueError(f"token_ids_logprob: token id {token_id} is out of vocabulary.")
    for token_id, _bias in request.sampling.logit_bias:
        if not tk.is_valid_id(token_id):
            # SGLang's SamplingParams.verify (its wording).
            raise ValueError(f"logit_bias must has keys in [0, {tk.vocab_size - 1}], got {token_id}.")
    prompt_len = len(input_ids)
    if prompt_len >= context:
        raise ValueError(
            f"The input ({prompt_len} tokens) is longer than the model's context length ({context} tokens)."
        )
    sampling = request.sampling
    if sampling.max_new_tokens_given and prompt_len + sampling.max_new_tokens > context:
        total = prompt_len + sampling.max_new_tokens
        raise ValueError(
            f"Requested token count exceeds the model's maximum context length of {context} tokens. "
            f"You requested a total of {total} tokens: {prompt_len} tokens from the input messages and "
            f"{sampling.max_new_tokens} tokens for the completion. Please reduce the number of tokens in the "
            "input messages or the completion to fit within the limit."
        )
    room = context - prompt_len
    budget = room if sampling.max_new_tokens is None else min(sampling.max_new_tokens, room)
    return CheckedPrompt(input_ids, budget)


__all__ = ["CheckedPrompt", "check_prompt"]
