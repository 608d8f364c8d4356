"""The records the worlds keep, shared by them: what a controller knows of its generation, the trainer, the clients,
the gate controller's record of each generation, an abstract upstream request, and a chain of the session.

A world keeps only what a controller keeps (never a machine's state to decide what to do): these records, and the
machines' snapshots. ``describe_*`` print a world's common parts compactly for traces.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

from statemachines import generation as gen_sm
from statemachines.core import Snapshot


class Trainer(enum.Enum):
    """The trainer's side of pause and resume."""

    TRAINING = "no pause call in progress"
    PAUSE_PENDING = "its pause call waits for PauseAcknowledged"
    PAUSE_RETURNED = "its pause call returned: it loads new weights, then resumes"


class Client(enum.Enum):
    """A generation's client, as the HTTP layer sees it."""

    WAITING = "its request is open"
    ANSWERED = "it got its answer (success or error)"
    GONE = "it went away before its answer"


class GateRecord(enum.Enum):
    """What the gate controller knows of a generation (from the effects it carried out)."""

    NONE = "not counted by the gate"
    IN_FLIGHT = "admitted; counted in flight"
    WAITING = "parked; counted waiting"


@attrs.frozen
class Upstream:
    """An abstract SGLang request: its rid, its max_new_tokens, what it produced, whether it is being aborted."""

    rid: str
    limit: int
    produced: int = 0
    # The weights its first token was generated with (None before any token).
    version: str | None = None
    aborting: bool = False
    # Whether it already delivered the one token in flight after its abort (with ``one_token_after_abort``).
    straggled: bool = False


@attrs.frozen(cache_hash=True)
class GenWorld:
    """One generation: its machine and the records its controllers keep."""

    machine: Snapshot
    prepared: bool = False
    client: Client = Client.WAITING
    gate: GateRecord = GateRecord.NONE
    upstream: Upstream | None = None
    # The token buffer: the version stamp of every kept token, in order ("*": a stamp nothing reads any more).
    stamps: tuple[str | None, ...] = ()
    # ParseOutput was carried out; ParseDone (or a parser failure) is pending. The finish kind it was given.
    parsing: bool = False
    finish: gen_sm.FinishKind | None = None
    # (rid, weights) of its last aborted request: it may still deliver one straggler token.
    stale: tuple[str, str] | None = None
    # Where its step attaches in the session, while the session counts it (the session side's record, hashable,
    # with a ``key`` tuple for the symmetry order and a ``label`` for traces); None with the abstract session.
    attachment: Any = None
    # What the session side records at each accepted commit of this generation (its state then).
    commits: tuple[str, ...] = ()
    # A StartUpstream not sent yet: held back until its client reads (only where ``waits_for_client`` says the
    # driver waits on the client first: never with the correct rule; the planted pause-liveness bug), or, with
    # ``rid_in_a_later_step``, until the driver draws its rid and sends it.
    start_pending: gen_sm.StartUpstream | None = None
    # A DropFromSession not carried out yet (with ``drop_in_a_later_step``): the session still counts it.
    drop_pending: bool = False
    # Admitted by the session, its prepare not done yet (with ``prepared_in_a_later_step``): ``Prepared``, or the
    # registry's roll-back (client gone, a refusal after admission), is a later move.
    preparing: bool = False


@attrs.define
class _GenDraft:
    """A mutable copy of a ``GenWorld`` while a step changes it (same fields; built and frozen once per step)."""

    machine: Snapshot
    prepared: bool
    client: Client
    gate: GateRecord
    upstream: Upstream | None
    stamps: tuple[str | None, ...]
    parsing: bool
    finish: gen_sm.FinishKind | None
    stale: tuple[str, str] | None
    attachment: Any
    commits: tuple[str, ...]
    start_pending: gen_sm.StartUpstream | None
    drop_pending: bool
    preparing: bool


def thaw(g: GenWorld) -> _GenDraft:
    return _GenDraft(g.machine, g.prepared, g.client, g.gate, g.upstream, g.stamps, g.parsing, g.finish, g.stale,
                     g.attachment, g.commits, g.start_pending, g.drop_pending, g.preparing)


def freeze(g: _GenDraft) -> GenWorld:
    return GenWorld(g.machine, g.prepared, g.client, g.gate, g.upstream, g.stamps, g.parsing, g.finish, g.stale,
                    g.attachment, g.commits, g.start_pending, g.drop_pending, g.preparing)


def describe_head(world: Any) -> str:
    """``gate=RUNNING(epoch=0, v0, in_flight=1, waiting=0) trainer=TRAINING weights=v0``: a world's common part."""
    gate = world.gate.data
    return (f"gate={world.gate.state.name}(epoch={gate.epoch}, {gate.weight_version}, in_flight={gate.in_flight}, "
            f"waiting={gate.waiting}) trainer={world.trainer.name} weights={world.weights}")


def describe_gens(world: Any) -> str:
    """Each generation, compactly (``describe_gen``), then the per-step violation if any."""
    text = " ".join(describe_gen(i, g) for i, g in enumerate(world.gens))
    return text + (f" BROKEN {world.broken[0]}: {world.broken[1]}" if world.broken else "")


def describe_gen(i: int, g: GenWorld) -> str:
    """``g0=STREAMING(1/2, req 1) up=r1:1/2 stamps=v0 tip@c0:1 waiting``, compactly."""
    data = g.machine.data
    text = f"g{i}={g.machine.state.name}({data.tokens}/{data.budget}, req {data.requests})"
    if g.upstream is not None:
        up = g.upstream
        text += f" up={up.rid}:{up.produced}/{up.limit}{'!' if up.aborting else ''}"
    text += f" stamps={','.join(str(s) for s in g.stamps) or '-'}"
    if g.attachment is not None:
        text += f" {g.attachment.label}"
    if g.start_pending is not None:
        text += f" start-held(req {g.start_pending.request})"
    if g.drop_pending:
        text += " drop-held"
    if g.preparing:
        text += " preparing"
    text += f" {g.client.name.lower()}"
    return text + (f" commits={list(g.commits)}" if g.commits else "")


@attrs.frozen
class ChainRecord:
    """A chain, as the session controller keeps it: its machine's snapshot, the step its first step extends (0: none),
    the step ids it owns."""

    machine: Snapshot
    base: int
    steps: tuple[int, ...] = ()
    # Forgotten by the controller after DiscardChain.
    discarded: bool = False
