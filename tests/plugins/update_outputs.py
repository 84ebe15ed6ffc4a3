"""`pytest --update-outputs`: tests/test_docs.py rewrites the Output blocks in docs/ with what the
commands print now, instead of comparing them."""

from __future__ import annotations


def pytest_addoption(parser):
    parser.addoption(
        "--update-outputs",
        action="store_true",
        help="rewrite the Output blocks in docs/ with what the commands print now",
    )
