"""The committed diagrams are the tables: regenerate and compare; and table hygiene for every registered machine."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import statemachines
from statemachines import diagrams
from statemachines.core import Machine
from statemachines.registry import MACHINES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "statemachines"


@pytest.mark.parametrize("name", sorted(diagrams.generated_files()))
def test_diagrams_committed_file_matches_the_table(name):
    committed = DOCS / name
    assert committed.exists(), f"{committed} is missing: run python -m statemachines.diagrams"
    assert committed.read_text(encoding="utf-8") == diagrams.generated_files()[name], (
        f"{committed} differs from the table: run python -m statemachines.diagrams"
    )


def test_diagrams_script_check_mode_passes_on_the_repository_and_fails_on_a_stale_copy(tmp_path, capsys):
    assert diagrams.main(["--check"]) == 0
    # A root with no diagrams is stale; writing fixes it; a hand edit makes it stale again.
    assert diagrams.main(["--check", "--root", str(tmp_path)]) == 1
    assert diagrams.main(["--root", str(tmp_path)]) == 0
    assert diagrams.main(["--check", "--root", str(tmp_path)]) == 0
    page = tmp_path / "docs" / "statemachines" / "RolloutGate.md"
    page.write_text(page.read_text(encoding="utf-8").replace("PAUSED", "STOPPED"), encoding="utf-8")
    assert diagrams.main(["--check", "--root", str(tmp_path)]) == 1
    assert "RolloutGate.md" in capsys.readouterr().out


def test_registry_lists_every_machine_class_defined_in_the_package():
    defined = set()
    for info in pkgutil.iter_modules(statemachines.__path__):
        module = importlib.import_module(f"statemachines.{info.name}")
        defined |= {
            cls for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, Machine) and cls is not Machine and cls.__module__ == module.__name__
        }
    assert defined == set(MACHINES)
    assert len({machine.table.machine for machine in MACHINES}) == len(MACHINES)


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.__name__)
def test_registered_table_documents_every_state_event_and_effect_in_one_line(machine):
    table = machine.table
    assert all(isinstance(state.value, str) and state.value and "\n" not in state.value for state in table.states)
    effects = {effect for row in table.rows.values() for branch in row.branches for effect in branch.effects}
    for thing in (*table.events, *effects):
        assert thing.__doc__ and len(thing.__doc__.strip().splitlines()) == 1, thing


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.__name__)
def test_registered_table_reaches_every_state_from_the_initial_one(machine):
    table = machine.table
    reached, todo = {table.initial}, [table.initial]
    while todo:
        state = todo.pop()
        for (source, _), row in table.rows.items():
            for branch in row.branches if source is state else ():
                if branch.target not in reached:
                    reached.add(branch.target)
                    todo.append(branch.target)
    # The error state of a fail-closed machine is reached by illegal events, not by rows.
    assert reached | {table.error_state} - {None} == set(table.states)
