"""Pure, synchronous, sans-IO state machines of dressage-proxy, and the explorer that model-checks them.

Nothing in this package performs I/O, reads a clock, draws a random number or logs: a machine takes an event with
``send(event)`` and returns the effects its controller (in ``proxy/``) must carry out. ``core`` holds the shared
pieces (the error type, the table helper, diagram rendering); one module per machine; ``registry`` lists them;
``explorer`` and ``compositions`` model-check machines composed with abstract peers. Importing this package imports
nothing else, so ``import statemachines.rollout_gate`` stays as light as the module itself.
"""
