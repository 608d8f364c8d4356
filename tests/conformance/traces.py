"""What the conformance check compares: each machine's sequence of observed steps, recorded from the running
controllers (through ``statemachines.core.OBSERVER``) or from a move of the checked world.

An observed step (:class:`Observed`) is one event as a machine handled it: the event's type, the state it left the
machine in, the machine's data then (minus the labels the world abstracts: rids, weight-version names, the prompt
length, the step limit), and the types of the effects it returned, in order. Two normalizations make the running
system and the world comparable, both argued from the machines' own rules:

- *a read of k tokens is k reads of one token*: the controller feeds the tokens of one upstream read as one
  ``TokensReceived`` (``count`` k), the world one token per move. The machine's docstring makes a read a token
  boundary like any other, so the recorded read is replayed through the machine's own pure ``send`` one token at a
  time (and must end where the real step ended);
- *stutters are left out*: an event that changes neither the machine's state nor its data and asks for nothing
  (a late ``ClientDisconnected`` while the commit lands, a second ``AbortRequested``) is invisible to everyone.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator

import attrs

from statemachines import chain as chain_sm
from statemachines import generation as gen_sm
from statemachines import rollout_gate as gate_sm
from statemachines import session as session_sm
from statemachines.core import Machine, Sent, Snapshot
from statemachines.generation_machine import GenerationMachine
from statemachines.service_lifecycle import ServiceLifecycle

#: The machine kinds, as the world names its roles (``gate``, ``session``, ``c<k>``, ``g<i>``).
GATE, SESSION, CHAIN, GENERATION = "gate", "session", "chain", "generation"
_KINDS = ((gate_sm.RolloutGate, GATE), (session_sm.SessionMachine, SESSION), (chain_sm.ChainMachine, CHAIN),
          (GenerationMachine, GENERATION))

#: Data fields that hold labels the world abstracts (its rids are r1, r2; its weights v0, v1...; its prompt is 4
#: tokens; its session has no step limit), left out of the comparison.
ABSTRACTED = frozenset({"rid", "weight_version", "request_version", "prompt_tokens", "max_steps"})


def kind_of(machine_class: type) -> str:
    """The kind of a machine class (variants included)."""
    for base, kind in _KINDS:
        if issubclass(machine_class, base):
            return kind
    raise ValueError(f"not a machine of the proxy: {machine_class!r}")


@attrs.frozen
class Observed:
    """One event as a machine handled it, reduced to what the check compares."""

    event: str
    state: str
    data: tuple[tuple[str, object], ...]
    effects: tuple[str, ...]
    # Why the machine refused the event (the running side records refusals; the world never follows one).
    refused: str | None = None

    def describe(self) -> str:
        """``TokensReceived -> STREAMING {tokens=1, ...} / AcceptTokens``."""
        data = ", ".join(f"{name}={value}" for name, value in self.data)
        text = f"{self.event} -> {self.state} {{{data}}}"
        text += f" / {', '.join(self.effects)}" if self.effects else ""
        return text + (f" REFUSED ({self.refused})" if self.refused else "")


def observe(sent: Sent) -> list[Observed]:
    """The observed steps of one ``send`` (normalized: module docstring)."""
    if sent.refused is None and not sent.effects and sent.before == sent.after:
        return []
    reads = _single_token_reads(sent)
    if reads is not None:
        return reads
    return [_observed(sent.event, sent.after, sent.effects, sent.refused)]


def observe_step(before: Snapshot, event: object, after: Snapshot, effects: tuple) -> list[Observed]:
    """``observe`` for a step known by its parts (the world's: it feeds one token at a time)."""
    if not effects and before == after:
        return []
    return [_observed(event, after, effects, None)]


def _observed(event: object, after: Snapshot, effects: tuple, refused: str | None) -> Observed:
    data = tuple((name, _plain(value)) for name, value in attrs.asdict(after.data, recurse=False).items()
                 if name not in ABSTRACTED)
    return Observed(type(event).__name__, after.state.name, data, tuple(type(e).__name__ for e in effects), refused)


def _plain(value: object) -> object:
    return value.name if isinstance(value, enum.Enum) else value


def _single_token_reads(sent: Sent) -> list[Observed] | None:
    """A read of several tokens, replayed one token at a time through the machine's own rule; None when the step
    is not such a read (or the replay does not end where the real step ended: then it is compared as it was)."""
    if not isinstance(sent.event, gen_sm.TokensReceived) or sent.refused is not None:
        return None
    singles = list(_one_token_events(sent.event))
    if len(singles) < 2:
        return None
    machine = type(sent.machine).from_snapshot(sent.before)
    steps = []
    for single in singles:
        effects = tuple(machine.send(single))
        steps.append(_observed(single, machine.snapshot(), effects, None))
    return steps if machine.snapshot() == sent.after else None


def _one_token_events(event: gen_sm.TokensReceived) -> Iterator[object]:
    """The one-token events a read is made of (``count`` of them, or one per token when the event carries them)."""
    fields = attrs.fields_dict(type(event))
    tokens = getattr(event, "tokens", None)
    if "tokens" in fields and isinstance(tokens, (tuple, list)):
        for index in range(len(tokens)):
            yield attrs.evolve(event, tokens=tokens[index:index + 1])
    else:
        for _ in range(event.count):
            yield attrs.evolve(event, count=1)


@attrs.frozen
class MachineTrace:
    """One machine instance's observed steps, and where each stands in the run's global order."""

    kind: str
    name: str
    steps: tuple[Observed, ...]
    # The global position (order of ``send`` calls in the whole run) of each step.
    order: tuple[int, ...]


@attrs.define
class Recorder:
    """The observer of a run: every ``send`` of every machine, in order (normalized by :meth:`traces`).

    Set it with ``OBSERVER.set(recorder)`` before the tasks that drive the machines are started."""

    sent: list[Sent] = attrs.field(factory=list)

    def __call__(self, sent: Sent) -> None:
        self.sent.append(sent)

    def traces(self) -> list[MachineTrace]:
        """Each machine's trace, in the order the machines were first fed, named ``<kind>#<n>``."""
        by_machine: dict[Machine, list[tuple[int, Observed]]] = {}
        for index, sent in enumerate(self.sent):
            steps = by_machine.setdefault(sent.machine, [])
            steps.extend((index, observed) for observed in observe(sent))
        counts: dict[str, int] = {}
        traces = []
        for machine, steps in by_machine.items():
            if not steps:
                continue  # only stutters: nothing to compare
            if isinstance(machine, ServiceLifecycle):
                continue  # the process's lifecycle is not in the full world (the gate world checks it)
            kind = kind_of(type(machine))
            counts[kind] = counts.get(kind, 0) + 1
            traces.append(MachineTrace(kind, f"{kind}#{counts[kind]}", tuple(s for _, s in steps),
                                       tuple(i for i, _ in steps)))
        return traces


__all__ = ["ABSTRACTED", "CHAIN", "GATE", "GENERATION", "MachineTrace", "Observed", "Recorder", "SESSION", "kind_of",
           "observe", "observe_step"]
