"""What both servers of the system stand on, the proxy (``proxy/``) and the embedded engine (``engine/``).

- :mod:`serving.http_server`: a quart-trio app served by hypercorn in-process, with the stack's measured pitfalls
  handled, so that both servers get the same fixes.
- :mod:`serving.tokenizer_files`: the verified official tokenizer files of the served models (the
  ``dressage-tokenizers`` command), which both servers load.

It imports neither of them (``tests/tooling/test_package_imports.py``), so each can depend on it.
"""
