"""The small shared core of every machine: the error type, the transition table helper, diagram rendering.

How a machine is defined (``rollout_gate.py`` is the worked example; later machines follow the same layout):

1. A ``State`` enum (a :class:`MachineState`) whose values are the states' one-line descriptions (they end up in
   the generated docs)::

       class State(MachineState):
           OPEN = "the door lets people through"

2. Events and effects: ``@attrs.frozen`` classes with a one-line docstring each. Effects carry everything the
   controller needs (epochs, counts, versions), so the controller never asks the machine for its state.

3. Actions: pure functions ``action(state, data, event) -> Goto(target, data, effects)``. ``data`` is the machine's
   frozen attrs record (counts, versions...); an action returns a changed copy (:func:`evolve`, ``attrs.evolve``'s
   meaning at two thirds of its cost), never mutates.
   When a guard that needs the data refuses the event, the action raises ``Refused("why")``.

4. The table, which is the spec: one ``on(state, EventType, action, *branches)`` row per legal (state, event)
   pair. Each ``Branch(target, effects=(EffectType, ...), when="guard as text")`` declares one possible outcome;
   ``apply`` rejects any result of the action that no branch declares, so the diagrams cannot lie. A pair
   declared twice is a ``TableError`` at import time; a pair missing from the table is illegal::

       TABLE = TransitionTable.build(
           machine="Door", states=State, events=(Push, Lock), initial=State.OPEN,
           transitions=[
               on(State.OPEN, Push, _let_through, Branch(State.OPEN, (LetThrough,))),
               on(State.OPEN, Lock, _lock, Branch(State.LOCKED)),
           ],
           policy=Policy.TRANSACTIONAL,   # or Policy.FAIL_CLOSED with error_state=State.BROKEN
           check=_check,                  # optional (state, data) -> message | None, run after every transition
       )

5. The machine class: ``@attrs.define(eq=False) class Door(Machine): table = TABLE`` plus a named constructor.
   ``send(event) -> list[effect]`` is the whole interface; ``snapshot()`` / ``from_snapshot()`` export and restore
   a frozen, hashable value (the explorer composes those); a machine may add a ``statistics()`` for reporting.

6. Register the machine class in ``registry.MACHINES`` and run ``python -m statemachines.diagrams``.

Illegal events follow the table's policy: ``TRANSACTIONAL`` raises ``IllegalTransition`` and leaves state and data
unchanged (like h11's ``_state.py``); ``FAIL_CLOSED`` moves to the absorbing ``error_state`` first, then raises
(it also does so on a ``TableError``, i.e. when the module's own code disagrees with its table).

Observing machines: while ``OBSERVER`` holds a callable (a ``contextvars.ContextVar``, so it follows trio tasks and
worker threads started after it is set), every ``Machine.send`` reports what it did as one ``Sent`` record: the
conformance test (``tests/conformance/``) records the running controllers' machines this way. Unset (the default),
``send`` only reads the variable; the observer never changes what a machine does.
"""

from __future__ import annotations

import contextvars
import enum
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import attrs


class MachineState(enum.Enum):
    """Base of every machine's ``State`` enum: members hashed by identity.

    ``Enum.__hash__`` is a Python function (``hash(self._name_)``) and every step hashes two states (its row's key,
    its target's branches); members are singletons, so ``object.__hash__`` (a C slot) finds the same rows. Issue 21
    item 2: ~0.3 us a step in the replayed steps of a request."""

    __hash__ = object.__hash__


class IllegalTransition(Exception):
    """An event the table does not allow in the machine's state, or that a guard refused with this data."""

    def __init__(self, machine: str, state: enum.Enum, event: object, reason: str | None = None) -> None:
        # What was refused, kept as attributes so that controllers and tests can inspect it.
        self.machine = machine
        self.state = state
        self.event = event
        self.reason = reason
        # h11's wording: the event type and the state are the two things needed to find the missing row.
        message = f"{machine} can't handle event type {type(event).__name__} when state={state.name}"
        super().__init__(f"{message}: {reason}" if reason else message)


class Refused(Exception):
    """Raised by an action whose guard refuses the event; ``apply`` turns it into ``IllegalTransition``."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class TableError(Exception):
    """The table is malformed, or an action's result disagrees with the table: a bug in the machine's module."""


class Policy(enum.Enum):
    """What an illegal event does to a machine."""

    TRANSACTIONAL = "raise IllegalTransition; state and data stay unchanged"
    FAIL_CLOSED = "move to the absorbing error state, then raise IllegalTransition"


@attrs.frozen
class Branch:
    """One declared outcome of a row: the target state, the effect types it may emit, its guard as text."""

    target: enum.Enum
    effects: tuple[type, ...] = attrs.field(default=(), converter=tuple)
    when: str = ""


@attrs.frozen
class Transition:
    """One row of a table: the action that handles ``event`` in ``state`` and the branches it may take."""

    state: enum.Enum
    event: type
    action: Callable[[Any, Any, Any], Goto]
    branches: tuple[Branch, ...]
    # target -> the effect types of each branch going there, for the check on every step (built once: this runs
    # per event; a step without effects, the usual one, needs only the target looked up).
    allowed: Mapping[enum.Enum, tuple[frozenset[type], ...]] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        allowed: dict[enum.Enum, tuple[frozenset[type], ...]] = {}
        for branch in self.branches:
            allowed[branch.target] = (*allowed.get(branch.target, ()), frozenset(branch.effects))
        object.__setattr__(self, "allowed", types.MappingProxyType(allowed))


def on(state: enum.Enum, event: type, action: Callable[[Any, Any, Any], Goto], *branches: Branch) -> Transition:
    """Spell one row of a table: ``on(State.X, Event, action, Branch(...), ...)``."""
    return Transition(state, event, action, branches)


@attrs.frozen
class Goto:
    """What an action returns: the state to move to, the new data, the effects for the controller."""

    target: enum.Enum
    data: Any
    effects: tuple[Any, ...] = attrs.field(default=(), converter=tuple)


@attrs.frozen
class Snapshot:
    """A machine's whole state as one frozen, hashable value: export with ``snapshot()``, restore with
    ``from_snapshot()``."""

    state: enum.Enum
    data: Any


@attrs.frozen(eq=False)
class TransitionTable:
    """A machine's transition table: ``rows[(state, event type)] -> Transition``; every missing pair is illegal."""

    machine: str
    states: type[enum.Enum]
    events: tuple[type, ...]
    initial: enum.Enum
    rows: Mapping[tuple[enum.Enum, type], Transition]
    policy: Policy
    error_state: enum.Enum | None = None
    check: Callable[[enum.Enum, Any], str | None] | None = None

    @classmethod
    def build(
        cls,
        *,
        machine: str,
        states: type[enum.Enum],
        events: Iterable[type],
        initial: enum.Enum,
        transitions: Iterable[Transition],
        policy: Policy,
        error_state: enum.Enum | None = None,
        check: Callable[[enum.Enum, Any], str | None] | None = None,
    ) -> TransitionTable:
        """Index the rows by (state, event type), refusing a pair declared twice, and validate the whole table."""
        rows: dict[tuple[enum.Enum, type], Transition] = {}
        for row in transitions:
            # A dict literal would silently keep the last of two rows; the table must say it once (automat's rule).
            if (row.state, row.event) in rows:
                raise TableError(f"{machine}: ({row.state.name}, {row.event.__name__}) is declared twice")
            rows[(row.state, row.event)] = row
        table = cls(machine, states, tuple(events), initial, types.MappingProxyType(rows), policy, error_state, check)
        table._validate()
        return table

    def overriding(self, *transitions: Transition) -> TransitionTable:
        """A copy in which these rows replace (or add to) the existing ones: for variants, e.g. planted bugs."""
        replaced = {(row.state, row.event): row for row in self.rows.values()}
        changed: set[tuple[enum.Enum, type]] = set()
        for row in transitions:
            # Overriding the same pair twice in one call is as ambiguous as declaring it twice.
            if (row.state, row.event) in changed:
                raise TableError(f"{self.machine}: ({row.state.name}, {row.event.__name__}) is overridden twice")
            changed.add((row.state, row.event))
            replaced[(row.state, row.event)] = row
        return self.build(
            machine=self.machine, states=self.states, events=self.events, initial=self.initial,
            transitions=replaced.values(), policy=self.policy, error_state=self.error_state, check=self.check,
        )

    def _validate(self) -> None:
        """Every name in the table must belong to the machine; the error state, if any, must absorb."""
        if not isinstance(self.initial, self.states):
            raise TableError(f"{self.machine}: initial state {self.initial!r} is not a {self.states.__name__}")
        for (state, event), row in self.rows.items():
            where = f"{self.machine}: ({getattr(state, 'name', state)}, {getattr(event, '__name__', event)})"
            if not isinstance(state, self.states):
                raise TableError(f"{where}: {state!r} is not a {self.states.__name__}")
            if event not in self.events:
                raise TableError(f"{where}: {event!r} is not one of the machine's events")
            if not row.branches:
                raise TableError(f"{where}: a row needs at least one branch")
            for branch in row.branches:
                if not isinstance(branch.target, self.states):
                    raise TableError(f"{where}: target {branch.target!r} is not a {self.states.__name__}")
        # Fail-closed needs somewhere to fail to, and that state must have no way out.
        if (self.policy is Policy.FAIL_CLOSED) != (self.error_state is not None):
            raise TableError(f"{self.machine}: an error_state is required by FAIL_CLOSED and only by it")
        if self.error_state is not None and any(state is self.error_state for state, _ in self.rows):
            raise TableError(f"{self.machine}: error state {self.error_state.name} must absorb (no rows)")

    def apply(self, state: enum.Enum, data: Any, event: object) -> Goto:
        """The pure step: the ``Goto`` for ``event`` in (state, data), or ``IllegalTransition``. Nothing mutates."""
        row = self.rows.get((state, type(event)))
        if row is None:
            raise IllegalTransition(self.machine, state, event)
        try:
            goto = row.action(state, data, event)
        except Refused as refusal:
            raise IllegalTransition(self.machine, state, event, refusal.reason) from None
        # The table is the spec: the action may only take a branch that the row declares.
        target, effects = goto.target, goto.effects
        declared = row.allowed.get(target)
        if declared is None or (effects and not _declares(declared, effects)):
            emitted = sorted({type(effect).__name__ for effect in effects})
            raise TableError(
                f"{self.machine}: ({state.name}, {type(event).__name__}) went to {target.name} emitting "
                f"{emitted}, which no branch of its row declares"
            )
        # The machine's invariant, as _check runs it (written out: this runs on every step).
        if self.check is not None and (broken := self.check(target, goto.data)) is not None:
            raise self._broken(broken, (type(event), state))
        return goto

    def _check(self, state: enum.Enum, data: Any, after: tuple[type, enum.Enum] | None = None) -> None:
        """Run the machine's own (state, data) invariant, if it declares one; ``after``: the event and state of the
        step that reached it (None: a snapshot to restore). The failure's text is built only on failure (this runs
        on every step)."""
        broken = self.check(state, data) if self.check is not None else None
        if broken is not None:
            raise self._broken(broken, after)

    def _broken(self, broken: str, after: tuple[type, enum.Enum] | None) -> TableError:
        """The error of an invariant broken after a step (``after``: its event and state) or in a snapshot (None)."""
        where = "in the snapshot to restore" if after is None else f"after {after[0].__name__} in {after[1].name}"
        return TableError(f"{self.machine}: invariant broken {where}: {broken}")


#: ``_declares``' answers by (declared, emitted types in order): both come from finite sets (a table's rows, its
#: effect classes), and the check runs on every step (issue 21 item 2: the set and the scan were ~2% of a request).
_DECLARES: dict[tuple[Any, ...], bool] = {}


def _declares(declared: tuple[frozenset[type], ...], effects: tuple[Any, ...]) -> bool:
    """Whether one branch (its effect types in ``declared``) may emit all of ``effects``."""
    key = (declared, *map(type, effects))
    known = _DECLARES.get(key)
    if known is None:
        emitted = {type(effect) for effect in effects}
        known = _DECLARES[key] = any(emitted <= types_ for types_ in declared)
    return known


#: ``evolve``'s marker for "keep this field's value" (None is a value a field may be changed to).
_KEEP = object()
#: One generated ``evolve`` per data class, made on its first use.
_EVOLVERS: dict[type, Callable[..., Any]] = {}


def evolve(record: Any, **changes: Any) -> Any:
    """``attrs.evolve(record, **changes)``: a copy of a frozen attrs record with ``changes``, built through the
    class's ``__init__`` (its validators and converters run, as with ``attrs.evolve``); an unknown name is a
    ``TypeError``.

    Every action evolves its machine's data, ~15 times a request (issue 21 item 2): ``attrs.evolve`` looks up the
    class's fields and builds keyword arguments for every one of them on each call (3.3 us for the generation's
    12-field record), where a function generated once per class passes them positionally (2.1 us)."""
    try:
        evolver = _EVOLVERS[type(record)]
    except KeyError:
        evolver = _EVOLVERS[type(record)] = _evolver(type(record))
    return evolver(record, **changes)


def _evolver(cls: type) -> Callable[..., Any]:
    """``evolve`` for one class: ``(record, *, field=_KEEP, ...) -> cls(...)`` with each field's current value unless
    changed. Positional, so only for classes whose ``__init__`` takes every field positionally, in field order."""
    fields = [field for field in attrs.fields(cls) if field.init]
    if any(field.kw_only for field in fields):
        raise TypeError(f"evolve: {cls.__name__} has keyword-only fields; use attrs.evolve")
    params = ", ".join(f"{field.alias}=_KEEP" for field in fields)
    args = ", ".join(f"record.{field.name} if {field.alias} is _KEEP else {field.alias}" for field in fields)
    namespace = {"cls": cls, "_KEEP": _KEEP}
    exec(f"def evolve(record, *, {params}):\n    return cls({args})\n", namespace)  # noqa: S102 (names from attrs)
    return namespace["evolve"]


@attrs.frozen
class Sent:
    """What one ``Machine.send`` did, for an observer: the machine, its snapshot before and after, the event, the
    effects it returned, or why it refused the event (``refused``; ``after`` is then what the policy left)."""

    machine: Machine
    before: Snapshot
    event: object
    after: Snapshot
    effects: tuple[Any, ...]
    refused: str | None = None


#: Called with a ``Sent`` after every ``Machine.send`` while set (module docstring); None: nobody observes.
OBSERVER: contextvars.ContextVar[Callable[[Sent], None] | None] = contextvars.ContextVar(
    "statemachines_observer", default=None
)


@attrs.define(eq=False)
class Machine:
    """Base of every machine: owns (state, data), applies its class's ``table`` and enforces the table's policy.

    Don't ask the machine for its state to decide what to do: act on the effects ``send`` returns.
    ``snapshot()`` is for the explorer, tests and reporting.
    """

    # The transition table; each subclass sets it (a variant subclass may set an ``overriding`` copy).
    table: ClassVar[TransitionTable]
    # The current state; changed only by ``send``.
    _state: enum.Enum
    # The machine's frozen data record; replaced (never mutated) only by ``send``.
    _data: Any

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> Machine:
        """A machine in exactly this state, after checking that the (state, data) pair is possible."""
        cls.table._check(snapshot.state, snapshot.data)
        return cls(snapshot.state, snapshot.data)

    def snapshot(self) -> Snapshot:
        """The whole state as a frozen, hashable value."""
        return Snapshot(self._state, self._data)

    def send(self, event: object) -> list[Any]:
        """Feed one event; return the effects to carry out, or raise ``IllegalTransition`` per the policy."""
        table = self.table
        observer = OBSERVER.get()
        before = Snapshot(self._state, self._data) if observer is not None else None
        try:
            goto = table.apply(self._state, self._data, event)
        except (IllegalTransition, TableError) as error:
            # Fail-closed machines remember the failure (an illegal event, or their own code disagreeing with
            # their table); transactional ones leave everything as it was.
            if table.policy is Policy.FAIL_CLOSED:
                self._state = table.error_state
            if observer is not None:
                observer(Sent(self, before, event, self.snapshot(), (), f"{type(error).__name__}: {error}"))
            raise
        self._state, self._data = goto.target, goto.data
        if observer is not None:
            observer(Sent(self, before, event, self.snapshot(), goto.effects))
        return list(goto.effects)


def _names(types_: Iterable[type]) -> str:
    """``A, B`` for effect types, for diagram labels."""
    return ", ".join(t.__name__ for t in types_)


def _edges(table: TransitionTable) -> list[tuple[str, str, str]]:
    """(source, target, label) for every branch, in table order; the label reads ``Event [when] / Effects``."""
    edges = []
    for row in table.rows.values():
        for branch in row.branches:
            label = row.event.__name__
            label += f" [{branch.when}]" if branch.when else ""
            label += f" / {_names(branch.effects)}" if branch.effects else ""
            edges.append((row.state.name, branch.target.name, label))
    return edges


def render_dot(table: TransitionTable) -> str:
    """The table as a Graphviz digraph (text)."""
    lines = [
        f"// {table.machine}: generated from its transition table by `python -m statemachines.diagrams`.",
        f"digraph {table.machine} {{",
        "    rankdir=LR;",
        '    node [shape=box, style=rounded, fontname="Helvetica"];',
        '    edge [fontname="Helvetica", fontsize=10];',
        "    __start [shape=point];",
        f"    __start -> {table.initial.name};",
    ]
    for state in table.states:
        # The error state of a fail-closed machine is drawn bold: it absorbs.
        bold = ', style="rounded,bold"' if state is table.error_state else ""
        lines.append(f'    {state.name} [tooltip="{_dot_escape(str(state.value))}"{bold}];')
    for source, target, label in _edges(table):
        lines.append(f'    {source} -> {target} [label="{_dot_escape(label)}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_escape(text: str) -> str:
    """Escape a DOT string literal."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def render_markdown(table: TransitionTable) -> str:
    """The table as a page: a mermaid diagram, the states, the events, the rows, the illegal-event policy."""
    lines = [
        f"# {table.machine}",
        "",
        "Generated from the transition table by `python -m statemachines.diagrams`; do not edit by hand.",
        "",
        "```mermaid",
        "stateDiagram-v2",
        f"    [*] --> {table.initial.name}",
    ]
    lines += [f"    {source} --> {target}: {_mermaid_escape(label)}" for source, target, label in _edges(table)]
    lines += ["```", "", "| state | meaning |", "|---|---|"]
    lines += [f"| `{state.name}` | {state.value} |" for state in table.states]
    lines += ["", "| event | meaning |", "|---|---|"]
    lines += [f"| `{event.__name__}` | {_first_line(event)} |" for event in table.events]
    lines += ["", "| state | event | when | target | effects |", "|---|---|---|---|---|"]
    for row in table.rows.values():
        for branch in row.branches:
            effects = _names(branch.effects) or "-"
            lines.append(
                f"| `{row.state.name}` | `{row.event.__name__}` | {branch.when or '-'} | `{branch.target.name}` | "
                f"{effects} |"
            )
    illegal = [f"`{s.name}` x `{e.__name__}`" for s in table.states for e in table.events if (s, e) not in table.rows]
    lines += ["", f"Illegal events ({table.policy.name}): {table.policy.value}.", ""]
    lines += [f"Pairs not in the table are illegal: {', '.join(illegal) or 'none'}.", ""]
    return "\n".join(lines)


def _mermaid_escape(text: str) -> str:
    """Mermaid ends a statement at ``;`` and a label at ``:``: write them as its entity codes."""
    return text.replace(";", "#59;").replace(":", "#58;")


def _first_line(thing: type) -> str:
    """The first line of a class's docstring (events and effects must have one)."""
    return (thing.__doc__ or "").strip().splitlines()[0] if thing.__doc__ else ""
