"""Controllers: own the state machines, feed them events, carry out their effects (the trio side of the proxy).

``session_registry.SessionRegistry`` is the session layer's entry point (prepare, commit, drop, finalize, read).
"""
