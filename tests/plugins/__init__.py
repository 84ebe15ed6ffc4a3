"""The test suite's pytest plugins: hooks and fixtures, one job to a module, which tests/conftest.py
registers. Plain helpers that tests share live in tests/support/ instead."""
