"""`make audit` itself needs node and minutes, so `make test` checks what it saved and how it fails:
the table on the testing page is the one its records make, and without node it skips in one line."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest

from docexec.fences import REPO
from tools import lighthouse_audit


@pytest.mark.fast
def test_saved_table_is_the_one_the_saved_records_make():
    saved = json.loads((REPO / "measurements/lighthouse.json").read_text())
    lines = (REPO / "measurements/lighthouse.txt").read_text().splitlines()
    machine = saved["machine"]
    assert lines[0].startswith(f"# {machine['cpu']}, {machine['cores']} cores, ") and machine["date"] in lines[0]
    assert "\n".join(lines[1:]) == lighthouse_audit.table(saved["records"])
    pages = {r["page"] for r in saved["records"]}
    assert pages == set(lighthouse_audit.PAGES)
    assert all(0 <= r[c] <= 100 for r in saved["records"] for c in lighthouse_audit.CATEGORIES)
    for r in saved["records"]:  # the performance shown is the median of the runs saved with it
        assert len(r["performance_runs"]) == machine["runs"]
        assert r["performance"] == statistics.median(r["performance_runs"])
    assert '--8<-- "lighthouse.txt"' in (REPO / "docs/appendix/testing.md").read_text()


@pytest.mark.processes
def test_without_node_it_skips_in_one_line_and_exits_0(tmp_path):
    python = tmp_path / "bin"
    python.mkdir()
    (python / "python").symlink_to(sys.executable)  # a PATH with Python and nothing else
    result = subprocess.run(
        [str(python / "python"), "-m", "tools.lighthouse_audit"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "PATH"} | {"PATH": str(python)},
    )
    assert result.returncode == 0, result.stderr
    said = "audit skipped: Lighthouse needs node and npm, and this machine has none"
    assert result.stdout.strip().splitlines() == [said]
