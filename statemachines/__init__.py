"""Pure, synchronous, sans-IO state machines of dressage-proxy, and the explorer that model-checks them.

Nothing in this package performs I/O, reads a clock, draws a random number or logs: a machine takes an event with
``send(event)`` and returns the effects its controller (in ``proxy/``) must carry out. ``core`` holds the shared
pieces (the error type, the table helper, diagram rendering); one module per machine; ``registry`` lists them;
the ``checking`` package model-checks machines composed with abstract peers (its explorer, one world per composition
on one step mechanism, and ``python -m statemachines.checking``). Importing this package imports
nothing else, so ``import statemachines.rollout_gate`` stays as light as the module itself.
"""
