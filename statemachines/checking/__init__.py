"""The model checker: the explorer, and one world per composition of the real machines, all on one step mechanism.

- ``explorer``: the breadth-first explicit-state search (invariants, deadlocks, progress), shortest traces; no CLI;
- ``step``: the one step mechanism (``Step``, ``take``, ``Broken``, the memoized pure machine step);
- ``records`` and ``invariants``: what the worlds keep, and every invariant name (defined once);
- the worlds: ``gate_world`` (gate + abstract generations), ``session_world`` (session + chains + abstract
  generations), ``generation_world`` (gate + real GenerationMachines + an abstract session) and ``full_world``
  (gate + session + chains + real GenerationMachines); the last two share ``generation_step``;
- ``python -m statemachines.checking full|gate|session|generation``: explore a world and print its counts.

docs/model-checking.md describes the worlds, their bounds and abstractions, and the planted bugs.
"""
