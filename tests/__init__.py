"""The test suite. A package so that pytest imports ``tests/engine/`` as ``tests.engine``: without this file it
would put ``tests/`` on ``sys.path`` and import that folder as ``engine``, shadowing the engine package it tests."""
