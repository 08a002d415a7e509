"""Shared helpers for the test suite, imported as ``tests.support.<module>`` (pyproject's
``pythonpath`` puts the repository root on ``sys.path``). Real upstream data lives in
``tests/fixtures/``; ``tests.support.fixtures`` names it."""
