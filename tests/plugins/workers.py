"""What the pytest-xdist workers of one run share: a folder, and through it one run per
launch for the whole session (`command_runs`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.runs import CheckedRuns


def shared_folder(tmp_path_factory) -> Path | None:
    """Under pytest-xdist, a folder that every worker of this run shares (their base temp folders'
    parent); None in a run of one process."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return tmp_path_factory.getbasetemp().parent / "distdocs-shared"


@pytest.fixture(scope="session")
def workers_folder(tmp_path_factory) -> Path | None:
    """The folder that every pytest-xdist worker of this run shares; None in a run of one process."""
    return shared_folder(tmp_path_factory)


@pytest.fixture(scope="session")
def command_runs(tmp_path_factory) -> CheckedRuns:
    return CheckedRuns(shared_folder(tmp_path_factory))
