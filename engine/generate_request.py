"""Parsing and validating a ``/generate`` body into frozen values (sglang-protocol.md §1.1, §1.2).

Every problem is a ``ValueError`` whose message becomes the 400 body ``{"error": {"message": ...}}`` (§1.5), so junk
input never reaches the scheduler and never produces a 500. Messages follow SGLang's wording where known.
"""

from __future__ import annotations

import uuid
from typing import Any

import attrs

from .constraints import Constraint

#: ``max_new_tokens`` when the key is omitted (SamplingParams default).
DEFAULT_MAX_NEW_TOKENS = 128

#: Upper bound of ``top_logprobs_num`` (an embedded-engine limit; SGLang has none).
MAX_TOP_LOGPROBS = 100

#: Every key SGLang's SamplingParams accepts (§1.2). Only some change what the engine does; see docs/engine.md.
KNOWN_SAMPLING_KEYS = frozenset(
    {
        "max_new_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
        "repetition_penalty", "min_new_tokens", "n", "sampling_seed", "logit_bias", "custom_params", "stop",
        "stop_token_ids", "stop_regex", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
        "no_stop_trim", "json_schema", "regex", "ebnf", "structural_tag", "stream_interval",
    }
)


class FieldTypeError(ValueError):
    """A top-level field has the wrong JSON type: rejected by request-model validation (always a plain 400, even
    for streaming requests), unlike the ValueErrors raised inside SGLang's ``generate_request``."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _bool(body: dict[str, Any], key: str, default: bool, error: type[ValueError] = ValueError) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if _is_int(value) and value in (0, 1):
        return bool(value)
    raise error(f"{key} must be a boolean, got {value!r}")


def _int(body: dict[str, Any], key: str, default: int, error: type[ValueError] = ValueError) -> int:
    value = body.get(key)
    if value is None:
        return default
    if not _is_int(value):
        raise error(f"{key} must be an integer, got {value!r}")
    return value


def _float(params: dict[str, Any], key: str, default: float) -> float:
    value = params.get(key)
    if value is None:
        return default
    if not _is_number(value):
        raise ValueError(f"{key} must be a number, got {value!r}")
    return float(value)


def _int_list(value: Any, key: str, error: type[ValueError] = ValueError) -> list[int]:
    if not isinstance(value, list) or not all(_is_int(item) for item in value):
        raise error(f"{key} must be a list of integers")
    return list(value)


@attrs.frozen
class SamplingParams:
    """The sampling parameters that matter to the engine; the rest are validated and ignored."""

    #: None = until the end of the context.
    max_new_tokens: int | None = DEFAULT_MAX_NEW_TOKENS
    max_new_tokens_given: bool = False
    temperature: float = 1.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    min_new_tokens: int = 0
    #: the request's json_schema / regex / ebnf / structural_tag (at most one), compiled when it is scheduled
    constraint: Constraint | None = None
    #: the ``sampling_params`` object as received (for the request log)
    received: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)
    #: ``logit_bias`` as (token id, bias) pairs: validated (keys against the vocabulary at admission, as SGLang's
    #: ``SamplingParams.verify``) and recorded, not applied (the scripted engine does not sample from logits)
    logit_bias: tuple[tuple[int, float], ...] = ()
    sampling_seed: int | None = None

    @classmethod
    def from_json(cls, params: Any) -> SamplingParams:
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise FieldTypeError(f"sampling_params must be an object, got {type(params).__name__}")
        unknown = sorted(set(params) - KNOWN_SAMPLING_KEYS)
        if unknown:
            raise ValueError(f"Unknown sampling parameters: {', '.join(map(str, unknown))}")
        given = "max_new_tokens" in params
        max_new_tokens = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        if max_new_tokens is not None:
            if not _is_int(max_new_tokens):
                raise ValueError(f"max_new_tokens must be an integer or null, got {max_new_tokens!r}")
            if max_new_tokens < 0:
                raise ValueError(f"max_new_tokens must be at least 0, got {max_new_tokens}.")
        temperature = _float(params, "temperature", 1.0)
        if temperature < 0:
            raise ValueError(f"temperature must be non-negative, got {temperature}.")
        top_p = _float(params, "top_p", 1.0)
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}.")
        min_p = _float(params, "min_p", 0.0)
        if not 0.0 <= min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {min_p}.")
        top_k = _int(params, "top_k", -1)
        if top_k < 1 and top_k != -1:
            raise ValueError(f"top_k must be -1 (disable), or at least 1, got {top_k}.")
        for key in ("frequency_penalty", "presence_penalty"):
            value = _float(params, key, 0.0)
            if not -2.0 <= value <= 2.0:
                raise ValueError(f"{key} must be in [-2, 2], got {value}.")
        repetition_penalty = _float(params, "repetition_penalty", 1.0)
        if not 0.0 < repetition_penalty <= 2.0:
            raise ValueError(f"repetition_penalty must be in (0, 2], got {repetition_penalty}.")
        min_new_tokens = _int(params, "min_new_tokens", 0)
        if min_new_tokens < 0:
            raise ValueError(f"min_new_tokens must be in [0, max_new_tokens], got {min_new_tokens}.")
        if max_new_tokens is not None and min_new_tokens > max_new_tokens:
            raise ValueError(
                f"min_new_tokens must be in [0, max_new_tokens({max_new_tokens})], got {min_new_tokens}."
            )
        n = _int(params, "n", 1)
        if n != 1:
            raise ValueError(f"n={n} (parallel sampling) is not supported by the embedded engine; use n=1")
        _int(params, "stream_interval", 1)
        stop = params.get("stop")
        if stop is None:
            stop_strings: tuple[str, ...] = ()
        elif isinstance(stop, str):
            stop_strings = (stop,) if stop else ()
        elif isinstance(stop, list) and all(isinstance(item, str) for item in stop):
            stop_strings = tuple(item for item in stop if item)
        else:
            raise ValueError("stop must be a string or a list of strings")
        stop_token_ids = params.get("stop_token_ids")
        stop_ids = () if stop_token_ids is None else tuple(_int_list(stop_token_ids, "stop_token_ids"))
        for key in ("ignore_eos", "skip_special_tokens", "no_stop_trim", "spaces_between_special_tokens"):
            _bool(params, key, False)
        constraint = Constraint.from_params(params)
        seed = params.get("sampling_seed")
        if seed is not None and not _is_int(seed):
            raise ValueError(f"sampling_seed must be an integer, got {seed!r}")
        return cls(
            max_new_tokens=max_new_tokens,
            max_new_tokens_given=given and max_new_tokens is not None,
            temperature=temperature,
            stop=stop_strings,
            stop_token_ids=stop_ids,
            ignore_eos=_bool(params, "ignore_eos", False),
            skip_special_tokens=_bool(params, "skip_special_tokens", True),
            no_stop_trim=_bool(params, "no_stop_trim", False),
            min_new_tokens=min_new_tokens,
            constraint=constraint,
            received=dict(params),
            logit_bias=_logit_bias(params.get("logit_bias")),
            sampling_seed=seed,
        )


def _logit_bias(value: Any) -> tuple[tuple[int, float], ...]:
    """SGLang's ``logit_bias``: an object from token ids (strings, ``int()``-parsable) to numbers."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise ValueError(f"logit_bias must be an object, got {type(value).__name__}")
    pairs = []
    for key, bias in value.items():
        try:
            token = int(key)
        except ValueError:
            raise ValueError(f"logit_bias keys must be token ids, got {key[:64]!r}") from None
        if not _is_number(bias):
            raise ValueError(f"logit_bias values must be numbers, got {bias!r}")
        pairs.append((token, float(bias)))
    return tuple(pairs)


@attrs.frozen
class GenerateRequest:
    """One validated single (non-batch) ``/generate`` request, before tokenization."""

    rid: str
    text: str | None
    input_ids: tuple[int, ...] | None
    sampling: SamplingParams
    stream: bool = False
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    token_ids_logprob: tuple[int, ...] | None = None
    return_text_in_logprobs: bool = False
    return_routed_experts: bool = False
    routed_experts_start_len: int = 0
    return_prompt_token_ids: bool = False
    routing_key: str | None = None
    rid_given: bool = False

    @classmethod
    def from_json(cls, body: Any) -> GenerateRequest:
        """Validate a decoded JSON body; unknown top-level keys are ignored (§1.1)."""
        if not isinstance(body, dict):
            raise FieldTypeError(f"The request body must be a JSON object, got {type(body).__name__}")
        text = body.get("text")
        input_ids = body.get("input_ids")
        if text is None and input_ids is None and body.get("input_embeds") is None:
            raise ValueError("Either text, input_ids or input_embeds should be provided.")
        if text is None and input_ids is None:
            raise ValueError("input_embeds is not supported by the embedded engine")
        if text is not None:
            # text wins over input_ids (_determine_batch_size looks at text first).
            if isinstance(text, list):
                raise ValueError("Batch requests (a list of texts) are not supported by the embedded engine")
            if not isinstance(text, str):
                raise FieldTypeError(f"text must be a string, got {type(text).__name__}")
            ids: tuple[int, ...] | None = None
        else:
            if isinstance(input_ids, list) and input_ids and all(isinstance(item, list) for item in input_ids):
                raise ValueError("Batch requests (a list of input_ids lists) are not supported by the embedded engine")
            ids = tuple(_int_list(input_ids, "input_ids", FieldTypeError))
            if not ids:
                raise ValueError("input_ids cannot be empty.")
        rid = body.get("rid")
        if rid is not None and not isinstance(rid, str):
            if isinstance(rid, list):
                raise ValueError("Batch requests (a list of rids) are not supported by the embedded engine")
            raise FieldTypeError(f"rid must be a string, got {type(rid).__name__}")
        top_logprobs_num = _int(body, "top_logprobs_num", 0, FieldTypeError)
        if not 0 <= top_logprobs_num <= MAX_TOP_LOGPROBS:
            raise ValueError(
                f"top_logprobs_num must be in [0, {MAX_TOP_LOGPROBS}] in the embedded engine, got {top_logprobs_num}"
            )
        token_ids_logprob = body.get("token_ids_logprob")
        routing_key = body.get("routing_key")
        if routing_key is not None and not isinstance(routing_key, str):
            raise FieldTypeError("routing_key must be a string")
        return cls(
            rid=rid if rid else uuid.uuid4().hex,
            rid_given=bool(rid),
            text=text,
            input_ids=ids,
            sampling=SamplingParams.from_json(body.get("sampling_params")),
            stream=_bool(body, "stream", False, FieldTypeError),
            return_logprob=_bool(body, "return_logprob", False, FieldTypeError),
            logprob_start_len=_int(body, "logprob_start_len", -1, FieldTypeError),
            top_logprobs_num=top_logprobs_num,
            token_ids_logprob=None if token_ids_logprob is None else tuple(
                _int_list(token_ids_logprob, "token_ids_logprob", FieldTypeError)
            ),
            return_text_in_logprobs=_bool(body, "return_text_in_logprobs", False, FieldTypeError),
            return_routed_experts=_bool(body, "return_routed_experts", False, FieldTypeError),
            routed_experts_start_len=_int(body, "routed_experts_start_len", 0, FieldTypeError),
            return_prompt_token_ids=_bool(body, "return_prompt_token_ids", False, FieldTypeError),
            routing_key=routing_key,
        )
