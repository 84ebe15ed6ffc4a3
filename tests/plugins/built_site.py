"""The site as the site's tests see it: built once per run by `mkdocs build --strict`, served on
127.0.0.1, and one headless Chromium for every test of the session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from docexec.commands import command_env, run_command
from docexec.fences import REPO
from docexec.shared_runs import file_lock
from plugins.workers import shared_folder
from tools.browser import CHROMIUM, launch_chromium, serve_directory


def build_site(out: Path) -> None:
    env = command_env(gpu=False) | {"NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its successor
    result = run_command(f"mkdocs build --strict --site-dir {out}", timeout_s=180, cwd=REPO, env=env)
    assert result.returncode == 0, result.describe()
    warnings = [ln for ln in result.stderr.splitlines() if ln.startswith("WARNING")]
    assert not warnings, warnings


@pytest.fixture(scope="session")
def site_dir(tmp_path_factory) -> Path:
    """The site, built once per run by `mkdocs build --strict` with no warning; every test_site_* module
    reads it. Under pytest-xdist the first worker to need it builds it under a lock, in the folder the
    workers share, and the others wait for it and read the same files. With DISTDOCS_SITE_DIR set, it
    is built there instead, for the Pages workflow to publish what the tests checked."""
    shared = shared_folder(tmp_path_factory)
    if shared is None:
        out = _publish_folder() or tmp_path_factory.mktemp("site")
        build_site(out)
        return out
    return build_shared_site(shared)


def _publish_folder() -> Path | None:
    """DISTDOCS_SITE_DIR, where the Pages workflow wants the site the tests checked; else None."""
    folder = os.environ.get("DISTDOCS_SITE_DIR")
    return Path(folder).resolve() if folder else None


def build_shared_site(shared: Path) -> Path:
    """The site, in the folder the workers share (or the one to publish): built once per session, by
    the first to ask, under a lock; the others wait for it."""
    out, done = _publish_folder() or shared / "site", shared / "site.built"
    with file_lock(shared / "site.lock"):
        if not done.exists():
            build_site(out)
            done.touch()
    return out


@pytest.fixture(scope="session")
def served_site(site_dir):
    """The built site on 127.0.0.1 at a free port: its base URL."""
    with serve_directory(site_dir) as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium, headless, through Playwright, one for every test of the session; each test
    opens its own contexts (an empty cache, a colour scheme). Skips where there is none, except in
    CI, which must have it."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail("CI needs Debian's chromium at /usr/bin/chromium; `make test` installs it as root")
        pytest.skip("no /usr/bin/chromium; `make test` installs it when run as root")
    with launch_chromium() as browser:
        yield browser
