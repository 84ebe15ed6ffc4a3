"""Shared fixtures: one run per distinct command for the whole session, one site build, one server and
one browser for the site's tests; the test tiers; and the closing count of what was executed."""

from __future__ import annotations

import json
import os
import random
import resource
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from distdocs.lab.world import forked_cpu_seconds

from docexec.commands import CommandRuns, command_env, file_lock, run_command
from docexec.fences import REPO
from tools.browser import CHROMIUM, launch_chromium, serve_directory

# Scripts that torchrun launches from the tests (faulty_scripts/ fail on purpose, exit_scripts/ test how a
# process exits, emulated_job/ makes a script's ranks emulated accelerators); never imported by pytest.
collect_ignore_glob = ["faulty_scripts/*", "exit_scripts/*", "emulated_job/*"]


def pytest_configure(config):
    """One seed for the random kill points of test_fault_tolerance.py, drawn here unless given, so that
    every pytest-xdist worker (they inherit the environment) draws the same points."""
    os.environ.setdefault("DISTDOCS_KILL_SEED", str(random.SystemRandom().randrange(2**32)))


def machine_cpu_seconds() -> float:
    """CPU seconds every process on this machine has used since boot (Linux /proc/stat): user, nice,
    system, irq and softirq. Over a run, what the suite spent, orphaned helpers included."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    return sum(int(fields[i]) for i in (0, 1, 2, 5, 6)) / os.sysconf("SC_CLK_TCK")


def pytest_sessionstart(session):
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller, or a run of one process
        session.config.stash[START] = (time.monotonic(), machine_cpu_seconds())


START = pytest.StashKey[tuple]()


def pytest_report_header(config):
    return f"kill points drawn with DISTDOCS_KILL_SEED={os.environ['DISTDOCS_KILL_SEED']} (set it to run them again)"


def pytest_addoption(parser):
    parser.addoption(
        "--cpu-profile",
        metavar="FILE",
        help="append each test's CPU seconds (its own and its children's) and wall seconds to FILE, one JSON line each",
    )
    parser.addoption(
        "--page",
        metavar="docs/PAGE.md",
        help="run what one page shows (its inline fences, commands, output blocks and the examples it "
        "includes) and the fast tier, and nothing else: `make test-page PAGE=...`",
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
            threads.append(threading.Thread(target=_build_shared_site, args=(shared,), name="site", daemon=True))
        if "tests/test_slurm.py" in modules:
            import test_slurm  # tests/ is on sys.path: pytest imported it from there

            threads.append(test_slurm.start_in_background(shared / "slurm"))
        for thread in threads:
            if thread is not None and not thread.is_alive():
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
    if shared is None:
        out = _publish_folder() or tmp_path_factory.mktemp("site")
        build_site(out)
        return out
    return _build_shared_site(shared)


def _publish_folder() -> Path | None:
    """DISTDOCS_SITE_DIR, where the Pages workflow wants the site the tests checked; else None."""
    folder = os.environ.get("DISTDOCS_SITE_DIR")
    return Path(folder).resolve() if folder else None


def _build_shared_site(shared: Path) -> Path:
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
    if START in terminalreporter.config.stash:
        wall, cpu = terminalreporter.config.stash[START]
        wall, cpu = time.monotonic() - wall, machine_cpu_seconds() - cpu
        terminalreporter.write_sep("-", f"the machine's CPU over the run: {cpu:.0f} s in {wall:.0f} s of wall time")


TIERS = ("fast", "processes", "site")  # pyproject.toml says what each means; the testing page, why


def pytest_collection_modifyitems(config, items):
    """Every test is in exactly one tier, or the collection fails. The pages' inline python fences
    (collected by pytest-markdown-docs from docs/) are small in-process blocks: the fast tier. Then the
    tests are put in the order they are handed out (longest_first)."""
    untiered = []
    for item in items:
        if item.nodeid.startswith("docs/"):
            item.add_marker(pytest.mark.fast)
        tiers = {m.name for m in item.iter_markers() if m.name in TIERS}
        if len(tiers) != 1 and item.get_closest_marker("upstream") is None:
            untiered.append(f"{item.nodeid}: {', '.join(sorted(tiers)) or 'no tier'}")
    items.sort(key=lambda item: item.get_closest_marker("site") is None)  # stable: the rest keep their order
    if config.getoption("--page"):
        keep = [item for item in items if item.get_closest_marker("fast") or shows(config.getoption("--page"), item)]
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep
    if untiered:
        raise pytest.UsageError(
            "every test needs exactly one tier marker, " + " or ".join(TIERS) + ":\n  " + "\n  ".join(untiered)
        )


DURATIONS = REPO / "measurements/test-durations.json"  # each test's wall seconds in a profiled run


def longest_first(items: list, config) -> list:
    """The order the workers take the tests in: the longest first, by the last profiled run
    (tools/suite_profile.py), so that the workers finish together rather than one ending with a long
    test after the others are done; `make test` gives pytest-xdist --maxschedchunk 1, so each worker
    takes the next test when it is free. The site's tests wait out the first round: the site they
    check is still being built then (long_waits_in_the_background). A test not in the profile yet
    counts as a second."""
    recorded = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    ordered = sorted(items, key=lambda item: -recorded.get(item.nodeid, 1.0))  # stable for equal times
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    site = [item for item in ordered if item.get_closest_marker("site")]
    rest = [item for item in ordered if not item.get_closest_marker("site")]
    first_round = 2 * workers  # pytest-xdist keeps two tests pending on each worker
    return rest[:first_round] + site + rest[first_round:]


def shows(page: str, item) -> bool:
    """Whether `item` runs what `page` shows: a command, output or excerpt of the page (test_docs.py's
    tests, whose ids name the page and line), one of its inline fences, or an example it includes."""
    from docexec.fences import REPO, classify

    page = page.removeprefix("./")
    if f"[{page}:" in item.nodeid or item.nodeid.startswith(f"{page}::"):
        return True
    if "test_example_passes_its_self_check[" in item.nodeid:
        included = {t.split(":")[0] for f in classify(REPO / page) for t in f.includes}
        example = item.nodeid.split("[", 1)[1].rstrip("]").removeprefix("examples/")
        return example in included
    return False
