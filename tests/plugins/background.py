"""The run's long waits, started in the background when the session begins: the site build and the
SLURM round trip take minutes of waiting but little CPU."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from plugins.built_site import build_shared_site
from plugins.workers import shared_folder
from support.slurm_runs import start_in_background


@pytest.fixture(scope="session", autouse=True)
def long_waits_in_the_background(request, tmp_path_factory):
    """What takes minutes of waiting but little CPU starts at once, in a thread of the first worker
    that gets here, so that no worker sits idle waiting for it: the site build (which every browser
    test needs) and the SLURM round trip (tests/test_slurm.py). Only when this session runs tests
    that need them, and only under pytest-xdist, where the workers share their results."""
    shared = shared_folder(tmp_path_factory)
    modules = {item.nodeid.split("::")[0] for item in request.session.items}
    threads = []
    if shared is not None and _first_to_ask(shared / "background.started"):
        if any(m.startswith("tests/test_site_") or m == "tests/test_routes.py" for m in modules):
            threads.append(threading.Thread(target=build_shared_site, args=(shared,), name="site", daemon=True))
        if "tests/test_slurm.py" in modules:
            threads.append(start_in_background(shared / "slurm"))
        for thread in threads:
            if thread is not None and thread.ident is None:  # start_in_background starts its own
                thread.start()
    yield
    for thread in threads:
        if thread is not None:
            thread.join()


def _first_to_ask(path: Path) -> bool:
    """True in exactly one process of those that share `path`'s folder: the first to create it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=False)
        return True
    except FileExistsError:
        return False
