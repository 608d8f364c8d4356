"""Fragment renders that repeat in shape, served without running the chat template again.

Every turn TITO renders a small synthetic conversation (``tito.py:TitoTokenizer._fragment_text``): the anchor turns
and the turn's new messages (a user query, tool results). The jinja2 render, in transformers' sandbox, is most of a
fragment's cost (~0.8 ms for Qwen3 on the bench machine), and from one turn to the next only the messages' texts
change: the roles, fields, tools and template kwargs (the *shape*) repeat. :class:`ShapeRenderCache` renders a shape
once with a *probe* in place of each text field of a message (its ``content``, a tool result's id...) and keeps the
output as literal text with holes; later renders of the shape fill the holes with the real texts.

That is only right when the template treats the texts as opaque, so the probe records everything the template
learns about a text (:class:`_Probe`):

- a question whose answer is a bool or an int (``startswith``, ``in``, ``==``, truthiness, ``length``...) is
  answered from the real text and recorded with its answer; a cached render is used only when the real texts give
  every recorded answer (a deterministic template then takes the same branches); texts that answer differently (a
  user text wrapped in ``<tool_response>``, say) get a variant of their own;
- ``+`` with plain text builds a composite probe (its questions are recorded and replayed on the real composite);
- anything else (a method returning text: ``strip``, ``split``, slicing, ``%``, hashing, iterating characters)
  makes the shape uncacheable: it is rendered every time, as before.

Text that leaves the probe's watch (``str()`` of it, jinja's ``~``, ``tojson``) is caught after the probe render:
each probe's unique text must appear in the output only whole and unchanged (it holds whitespace at both ends,
quotes, a backslash, ``<&>`` and non-ASCII, so trimming, escaping or case changes show). And before a shape is
cached, its holes filled with the request's real texts must give exactly the template's real render of that request.
Both checks failing, or any surprise, leaves the shape uncacheable. Keys hold everything but the texts, exactly.

One hole remains in that watch: a plain copy of a probe's text (jinja's ``~``, the ``string`` filter, ``%``,
``format``, ``join``, a macro's or a ``{% set %}`` block's captured output) is ordinary text whose questions are not
recorded. So the cache is on only for a template that can make no such copy (:func:`opaque_template`, read from the
template's syntax tree): no ``~``, ``%``, macros, call or filter blocks, block assignments, ``format``/``join``
calls, and only filters that ask the probe or emit it (:data:`SAFE_FILTERS`). Qwen3's template qualifies; the
others are rendered every time, as before.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jinja2 import nodes
from transformers.utils.chat_template_utils import _alias_reasoning_fields, _compile_jinja_template

from proxy.canonical_json import canonical_json

#: variants kept per shape (different recorded answers: a text that starts with ``<tool_response>``, say)
MAX_VARIANTS = 4
#: shapes kept (oldest forgotten first); a shape is a few hundred bytes of template output
MAX_SHAPES = 1024
_UNCACHEABLE = "uncacheable"
#: filters that, given a probe, ask it a recorded question, call a forbidden method, or emit it unchanged / escaped
SAFE_FILTERS = frozenset({"length", "count", "tojson", "trim", "lower", "upper", "first", "last", "list", "items",
                          "default", "d"})
#: syntax that makes a plain copy of a text (module docstring)
_COPYING_NODES = (nodes.Concat, nodes.Mod, nodes.Macro, nodes.CallBlock, nodes.AssignBlock, nodes.FilterBlock)


def opaque_template(template: str) -> bool:
    """Whether ``template`` can only emit, concatenate with ``+``, or question a text (module docstring)."""
    try:
        tree = _compile_jinja_template(template).environment.parse(template)
    except Exception:  # noqa: BLE001 - a template transformers cannot parse is rendered (and refused) as before
        return False
    if any(True for _ in tree.find_all(_COPYING_NODES)):
        return False
    if any(node.name not in SAFE_FILTERS for node in tree.find_all(nodes.Filter)):
        return False
    return not any(node.attr in ("format", "format_map", "join") for node in tree.find_all(nodes.Getattr))


class _Aborted(Exception):
    """The template did something to a text that the cache cannot replay."""


def _placeholder(slot: int) -> str:
    return f" \n\t<&\"\\\u00e9\x01dressageP{slot}Q\x01\u00e9\\\"&>\n "


def _tag(slot: int) -> str:
    """The part of a placeholder that escaping (JSON, HTML) leaves as it is: a copy that was escaped still shows."""
    return f"dressageP{slot}Q"


#: str methods whose answer is a bool or int: recorded and replayed (anything else text-valued aborts)
_QUESTIONS = (
    "startswith", "endswith", "__contains__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
    "__len__", "find", "rfind", "count", "isspace", "isdigit", "isalpha", "isalnum", "isupper", "islower",
    "isascii", "isdecimal", "isnumeric", "isidentifier", "isprintable", "istitle",
)
#: str methods that would hand out text or structure derived from the probe
_FORBIDDEN = tuple(
    name for name in dir(str)
    if callable(getattr(str, name)) and name not in _QUESTIONS and name not in (
        "__new__", "__init__", "__getattribute__", "__str__", "__repr__", "__class__", "__init_subclass__",
        "__subclasshook__", "__reduce__", "__reduce_ex__", "__sizeof__", "__dir__", "__setattr__", "__delattr__",
        "__add__", "__radd__", "__getnewargs__", "__format__", "__iter__",
    )
)


class _Transcript:
    """What one probe render learnt: (parts, method, args, answer) in order; ``texts``: the real texts, which
    answer every question (the render takes the branches the real texts take)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = texts
        self.questions: list[tuple[tuple[Any, ...], str, tuple[Any, ...], Any]] = []


class _Probe(str):
    """A text the template may only emit, concatenate, or ask bool/int questions about (module docstring)."""

    _parts: tuple[Any, ...]  # literal str or an int slot
    _transcript: _Transcript

    @classmethod
    def of(cls, parts: tuple[Any, ...], transcript: _Transcript) -> _Probe:
        probe = cls("".join(p if isinstance(p, str) else _placeholder(p) for p in parts))
        probe._parts = parts
        probe._transcript = transcript
        return probe

    def __add__(self, other: Any) -> _Probe:
        if not isinstance(other, str):
            raise _Aborted("+ with a non-text")
        other_parts = other._parts if isinstance(other, _Probe) else (str.__str__(other),)
        return _Probe.of(self._parts + other_parts, self._transcript)

    def __radd__(self, other: Any) -> _Probe:
        if not isinstance(other, str):
            raise _Aborted("+ with a non-text")
        return _Probe.of((str.__str__(other),) + self._parts, self._transcript)

    def __bool__(self) -> bool:
        return self._ask("__bool__", ())

    def __iter__(self) -> Any:
        raise _Aborted("iterating a text's characters")

    def __format__(self, spec: str) -> str:
        if spec:
            raise _Aborted("formatting a text")
        return str.__str__(self)

    def _ask(self, name: str, args: tuple[Any, ...]) -> Any:
        if any(isinstance(arg, _Probe) for arg in args):
            raise _Aborted("a question between two texts")
        answer = _replay_answer(self._parts, name, args, self._transcript.texts)
        if type(answer) not in (bool, int) and answer is not NotImplemented:
            raise _Aborted(f"{name} answered {type(answer).__name__}")
        self._transcript.questions.append((self._parts, name, args, answer))
        return answer


def _question(name: str) -> Callable[..., Any]:
    def ask(self: _Probe, *args: Any) -> Any:
        return self._ask(name, args)

    ask.__name__ = name
    return ask


def _forbidden(name: str) -> Callable[..., Any]:
    def refuse(self: _Probe, *args: Any, **kwargs: Any) -> Any:
        raise _Aborted(f"str.{name} on a text")

    refuse.__name__ = name
    return refuse


for _name in _QUESTIONS:
    setattr(_Probe, _name, _question(_name))
for _name in _FORBIDDEN:
    setattr(_Probe, _name, _forbidden(_name))
_Probe.__hash__ = _forbidden("__hash__")  # type: ignore[assignment]


def _replay_answer(parts: tuple[Any, ...], name: str, args: tuple[Any, ...], texts: Sequence[str]) -> Any:
    real = "".join(p if isinstance(p, str) else texts[p] for p in parts)
    return bool(real) if name == "__bool__" else getattr(str, name)(real, *args)


class _Shape:
    """One cached variant: the output's literal pieces and slots, and the answers it was rendered under."""

    def __init__(self, pieces: tuple[Any, ...], questions: list[tuple[tuple[Any, ...], str, tuple[Any, ...], Any]]):
        self.pieces = pieces
        self.questions = questions

    def fill(self, texts: Sequence[str]) -> str | None:
        """The render for ``texts``, or None when one of them answers a recorded question differently."""
        for parts, name, args, answer in self.questions:
            got = _replay_answer(parts, name, args, texts)
            if type(got) is not type(answer) or got != answer:
                return None
        return "".join(p if isinstance(p, str) else texts[p] for p in self.pieces)


def _pieces(output: str, slots: int) -> tuple[Any, ...] | None:
    """The output as literal pieces and slot numbers; None when a probe's text was changed or copied in part."""
    for slot in range(slots):
        if output.count(_tag(slot)) != output.count(_placeholder(slot)):
            return None
    if not slots:
        return (output,)
    pattern = re.compile("|".join(re.escape(_placeholder(slot)) for slot in range(slots)))
    slot_of = {_placeholder(slot): slot for slot in range(slots)}
    pieces: list[Any] = []
    at = 0
    for match in pattern.finditer(output):
        pieces.append(output[at:match.start()])
        pieces.append(slot_of[match.group()])
        at = match.end()
    pieces.append(output[at:])
    return tuple(piece for piece in pieces if piece != "")


class ShapeRenderCache:
    """Renders of a template, cached by shape (module docstring). Thread-safe: renders run in worker threads."""

    def __init__(self, template: str) -> None:
        self._template = template
        self.enabled = opaque_template(template)
        self._shapes: dict[str, list[_Shape] | str] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def render(
        self, messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
        kwargs: Mapping[str, Any], add_generation_prompt: bool, first_slot: int, real_render: Callable[[], str],
    ) -> str:
        """The render of ``messages`` (the contents of ``messages[first_slot:]`` are the texts); ``real_render()``
        renders them for real (on a miss, and to check a new shape)."""
        if not self.enabled:
            return real_render()
        texts: list[str] = []
        shaped = _slotted(messages, first_slot, texts, lambda slot: ["\x00slot", slot])
        try:
            key = canonical_json([shaped, tools, kwargs, add_generation_prompt], default=None)
        except (TypeError, ValueError):
            return real_render()
        with self._lock:
            entry = self._shapes.get(key)
        if isinstance(entry, list):
            for shape in entry:
                text = shape.fill(texts)
                if text is not None:
                    self.hits += 1
                    return text
        self.misses += 1
        text = real_render()
        if entry == _UNCACHEABLE or (isinstance(entry, list) and len(entry) >= MAX_VARIANTS):
            return text
        shape = self._probe(messages, tools, kwargs, add_generation_prompt, first_slot, texts)
        if shape is None or shape.fill(texts) != text:
            with self._lock:
                self._shapes[key] = _UNCACHEABLE
            return text
        with self._lock:
            if len(self._shapes) >= MAX_SHAPES:
                self._shapes.pop(next(iter(self._shapes)))
            variants = self._shapes.setdefault(key, [])
            if isinstance(variants, list):
                variants.append(shape)
        return text

    def _probe(
        self, messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]] | None, kwargs: Mapping[str, Any],
        add_generation_prompt: bool, first_slot: int, texts: list[str],
    ) -> _Shape | None:
        transcript = _Transcript(texts)
        probed = _slotted(messages, first_slot, [], lambda slot: _Probe.of((slot,), transcript))
        try:
            output = _compile_jinja_template(self._template).render(
                messages=_alias_reasoning_fields(probed), tools=list(tools) if tools else None, documents=None,
                add_generation_prompt=add_generation_prompt, **kwargs,
            )
        except Exception:  # noqa: BLE001 - _Aborted, or anything the template does to a probe: not cacheable
            return None
        pieces = _pieces(str.__str__(output), len(texts))
        return None if pieces is None else _Shape(pieces, transcript.questions)


def _slotted(
    messages: list[dict[str, Any]], first_slot: int, texts: list[str], hole: Callable[[int], Any]
) -> list[Any]:
    """``messages`` with every text field (any string but the role: the content, a tool result's ``tool_call_id`` and
    ``name``, ``reasoning_content``) of ``messages[first_slot:]`` replaced by ``hole(slot)``, the texts appended to
    ``texts`` in slot order. Ids and names change every turn just as contents do: keyed, they would make every tool
    result a new shape, a miss that costs a render and a probe."""
    out: list[Any] = []
    for index, message in enumerate(messages):
        if index < first_slot:
            out.append(message)
            continue
        shaped = dict(message)
        for field, value in message.items():
            if field != "role" and type(value) is str:
                shaped[field] = hole(len(texts))
                texts.append(value)
        out.append(shaped)
    return out


__all__ = ["ShapeRenderCache"]
