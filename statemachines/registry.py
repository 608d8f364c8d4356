"""Every machine of the package, in one place: the diagrams script and the generic table tests iterate over it.

Adding a machine is one line here (its class; the class carries its ``table``), then
``python -m statemachines.diagrams`` to write its diagrams.
"""

from __future__ import annotations

from statemachines.chain import ChainMachine
from statemachines.core import Machine
from statemachines.generation_machine import GenerationMachine
from statemachines.rollout_gate import RolloutGate
from statemachines.service_lifecycle import ServiceLifecycle
from statemachines.session import SessionMachine

# One entry per machine class; the diagram files are named after ``cls.table.machine``.
MACHINES: tuple[type[Machine], ...] = (
    RolloutGate,
    SessionMachine,
    ChainMachine,
    GenerationMachine,
    ServiceLifecycle,
)
