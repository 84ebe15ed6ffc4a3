"""The test suite's conftest: it registers the plugins in tests/plugins/, one job each, and tells
pytest which scripts under tests/ are not tests.

- plugins/kill_seed.py: the seed of the random kill points, drawn once per run and printed;
- plugins/workers.py: the folder the pytest-xdist workers share, and `command_runs`, one run per
  launch for the session;
- plugins/built_site.py: the site, built once per run (`site_dir`), served (`served_site`), and one
  Chromium (`browser`);
- plugins/background.py: the site build and the SLURM round trip, started as the session begins;
- plugins/tiers.py: every test in one tier, the order they are handed out in, and --page;
- plugins/cpu_profile.py: --cpu-profile, each test's CPU and wall seconds;
- plugins/ci_skips.py: in CI, only a missing GPU or root may skip a test;
- plugins/update_outputs.py: --update-outputs, which tests/test_docs.py reads;
- plugins/summary.py: the closing line of what the run executed, and the machine's CPU over it."""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite("plugins")  # as in a conftest, a failed assert shows its values

# The options (--cpu-profile, --page, --update-outputs) are listed in `pytest --help` in this order.
PLUGINS = (
    "plugins.kill_seed",
    "plugins.workers",
    "plugins.built_site",
    "plugins.background",
    "plugins.cpu_profile",
    "plugins.tiers",
    "plugins.update_outputs",
    "plugins.ci_skips",
    "plugins.summary",
)

# Scripts that torchrun launches from the tests (faulty_scripts/ fail on purpose, exit_scripts/ test how a
# process exits, emulated_job/ makes a script's ranks emulated accelerators); never imported by pytest.
collect_ignore_glob = ["faulty_scripts/*", "exit_scripts/*", "emulated_job/*"]


def pytest_addoption(parser, pluginmanager):
    """Register the plugins. Pytest supports `pytest_plugins` only in the rootdir's own conftest (in one
    below it, as this is, it works while the conftest is loaded at startup and fails the run if it is
    found later); registering here works either way, and this is the first hook a conftest gets,
    early enough for the plugins' own options (--cpu-profile, --page, --update-outputs) to be parsed."""
    for name in PLUGINS:
        pluginmanager.import_plugin(name)
