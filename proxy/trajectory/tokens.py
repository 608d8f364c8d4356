"""Token storage with structural sharing: each step stores only the tokens it adds; a sequence is a walk to the root.

A committed step (a *checkpoint*, spec section 2) is an immutable :class:`Step`: a pointer to the step it extends
(``base``; None when the step started from a full encode) and a :class:`TokenSpan` holding exactly what this step
added -- the context tokens (a TITO fragment, or the whole prompt of a full encode) followed by the generated tokens,
with the context loss mask, the logprobs and weight versions of the generated tokens, and their routed-expert rows.
The full token state of a checkpoint is the concatenation of the spans from the root step to it (:func:`path`),
rebuilt only when someone needs the ids (the upstream request, an export). So

- best-of-N siblings over one long prefix store that prefix once (``bench/trie_memory.py``);
- cloning a checkpoint for a new generation is O(1): the generation's private state (:class:`WorkingTokens`) is the
  base pointer plus the context tokens it adds itself;
- committing stores O(new tokens), never a copy of the prefix.

Compact storage: a span keeps its tokens as two ``bytes`` objects, not arrays (issue 21 item 5: an ``array`` is a
64-byte object plus a separate buffer; a ``bytes`` holds its data inline after 33 bytes, and a span had three arrays):
``context`` holds the context ids (native int32, 4 bytes each) and ``generated`` the generated ids, then their
logprobs, then one byte saying how the logprobs are stored (:data:`_NO_LOGPROBS`, 4: float32, 8: float64). Logprobs
are float32 when every value survives the round trip exactly (SGLang computes logprobs in float32, so its values
always do) and float64 otherwise -- either way the stored values are exactly the ones received
(:func:`exact_logprobs`). ``context_ids``, ``generated_ids`` and ``logprobs`` read them back as new ``array`` copies;
the request path copies the bytes straight into one array (:func:`path_ids`). The context mask is ``bytes`` or None
(all zeros, the default), the generated tokens' mask is implicitly 1, and weight versions are run-length encoded (a
version changes at most at a weight update). A span's context is a separate object so siblings that encoded the same
context (best-of-N over one prompt, which has no checkpoint to share) hold one between them: the session deduplicates
them per prompt node. A full encode that begins with a path the session holds (a new segment after an answer cut
short, spec 5.4) stores only what follows that path, as a :class:`PrefixedContext` naming it
(``proxy/trajectory/prefix_share.py``); ``context`` reads its ids back.

Nothing here is mutated after construction: a step is shared by every branch built on it.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence
from itertools import groupby
from struct import unpack_from
from typing import Any, TypeVar

import attrs


@attrs.frozen
class RoutedChunk:
    """Routed-expert rows of one upstream request (spec 9): SGLang's raw little-endian int32 bytes.

    ``num_rows`` rows of ``num_layers * topk`` values, one per input position from ``start_len`` on (the upstream
    client's ``RoutedExperts`` has these three attributes; :meth:`of` copies any such object).
    """

    data: bytes = attrs.field(repr=lambda d: f"<{len(d)} bytes>")
    num_rows: int
    start_len: int = 0

    @classmethod
    def of(cls, chunk: Any) -> RoutedChunk:
        """A chunk from any object with ``data``, ``num_rows`` and ``start_len`` (e.g. upstream ``RoutedExperts``)."""
        if isinstance(chunk, RoutedChunk):
            return chunk
        return cls(bytes(chunk.data), int(chunk.num_rows), int(getattr(chunk, "start_len", 0) or 0))


def _ids(values: Iterable[int]) -> array:
    """Token ids as a compact int32 array."""
    return array("i", values)


def pack_ids(ids: Iterable[int] | array | bytes) -> bytes:
    """Token ids as a span stores them (native int32 ``bytes``): ``bytes`` as they are, an ``array('i')`` without a
    Python int per id, anything else through one."""
    if isinstance(ids, bytes):
        return ids
    if isinstance(ids, array) and ids.typecode == "i":
        return ids.tobytes()
    return _ids(ids).tobytes()


def exact_logprobs(values: Sequence[float]) -> array:
    """The smallest array that gives back exactly ``values``: float32 (4 bytes) when lossless, else float64."""
    single = array("f", values)
    return single if single.tolist() == list(values) else array("d", values)


K = TypeVar("K")
V = TypeVar("V")


def _shared(table: dict[K, V], key: K, build: Callable[[], V], limit: int) -> V:
    """The one immutable value ``table`` holds for ``key`` (built on first use), as ints and strings are shared;
    bounded: once ``table`` holds ``limit`` values, a new one is built per use (issue 21 item 5)."""
    value = table.get(key)
    if value is None:
        value = build()
        if len(table) < limit:
            table[key] = value
    return value


#: Runs of one version (nearly every step: a version changes only at a weight update) are shared between steps: a
#: step's runs were two tuples of 112 bytes, and steps of the same length under the same version are common.
_ONE_RUNS: dict[tuple[str | None, int], tuple[tuple[str | None, int]]] = {}
_ONE_RUNS_MAX = 4096


def run_length(versions: Sequence[str | None]) -> tuple[tuple[str | None, int], ...]:
    """``[a, a, b]`` -> ``((a, 2), (b, 1))``. Immutable, and may be shared with other steps."""
    if not versions:
        return ()
    first = versions[0]
    if versions.count(first) == len(versions):  # one version throughout, checked in C
        key = (first, len(versions))
        return _shared(_ONE_RUNS, key, lambda: (key,), _ONE_RUNS_MAX)
    return tuple((version, len(list(group))) for version, group in groupby(versions))


def expand_runs(runs: Sequence[tuple[str | None, int]]) -> list[str | None]:
    """The inverse of :func:`run_length`."""
    out: list[str | None] = []
    for version, count in runs:
        out.extend([version] * count)
    return out


#: the last byte of a span's ``generated`` when it holds no logprobs (else the logprobs' item size: 4 or 8)
_NO_LOGPROBS = 0
_LOGPROB_TYPES = {4: "f", 8: "d"}
#: ``generated`` of a span that generated nothing and has no logprobs
_NOTHING_GENERATED = bytes([_NO_LOGPROBS])


def _pack_generated(ids: array, logprobs: array | None) -> bytes:
    """``generated``: the ids, their logprobs (if any), and the logprobs' item size (0 without)."""
    if logprobs is None:
        return ids.tobytes() + _NOTHING_GENERATED
    return b"".join((ids.tobytes(), logprobs.tobytes(), bytes([logprobs.itemsize])))


def _unpack(data: bytes | memoryview, typecode: str) -> array:
    values = array(typecode)
    values.frombytes(data)
    return values


@attrs.frozen(eq=False, weakref_slot=False)  # no weakrefs: 16 bytes less a span (issue 21 item 5)
class TokenSpan:
    """What one step adds to its base's tokens: context tokens, then generated tokens (storage: module docstring).

    ``context`` may be shared with sibling steps that encoded the same context (best-of-N over one prompt: the
    session stores the prompt's ids once). Invariants: ``context_mask`` is None or one 0/1 byte per context token;
    logprobs are none or one per generated token; the version runs cover the generated tokens.
    """

    # The context ids, native int32; or, for a full encode that repeats the start of a path the session holds, a
    # PrefixedContext naming that path and holding only the rest (``context`` reads the ids either way).
    stored_context: bytes | PrefixedContext = attrs.field(repr=lambda b: f"<{_stored_count(b)} ids>")
    # The generated ids (native int32), their logprobs, and the logprobs' item size (0: none) as the last byte.
    generated: bytes = attrs.field(default=_NOTHING_GENERATED, repr=lambda b: f"<{len(b)} bytes>")
    # Run-length weight versions of the generated tokens.
    version_runs: tuple[tuple[str | None, int], ...] = ()
    # The rare fields (a client's context mask, routed-expert rows, a step's notes), or None when all are unset.
    extras: SpanExtras | None = None

    @property
    def context_mask(self) -> bytes | None:
        """One 0/1 byte per context token; None means 0 for every one (spec 3.1: the default without a
        client-supplied mask)."""
        return (self.extras or _NO_EXTRAS).context_mask

    @property
    def routed_experts(self) -> tuple[RoutedChunk, ...]:
        """The routed-expert rows of the upstream requests that made this span (spec 9); empty without."""
        return (self.extras or _NO_EXTRAS).routed_experts

    @property
    def context(self) -> bytes:
        """The context ids (native int32 ``bytes``): the stored ones, or a prefixed context's ids built anew."""
        stored = self.stored_context
        return stored if type(stored) is bytes else stored.ids().tobytes()

    @property
    def context_count(self) -> int:
        """How many context tokens the span holds."""
        return _stored_count(self.stored_context)

    @property
    def generated_count(self) -> int:
        """How many generated tokens the span holds."""
        generated = self.generated
        return (len(generated) - 1) // (4 + generated[-1])

    @property
    def span_length(self) -> int:
        """All the tokens the span adds (a :class:`Step`'s ``length`` is its whole path's)."""
        return self.context_count + self.generated_count

    @property
    def context_ids(self) -> array:
        """The context ids, as a new ``array('i')``."""
        return _unpack(self.context, "i")

    @property
    def generated_ids(self) -> array:
        """The generated ids, as a new ``array('i')``."""
        return _unpack(self.generated_bytes(), "i")

    @property
    def logprobs(self) -> array | None:
        """One logprob per generated token as a new ``array`` ('f' or 'd', as stored); None when absent or not
        aligned (all-or-none, spec 5.5)."""
        generated = self.generated
        itemsize = generated[-1]
        if itemsize == _NO_LOGPROBS:
            return None
        return _unpack(memoryview(generated)[4 * self.generated_count:-1], _LOGPROB_TYPES[itemsize])

    def generated_bytes(self) -> memoryview:
        """The generated ids' bytes (native int32), without a copy."""
        return memoryview(self.generated)[:4 * self.generated_count]

    def last_generated_id(self) -> int | None:
        """The last generated id; None when the span generated nothing."""
        count = self.generated_count
        return unpack_from("=i", self.generated, 4 * (count - 1))[0] if count else None

    def ids(self) -> list[int]:
        """Context then generated ids, as a new list."""
        return self.context_ids.tolist() + self.generated_ids.tolist()

    def last_ids(self) -> array:
        """The span's last tokens: its generated ids, or its context when it generated nothing."""
        return self.generated_ids if self.generated_count else self.context_ids

    def context_mask_values(self) -> list[int]:
        """The loss mask of the context tokens."""
        if self.context_mask is None:
            return [0] * self.context_count
        return list(self.context_mask)

    def versions(self) -> list[str | None]:
        """One weight version per generated token."""
        return expand_runs(self.version_runs)

    def nbytes(self, *, shared_context: bool = False) -> int:
        """Bytes of the token payload (ids, masks, logprobs, routed rows); without the context ids when they are
        shared with a sibling."""
        stored = self.stored_context
        size = 0 if shared_context else len(stored if type(stored) is bytes else stored.tail)
        size += len(self.generated) - 1 + len(self.context_mask or b"")
        return size + sum(len(chunk.data) for chunk in self.routed_experts)


def context_span(
    ids: Iterable[int] | array | bytes | PrefixedContext, mask: Sequence[int] | None = None
) -> TokenSpan:
    """A span holding only context tokens (a generation's private part before it commits); ``bytes`` (native int32
    ids) and a :class:`PrefixedContext` are kept as they are (shared), anything else is copied into such bytes."""
    stored = ids if type(ids) is PrefixedContext else pack_ids(ids)
    extras = None
    if mask is not None and any(mask):
        extras = SpanExtras(context_mask=bytes(1 if value else 0 for value in mask))
    return TokenSpan(stored, _NOTHING_GENERATED, (), extras)


def committed_span(
    context: TokenSpan,
    generated_ids: Sequence[int],
    logprobs: Sequence[float] | None,
    versions: Sequence[str | None],
    routed_experts: Sequence[RoutedChunk] = (),
) -> TokenSpan:
    """The span a commit stores: the generation's context tokens (shared, not copied), then what it generated."""
    stored_logprobs = exact_logprobs(logprobs) if logprobs is not None else None
    generated = _pack_generated(_ids(generated_ids), stored_logprobs)
    extras = context.extras
    if routed_experts:
        extras = attrs.evolve(extras or _NO_EXTRAS, routed_experts=tuple(routed_experts))
    return TokenSpan(context.stored_context, generated, run_length(versions), extras)


@attrs.frozen(weakref_slot=False)
class SpanExtras:
    """What few spans carry, in one object: a span holds None instead (a slot each was 8 bytes of every step for
    the few that set one; turn id, boundary and flags were a separate object: issue 21 item 5). The first two are any
    span's; the rest only a :class:`Step`'s (its notes)."""

    # A client-supplied context mask: one 0/1 byte per context token (None: all 0).
    context_mask: bytes | None = None
    # The routed-expert rows of the upstream requests that made the span (spec 9).
    routed_experts: tuple[RoutedChunk, ...] = ()
    # The request's explicit turn id (X-Turn-Id), if any.
    turn_id: str | None = None
    # Why this step's tokens started from a full encode (only on steps with no base); see boundaries.py.
    boundary_reason: str | None = None
    boundary_detail: str | None = None
    # The step's incremental encode failed and it fell back to a full encode (spec 5.4).
    tito_failed: bool = False
    # Logprobs were requested or expected but are missing or misaligned: the span holds none.
    logprobs_invalid: bool = False


_NO_EXTRAS = SpanExtras()
#: Extras holding only a boundary reason and flags are shared between steps (a session's first step carries its
#: boundary reason: 72 bytes a session otherwise). A handful of reasons times two flags; bounded all the same.
_SHARED_EXTRAS: dict[tuple[str | None, bool, bool], SpanExtras] = {}
_SHARED_EXTRAS_MAX = 256


def _step_extras(span: TokenSpan, turn_id: str | None, boundary_reason: str | None, boundary_detail: str | None,
                 tito_failed: bool, logprobs_invalid: bool) -> SpanExtras | None:
    """The extras a step keeps: its span's (None when unset) with the notes added; a shared one when only the reason
    and flags are set."""
    if turn_id is None and boundary_reason is None and boundary_detail is None and not tito_failed \
            and not logprobs_invalid:
        return span.extras
    if span.extras is not None or turn_id is not None or boundary_detail is not None:
        return attrs.evolve(span.extras or _NO_EXTRAS, turn_id=turn_id, boundary_reason=boundary_reason,
                            boundary_detail=boundary_detail, tito_failed=tito_failed,
                            logprobs_invalid=logprobs_invalid)
    return _shared(_SHARED_EXTRAS, (boundary_reason, tito_failed, logprobs_invalid),
                   lambda: SpanExtras(boundary_reason=boundary_reason, tito_failed=tito_failed,
                                      logprobs_invalid=logprobs_invalid), _SHARED_EXTRAS_MAX)


@attrs.frozen(eq=False, weakref_slot=False, kw_only=True)  # no weakrefs: 16 bytes less a step (issue 21 item 5)
class Step(TokenSpan):
    """A committed step: the checkpoint after one assistant turn. Immutable; shared by every branch built on it.

    A step is its own span (it holds the :class:`TokenSpan` fields itself: one object a step instead of two;
    ``step.span`` is the step). ``node`` is the trie node of the assistant message this step answered with; the trie
    points back at the newest step of each node. ``chain_id`` / ``position`` say which chain owns the step and where
    (1-based); the owning chain is the only segment in which the step's generated tokens are trained (architecture
    invariant 6). Build one with :meth:`of`.
    """

    # Commit order within the session (1, 2, ...): segments are exported in this order.
    step_id: int
    base: Step | None
    chain_id: int
    position: int
    node: Any = attrs.field(repr=False)
    # The generation id is ``<session id>#g<generation>`` (built on read: the string was 56 bytes a step).
    session_id: str
    generation: int
    finish_reason: str
    # False when the step did not end with the end-of-turn token: TITO can never extend it.
    extendable: bool
    # Total tokens from the root step through this one.
    length: int = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "length", (self.base.length if self.base is not None else 0) + self.span_length)

    @property
    def depth(self) -> int:
        """Steps from the root step through this one: O(depth), a walk (nothing on the request path asks; a field
        is 8 bytes of every step, and a step's 14 slots make it 144 bytes, a size pymalloc does not round up: issue
        21 item 5)."""
        depth, step = 0, self
        while step is not None:
            depth, step = depth + 1, step.base
        return depth

    @classmethod
    def of(cls, span: TokenSpan, *, step_id: int, base: Step | None, chain_id: int, position: int, node: Any,
           session_id: str, generation: int, finish_reason: str, extendable: bool, turn_id: str | None = None,
           boundary_reason: str | None = None, boundary_detail: str | None = None, tito_failed: bool = False,
           logprobs_invalid: bool = False) -> Step:
        """The step that stores ``span`` (its fields, shared, not copied)."""
        extras = _step_extras(span, turn_id, boundary_reason, boundary_detail, tito_failed, logprobs_invalid)
        return cls(stored_context=span.stored_context, generated=span.generated, version_runs=span.version_runs,
                   extras=extras, step_id=step_id, base=base, chain_id=chain_id, position=position, node=node,
                   session_id=session_id, generation=generation, finish_reason=finish_reason, extendable=extendable)

    @property
    def span(self) -> TokenSpan:
        """The tokens this step added: the step itself."""
        return self

    @property
    def generation_id(self) -> str:
        """``<session id>#g<n>``: the id of the generation that committed this step."""
        return generation_id(self.session_id, self.generation)

    @property
    def turn_id(self) -> str | None:
        return (self.extras or _NO_EXTRAS).turn_id

    @property
    def boundary_reason(self) -> str | None:
        return (self.extras or _NO_EXTRAS).boundary_reason

    @property
    def boundary_detail(self) -> str | None:
        return (self.extras or _NO_EXTRAS).boundary_detail

    @property
    def tito_failed(self) -> bool:
        return (self.extras or _NO_EXTRAS).tito_failed

    @property
    def logprobs_invalid(self) -> bool:
        return (self.extras or _NO_EXTRAS).logprobs_invalid


def generation_id(session_id: str, generation: int) -> str:
    """The id of a session's ``generation``-th generation (1-based): unique within the session."""
    return f"{session_id}#g{generation}"


def path(step: Step | None) -> list[Step]:
    """The steps from the root (a full encode) to ``step``, in order: O(steps on the path)."""
    steps: list[Step] = []
    while step is not None:
        steps.append(step)
        step = step.base
    steps.reverse()
    return steps


def routed_rows_end(step: Step | None) -> int:
    """The first input position on the token path up to ``step`` that holds no routed-expert row (0 without rows).

    Rows are kept per upstream request as :class:`RoutedChunk` (positions ``start_len`` to ``start_len + num_rows``,
    absolute on the path, since every request sends the whole path as ``input_ids``); the coverage grows from 0 over
    the chunks that touch it. The last token of a checkpoint is never fed forward, so a fully covered path of ``n``
    tokens ends at ``n - 1``: the next step asks SGLang for rows from there (``routed_experts_start_len``) and the
    rows of a segment are never duplicated.
    """
    end = 0
    for each in path(step):
        for chunk in each.span.routed_experts:
            if chunk.start_len <= end:
                end = max(end, chunk.start_len + chunk.num_rows)
    return end


def path_ids(step: Step | None) -> array:
    """Every token id from the root to the end of ``step``: one C-level copy per span."""
    steps = path(step)
    if not steps:
        return array("i")
    root = steps[0].stored_context
    if type(root) is bytes:
        ids = array("i")
        ids.frombytes(root)
    else:  # a full encode naming an earlier path
        ids = root.ids()
    ids.frombytes(steps[0].generated_bytes())
    for each in steps[1:]:  # only a root (a full encode) can hold a PrefixedContext
        ids.frombytes(each.stored_context)
        ids.frombytes(each.generated_bytes())
    return ids


class PrefixedContext:
    """The context ids of a full encode that begin with ``length`` ids of the path ending at ``step``, which the
    session already holds: that step, the count, and the rest of the ids (``tail``, native int32 bytes).

    A session starts a new segment with a full encode after an answer that did not end its turn, a TITO failure or
    a drifted template (spec 5.4), and that encode repeats the conversation the earlier steps already hold: without
    this, each such step stored the whole prompt again (O(turns x context) in a session whose answers hit
    ``max_tokens``; issue 21 item 5: nothing keeps a second copy of a history the session holds). Only a step with no
    base holds one (``Session.set_context``). Equal to another exactly when it names the same step and holds the same
    ids (siblings' encodings are shared on that test, as ``bytes`` are)."""

    __slots__ = ("step", "length", "tail")

    def __init__(self, step: Step, length: int, tail: bytes) -> None:
        self.step, self.length, self.tail = step, length, tail

    def __eq__(self, other: object) -> bool:
        if type(other) is not PrefixedContext:
            return NotImplemented
        return self.step is other.step and self.length == other.length and self.tail == other.tail

    __hash__ = None  # type: ignore[assignment]  # compared, never a key

    @property
    def count(self) -> int:
        """How many context ids this stands for."""
        return self.length + (len(self.tail) >> 2)

    def ids(self) -> array:
        """The ids, as a new ``array('i')``: the named path's first ``length``, then the tail. The named path's root
        may itself be a PrefixedContext (:func:`path_ids` reads it through this): at most
        ``prefix_share.MAX_CHAIN`` names deep, as ``prefix_share.stored_context`` makes no longer chain."""
        ids = path_ids(self.step)
        del ids[self.length:]
        ids.frombytes(self.tail)
        return ids


def _stored_count(stored: bytes | PrefixedContext) -> int:
    """How many ids a span's stored context stands for."""
    return len(stored) >> 2 if type(stored) is bytes else stored.count


@attrs.frozen(eq=False)
class WorkingTokens:
    """A generation's private token state: the checkpoint it continues (shared, never copied) plus the context
    tokens it adds. Cloning a checkpoint is creating one of these: O(1) in the checkpoint's size."""

    base: Step | None
    context: TokenSpan

    @property
    def prompt_length(self) -> int:
        """Tokens sent upstream: the base's tokens plus this step's context."""
        return (self.base.length if self.base is not None else 0) + self.context.context_count

    def input_array(self) -> array:
        """The ids to send upstream (``input_ids``), as one ``array('i')``: a C-level copy per span, no Python
        object per token (``proxy/upstream/wire_json.py:dumps_body`` writes it to JSON the same way). O(prompt
        length) memcpy; call it outside any session lock."""
        ids = path_ids(self.base)
        ids.frombytes(self.context.context)
        return ids

    def input_ids(self) -> list[int]:
        """:meth:`input_array` as a list (a Python int per token: for what shows them, not for the request path)."""
        return self.input_array().tolist()


__all__ = [
    "PrefixedContext", "RoutedChunk", "SpanExtras", "Step", "TokenSpan", "WorkingTokens", "committed_span",
    "context_span", "expand_runs",
    "generation_id", "pack_ids", "path", "path_ids", "routed_rows_end", "run_length",
]
