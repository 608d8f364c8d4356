"""Typed values produced by the SGLang client: token events, the final event, finish reasons, routed experts.

Everything here is a frozen attrs value with no I/O. ``chunks.py`` builds them from SGLang's JSON chunks;
``client.py`` hands them to callers. The JSON shapes they come from are described in
``shared/docs/sglang-protocol.md`` §1.3 (finish reasons), §1.4 (meta_info, routed experts) and §1.6 (streaming).
"""

from __future__ import annotations

import base64
import binascii
import sys
from array import array
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import attrs

# --------------------------------------------------------------------------------------------------------------
# Finish reasons (§1.3)


@attrs.frozen
class FinishStop:
    """EOS, a ``stop_token_ids`` hit (``matched`` is the int token id) or a stop string (``matched`` is the str)."""

    matched: int | str | None = None

    kind: Literal["stop"] = attrs.field(default="stop", init=False, repr=False)


@attrs.frozen
class FinishLength:
    """``max_new_tokens`` (or the context) reached; ``length`` is the limit SGLang reports."""

    length: int | None = None

    kind: Literal["length"] = attrs.field(default="length", init=False, repr=False)


@attrs.frozen
class FinishAbort:
    """The request was aborted: by a user abort or a pause (``status_code`` None), or by a validation (400),
    overload (503) or internal (500) error. ``"Abort in waiting queue"`` is the queued / retracted form (§2.2)."""

    message: str = ""
    status_code: int | None = None
    err_type: str | None = None

    kind: Literal["abort"] = attrs.field(default="abort", init=False, repr=False)

    @property
    def is_error(self) -> bool:
        """True when SGLang attached an HTTP status, i.e. the abort reports a failure rather than a user abort."""
        return self.status_code is not None


FinishReason: TypeAlias = FinishStop | FinishLength | FinishAbort


def parse_finish_reason(obj: Any) -> FinishReason | None:
    """Parse ``meta_info.finish_reason``: None while running, else a typed value.

    Raises ``ValueError`` for a shape SGLang does not produce (the decoder turns it into a protocol error).
    """
    if obj is None:
        return None
    if not isinstance(obj, Mapping):
        raise ValueError(f"finish_reason is not an object: {obj!r}")
    kind = obj.get("type")
    if kind == "stop":
        matched = obj.get("matched")
        if matched is not None and not isinstance(matched, (int, str)):
            raise ValueError(f"finish_reason.matched is neither int nor str: {matched!r}")
        return FinishStop(matched)
    if kind == "length":
        length = obj.get("length")
        return FinishLength(length if isinstance(length, int) else None)
    if kind == "abort":
        status = obj.get("status_code")
        err_type = obj.get("err_type")
        return FinishAbort(
            message=str(obj.get("message") or ""),
            status_code=status if isinstance(status, int) else None,
            err_type=err_type if isinstance(err_type, str) else None,
        )
    raise ValueError(f"unknown finish_reason type: {kind!r}")


# --------------------------------------------------------------------------------------------------------------
# Routed experts (§1.4)

_LITTLE_ENDIAN = sys.byteorder == "little"


@attrs.frozen
class RoutedExperts:
    """MoE routing replay data of one request, kept as SGLang's raw bytes plus the row count.

    ``data`` is a C-contiguous little-endian int32 tensor of shape ``[num_rows, num_layers, topk]`` with
    ``num_rows = prompt_tokens + completion_tokens - 1 - routed_experts_start_len``: one row per *input*
    position from ``start_len`` on (the last sampled token is never fed forward, so it has no row).
    The response does not say how a row splits into layers × topk; pass ``num_layers`` (the model's
    ``num_hidden_layers``) to :meth:`shape` / :meth:`rows`. With numpy:
    ``np.frombuffer(re.data, "<i4").reshape(re.num_rows, num_layers, -1)``.
    """

    data: bytes = attrs.field(repr=lambda d: f"<{len(d)} bytes>")
    num_rows: int
    start_len: int = 0

    @classmethod
    def from_base64(cls, encoded: str, *, num_rows: int, start_len: int = 0) -> RoutedExperts:
        """Decode SGLang's base64 string; ``ValueError`` if it is not base64 or does not split into ``num_rows``."""
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"routed_experts is not valid base64: {exc}") from None
        if num_rows < 0:
            raise ValueError(f"routed_experts row count is negative ({num_rows}); check routed_experts_start_len")
        if len(data) % 4 or (num_rows == 0 and data) or (num_rows and len(data) % (4 * num_rows)):
            raise ValueError(f"routed_experts has {len(data)} bytes, which is not {num_rows} rows of int32")
        return cls(data, num_rows, start_len)

    @property
    def values_per_row(self) -> int:
        """``num_layers * topk``."""
        return len(self.data) // 4 // self.num_rows if self.num_rows else 0

    def values(self) -> array:
        """All values as a flat native ``array('i')`` (one C-level copy)."""
        values = array("i")
        if values.itemsize != 4:  # pragma: no cover - every platform CPython supports today has 4-byte int
            raise RuntimeError("array('i') is not 32-bit on this platform")
        values.frombytes(self.data)
        if not _LITTLE_ENDIAN:  # pragma: no cover
            values.byteswap()
        return values

    def shape(self, num_layers: int) -> tuple[int, int, int]:
        """``(num_rows, num_layers, topk)``; ``ValueError`` if a row does not split into ``num_layers``."""
        per_row = self.values_per_row
        if num_layers <= 0 or per_row % num_layers:
            raise ValueError(f"a routed-experts row of {per_row} values does not split into {num_layers} layers")
        return (self.num_rows, num_layers, per_row // num_layers)

    def rows(self, num_layers: int) -> tuple[tuple[tuple[int, ...], ...], ...]:
        """The nested ``[row][layer][k]`` expert ids (Python ints; use :meth:`values` or numpy for bulk work)."""
        rows, layers, topk = self.shape(num_layers)
        flat = self.values()
        per_row = layers * topk
        return tuple(
            tuple(tuple(flat[r * per_row + l * topk : r * per_row + (l + 1) * topk]) for l in range(layers))
            for r in range(rows)
        )


# --------------------------------------------------------------------------------------------------------------
# Events


@attrs.frozen
class Token:
    """One newly generated token, emitted exactly once per output position, in order."""

    index: int
    """0-based position in the output (not counting the prompt)."""
    token_id: int
    logprob: float | None
    """From ``meta_info.output_token_logprobs``; None when logprobs were not requested."""
    weight_version: str | None
    """``meta_info.weight_version`` of the chunk that delivered this token (SGLang labels chunks, not tokens)."""
    top_logprobs: tuple[tuple[int, float], ...] = ()
    """(token id, logprob) of the most likely tokens at this position, from ``meta_info.output_top_logprobs``
    (the request's ``top_logprobs_num``; empty when not asked)."""


@attrs.frozen
class Partial:
    """What a request produced before it failed: carried by stream-cut and other mid-stream errors."""

    rid: str | None
    output_ids: tuple[int, ...] = ()
    output_logprobs: tuple[float | None, ...] = ()
    weight_versions: tuple[str | None, ...] = ()


@attrs.frozen
class Finished:
    """The last event of a generation (and the result of the non-streaming ``generate``).

    ``output_ids`` / ``output_logprobs`` / ``weight_versions`` are the client's own accumulation of the token
    events, one entry per token; for the waiting-queue abort quirk (§2.2) they are *not* taken from the
    final chunk. ``completion_tokens`` is what SGLang reported (it can exceed ``len(output_ids)`` only when a
    queued/retracted abort hid tokens the stream never showed; see docs/upstream.md).
    """

    rid: str | None
    finish_reason: FinishReason
    output_ids: tuple[int, ...]
    output_logprobs: tuple[float | None, ...]
    weight_versions: tuple[str | None, ...]
    weight_version: str | None
    """The final chunk's ``meta_info.weight_version``."""
    prompt_tokens: int | None
    """Missing (None) for a request aborted while waiting or retracted."""
    completion_tokens: int | None
    cached_tokens: int | None
    routed_experts: RoutedExperts | None
    text: str
    meta_info: Mapping[str, Any] = attrs.field(eq=False, repr=False, factory=dict)
    """The final chunk's raw ``meta_info`` (extra keys: timings, ``num_retractions``, ...)."""
    output_top_logprobs: tuple[tuple[tuple[int, float], ...], ...] = ()
    """Each token's alternatives (``Token.top_logprobs``), one entry per token; empty when none were asked."""

    @property
    def partial(self) -> Partial:
        return Partial(self.rid, self.output_ids, self.output_logprobs, self.weight_versions)


Event: TypeAlias = Token | Finished


# --------------------------------------------------------------------------------------------------------------
# Results of the other endpoints


@attrs.frozen
class ModelInfo:
    """``GET /model_info`` (§3.5)."""

    model_path: str | None
    tokenizer_path: str | None
    weight_version: str | None
    is_generation: bool | None
    raw: Mapping[str, Any] = attrs.field(eq=False, repr=False, factory=dict)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ModelInfo:
        version = body.get("weight_version")
        return cls(
            model_path=body.get("model_path"),
            tokenizer_path=body.get("tokenizer_path"),
            weight_version=None if version is None else str(version),
            is_generation=body.get("is_generation"),
            raw=body,
        )


@attrs.frozen
class ModelCard:
    """One entry of ``GET /v1/models``."""

    id: str
    max_model_len: int | None
    raw: Mapping[str, Any] = attrs.field(eq=False, repr=False, factory=dict)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ModelCard:
        max_len = body.get("max_model_len")
        return cls(id=str(body["id"]), max_model_len=max_len if isinstance(max_len, int) else None, raw=body)


@attrs.frozen
class ToolCallItem:
    """One call found by ``/parse_function_call``; ``parameters`` is a JSON *string* as SGLang returns it."""

    tool_index: int
    name: str
    parameters: str


@attrs.frozen
class FunctionCallParse:
    """``POST /parse_function_call`` (§5.1)."""

    normal_text: str
    calls: tuple[ToolCallItem, ...]

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> FunctionCallParse:
        calls = tuple(
            ToolCallItem(
                tool_index=int(c.get("tool_index", -1)),
                name=str(c.get("name") or ""),
                parameters=c["parameters"] if isinstance(c.get("parameters"), str) else _json_dumps(c.get("parameters")),
            )
            for c in body.get("calls") or ()
        )
        return cls(normal_text=str(body.get("normal_text") or ""), calls=calls)


@attrs.frozen
class ReasoningParse:
    """``POST /separate_reasoning`` (§5.2): the reasoning part and the normal text."""

    reasoning_text: str
    text: str

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ReasoningParse:
        return cls(reasoning_text=str(body.get("reasoning_text") or ""), text=str(body.get("text") or ""))


@attrs.frozen
class WeightUpdateResult:
    """``{"success", "message", ...}`` of a weight-update or version endpoint, for one worker."""

    url: str
    success: bool
    message: str
    raw: Mapping[str, Any] = attrs.field(eq=False, repr=False, factory=dict)

    @classmethod
    def from_json(cls, url: str, body: Mapping[str, Any]) -> WeightUpdateResult:
        return cls(url=url, success=bool(body.get("success")), message=str(body.get("message") or ""), raw=body)


@attrs.frozen
class ClientStatistics:
    """``SGLangClient.statistics()``."""

    open_streams: int
    streams_started: int
    requests_sent: int


def _json_dumps(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)
