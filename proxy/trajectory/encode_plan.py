"""What a step tokenizes, decided under the session's lock and run outside it: the request's trie keys
(``request_keys``), the encode decision (``EncodePlan``: TITO after a checkpoint, or a full encode) and the call into
the tokenizer (``tokenize_plan``)."""

from __future__ import annotations

import enum
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from proxy.tokenization.results import TitoFailure
from proxy.tokenization.tito import TitoTokenizer
from proxy.trajectory.boundaries import BoundaryReason
from proxy.trajectory.message_keys import MessageKey, MessageKeyError, message_key, reasoning_variant
from proxy.trajectory.packed_text import PackedText
from proxy.trajectory.session_errors import InvalidMessagesError
from proxy.trajectory.tokens import Step


#: ids converted per C call by id_array (about 7 ms of GIL each, measured on 2.5M ids)
_ID_SLICE = 65_536


class EncodeKind(enum.Enum):
    """How a step's context tokens are produced."""

    INCREMENTAL = "incremental"
    FULL = "full"


@attrs.frozen
class EncodePlan:
    """The TITO/encode decision of a prepare: what to tokenize, outside the lock."""

    kind: EncodeKind
    # The checkpoint an incremental encode appends to (None for a full encode).
    base: Step | None
    # Full: every message. Incremental: the messages after the checkpoint, and those up to it.
    messages: tuple[Any, ...]
    prior_messages: tuple[Any, ...]
    tools: tuple[Any, ...] | None
    template_kwargs: Mapping[str, Any]
    # Set for a full encode: why the step starts a segment.
    boundary_reason: BoundaryReason | None = None
    boundary_detail: str | None = None


def request_keys(
    messages: Sequence[Any], *, ignore_cch: bool = False, known: Sequence[Any] = ()
) -> tuple[list[MessageKey], list[str | PackedText | None]]:
    """The trie keys and reasoning variants of a request's messages: pure and O(request text), so the registry
    computes them before taking the session's lock. Raises InvalidMessagesError.

    ``known`` (``PrefixTrie.echoed_prefix``): for the request's first messages, the trie node storing the same
    message, whose key and variant are reused (None: compute them), so a turn keys only the messages its session
    does not hold yet."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence) or not messages:
        raise InvalidMessagesError("messages must be a non-empty list")
    held = len(known)
    if held and None not in known:  # the echoed history in two comprehensions: no Python loop step per message
        keys: list[MessageKey] = [node.key for node in known]
        variants: list[str | PackedText | None] = [node.variant for node in known]
        start = held
    else:
        keys, variants, start = [], [], 0
    try:
        for index in range(start, len(messages)):
            message = messages[index]
            node = known[index] if index < held else None
            if node is not None:
                keys.append(node.key)
                variants.append(node.variant)
                continue
            key = message_key(message, ignore_cch=ignore_cch)
            # A key's strings cache their hashes: hashing it here keeps the O(text) part out of the critical section.
            hash(key)
            keys.append(key)
            variants.append(reasoning_variant(message))
    except MessageKeyError as exc:
        raise InvalidMessagesError(str(exc)) from None
    return keys, variants


def tokenize_plan(tokenizer: TitoTokenizer, plan: EncodePlan) -> array[int] | TitoFailure:
    """The context ids of a plan (sync, CPU-bound): the TITO fragment after the checkpoint, or the full encode, as
    the ``array("i")`` the session stores (``Session.set_context`` then copies it in one memcpy).

    An incremental failure is returned (the caller restarts the segment); a full encode raises ``TitoError``.
    Only the checkpoint's last tokens matter to ``encode_incremental`` (it checks that they end with the end-of-turn
    token), so it gets the base step's last span instead of the materialized prefix (an adapter to its contract).
    """
    tools = list(plan.tools) if plan.tools is not None else None
    kwargs = dict(plan.template_kwargs)
    if plan.kind is EncodeKind.INCREMENTAL:
        result = tokenizer.encode_incremental(
            plan.base.span.last_ids(), list(plan.messages), prior_messages=list(plan.prior_messages), tools=tools,
            chat_template_kwargs=kwargs,
        )
        return id_array(result.ids) if result.ok else result
    return id_array(tokenizer.encode_full(list(plan.messages), tools, kwargs))


def id_array(ids: Sequence[int]) -> array[int]:
    """``array("i", ids)``, built slice by slice. One conversion of a 10 MB prompt's 2.5M ids is a single C call
    holding the GIL for ~0.3 s; in slices, a worker thread running this hands the GIL back to the event loop
    between two of them (``proxy/controllers/off_loop.py``)."""
    out = array("i")
    for start in range(0, len(ids), _ID_SLICE):
        out.extend(ids[start:start + _ID_SLICE])
    return out


__all__ = ["EncodeKind", "EncodePlan", "id_array", "request_keys", "tokenize_plan"]
