"""Shared fixtures: one run per distinct command for the whole session, one site build, one server and
one browser for the site's tests; the test tiers; and the closing count of what was executed."""

from __future__ import annotations

import json
import os
import random
import resource
import time
from collections import Counter
from pathlib import Path

import pytest

from distdocs.lab.world import forked_cpu_seconds

from docexec.commands import CommandRuns, command_env, file_lock, run_command
from docexec.fences import REPO
from tools.browser import CHROMIUM, launch_chromium, serve_directory

# Scripts that torchrun launches from the tests (faulty_scripts/ fail on purpose, exit_scripts/ test how a
# process exits); never imported by pytest.
collect_ignore_glob = ["faulty_scripts/*", "exit_scripts/*"]


def pytest_configure(config):
    """One seed for the random kill points of test_fault_tolerance.py, drawn here unless given, so that
    every pytest-xdist worker (they inherit the environment) draws the same points."""
    os.environ.setdefault("DISTDOCS_KILL_SEED", str(random.SystemRandom().randrange(2**32)))


def pytest_report_header(config):
    return f"kill points drawn with DISTDOCS_KILL_SEED={os.environ['DISTDOCS_KILL_SEED']} (set it to run them again)"


def pytest_addoption(parser):
    parser.addoption(
        "--cpu-profile",
        metavar="FILE",
        help="append each test's CPU seconds (its own and its children's) and wall seconds to FILE, one JSON line each",
    )
    parser.addoption(
        "--update-outputs",
        action="store_true",
        help="rewrite the Output blocks in docs/ with what the commands print now",
    )


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
def command_runs(tmp_path_factory) -> CommandRuns:
    return CommandRuns(shared_folder(tmp_path_factory))


def _cpu_seconds() -> float:
    """This process's CPU, its ended children's, and that of the World ranks it had forked (their
    forkserver reaps them, so RUSAGE_CHILDREN does not see them)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + forked_cpu_seconds()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With --cpu-profile: on 2 cores the suite's time is bounded by the CPU its tests use, not by their
    wall time, so record both. Children count once they have been waited for: a command's processes
    when it ends, a session's browser when the session ends (charged to the last test)."""
    path = item.config.getoption("--cpu-profile")
    if not path:
        return (yield)
    cpu, wall = _cpu_seconds(), time.monotonic()
    try:
        return (yield)
    finally:
        line = {
            "test": item.nodeid,
            "tier": next((m.name for m in item.iter_markers() if m.name in TIERS), ""),
            "cpu_s": round(_cpu_seconds() - cpu, 2),
            "wall_s": round(time.monotonic() - wall, 2),
        }
        with open(path, "a") as sink:
            sink.write(json.dumps(line) + "\n")


# In CI (CI set), a skip is allowed only for what CI's machine cannot have: a GPU, and root for a run
# that is not root (CI's is). Anything else skipped there (no SLURM, no chromium, links that cannot be
# built) would pass a run that checked less than it claims.
ALLOWED_IN_CI = ("GPU", "CUDA")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.skipped and os.environ.get("CI") and isinstance(report.longrepr, tuple):
        reason = report.longrepr[2]
        allowed = any(word in reason for word in ALLOWED_IN_CI) or ("root" in reason and os.geteuid() != 0)
        if not allowed:
            report.outcome = "failed"
            report.longrepr = f"skipped in CI, where only a GPU or root may be missing: {reason}"
    return report


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
    if os.environ.get("DISTDOCS_SITE_DIR"):  # the folder to publish from: the site these tests checked
        out = Path(os.environ["DISTDOCS_SITE_DIR"]).resolve()
        done = out.with_name(out.name + ".built-by-tests")
        with file_lock(out.with_name(out.name + ".lock")):
            if not done.exists() or done.read_text() != str(tmp_path_factory.getbasetemp().parent):
                build_site(out)
                done.write_text(str(tmp_path_factory.getbasetemp().parent))  # this run's, not an older one's
        return out
    if shared is None:
        out = tmp_path_factory.mktemp("site")
        build_site(out)
        return out
    out, done = shared / "site", shared / "site.built"
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


def pytest_terminal_summary(terminalreporter):
    """Say how much of the docs this run executed: the closing line that the README and the testing page quote."""
    counts: Counter[str] = Counter()
    for report in terminalreporter.stats.get("passed", []):
        if report.when != "call":
            continue
        if "::line" in report.nodeid or "[line" in report.nodeid:
            counts["inline python fences"] += 1
        for key, value in report.user_properties:
            if key == "executed":
                counts[value] += 1
    if not counts:
        return
    order = [
        "inline python fences",
        "examples",
        "shell commands",
        "output blocks checked",
        "fences not executed (each with its reason)",
    ]
    line = ", ".join(f"{counts[k]} {k}" for k in order)
    terminalreporter.write_sep("-", f"distdocs executed: {line}")


TIERS = ("fast", "processes", "site")  # pyproject.toml says what each means; the testing page, why


def pytest_collection_modifyitems(config, items):
    """Every test is in exactly one tier, or the collection fails. The pages' inline python fences
    (collected by pytest-markdown-docs from docs/) are small in-process blocks: the fast tier.

    The site's tests go first: pytest-xdist hands each worker a first chunk of consecutive tests (a
    quarter of its share), so one worker gets them all, with one build and one browser, and starts the
    longest of them early. (pytest-xdist 3.8's --dist loadgroup does not group on pytest 9.2, whose
    node ids it cannot rewrite; site_dir shares one build across workers in any case.)"""
    untiered = []
    for item in items:
        if item.nodeid.startswith("docs/"):
            item.add_marker(pytest.mark.fast)
        tiers = {m.name for m in item.iter_markers() if m.name in TIERS}
        if len(tiers) != 1 and item.get_closest_marker("upstream") is None:
            untiered.append(f"{item.nodeid}: {', '.join(sorted(tiers)) or 'no tier'}")
    items.sort(key=lambda item: item.get_closest_marker("site") is None)  # stable: the rest keep their order
    if untiered:
        raise pytest.UsageError(
            "every test needs exactly one tier marker, " + " or ".join(TIERS) + ":\n  " + "\n  ".join(untiered)
        )
