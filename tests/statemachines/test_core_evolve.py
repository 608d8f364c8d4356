"""``statemachines.core.evolve`` means what ``attrs.evolve`` means, for every machine's data record; machine states
hash by identity and still find their rows."""

from __future__ import annotations

import enum
import typing

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from statemachines import chain, generation, rollout_gate, service_lifecycle, session
from statemachines.core import MachineState, evolve
from statemachines.registry import MACHINES

#: Every machine's data record (the classes ``evolve`` runs on in the proxy).
RECORDS = (
    generation.GenerationData, chain.ChainData, rollout_gate.GateData, service_lifecycle.LifecycleData,
    session.SessionData,
)


def _value(field: attrs.Attribute) -> st.SearchStrategy:
    """Values of a field's type, some of them ones its validators refuse (negative counts, a zero step limit)."""
    options = []
    for kind in typing.get_args(field.type) or (field.type,):
        if kind is type(None):
            options.append(st.none())
        elif kind is bool:
            options.append(st.booleans())
        elif kind is int:
            options.append(st.integers(min_value=-2, max_value=50))
        elif kind is str:
            options.append(st.text(max_size=3))
        elif isinstance(kind, type) and issubclass(kind, enum.Enum):
            options.append(st.sampled_from(list(kind)))
        else:
            raise AssertionError(f"no values for {field.name}: {kind!r}")
    return st.one_of(options)


for _record in RECORDS:
    attrs.resolve_types(_record)


@st.composite
def record_and_changes(draw: st.DrawFn) -> tuple[object, dict]:
    cls = draw(st.sampled_from(RECORDS))
    fields = [field for field in attrs.fields(cls) if field.init]
    base = None
    while base is None:
        try:
            base = cls(**{field.alias: draw(_value(field)) for field in fields})
        except (ValueError, TypeError):
            base = None
    changed = draw(st.lists(st.sampled_from(fields), unique=True, max_size=4))
    return base, {field.alias: draw(_value(field)) for field in changed}


def _outcome(build):
    try:
        return "ok", build()
    except (ValueError, TypeError) as error:
        return "refused", type(error)


@given(record_and_changes())
def test_evolve_builds_what_attrs_evolve_builds_and_refuses_what_it_refuses(case):
    record, changes = case
    assert _outcome(lambda: evolve(record, **changes)) == _outcome(lambda: attrs.evolve(record, **changes))


def test_evolve_runs_the_validators_and_refuses_unknown_names():
    gate = rollout_gate.GateData()
    with pytest.raises(ValueError):
        evolve(gate, in_flight=-1)
    with pytest.raises(TypeError):
        evolve(gate, no_such_field=1)
    assert evolve(gate) == gate


def test_evolve_refuses_a_record_with_keyword_only_fields():
    @attrs.frozen
    class KeywordOnly:
        count: int = attrs.field(kw_only=True)

    with pytest.raises(TypeError, match="keyword-only"):
        evolve(KeywordOnly(count=1), count=2)


def test_every_machine_state_is_a_MachineState_and_its_rows_are_found():
    for machine in MACHINES:
        table = machine.table
        assert issubclass(table.states, MachineState)
        for (state, event) in table.rows:
            # the member hashes by identity: the same member finds its row, a look-alike value does not
            assert hash(state) == object.__hash__(state)
            assert table.rows[(table.states[state.name], event)] is table.rows[(state, event)]
