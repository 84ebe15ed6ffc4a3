"""The saved profile that the profiling page includes: rank 0's table records the machine, and shows the
gradient all_reduce next to the matmuls, as the page says."""

import json

import pytest

from distdocs import figures

from docexec.fences import REPO

pytestmark = pytest.mark.fast  # the test tier: see the testing page

TABLE = REPO / "measurements" / "profile-ddp-cpu.txt"
TRACE = REPO / "measurements" / "profile-trace-cpu.json"


def test_saved_table_records_the_machine_and_shows_the_all_reduce_next_to_the_matmuls():
    lines = TABLE.read_text().splitlines()
    assert lines[0].startswith("# rank 0 of 2, ") and "torch " in lines[0]
    operators = {line.split()[0] for line in lines[1:] if line.strip()}  # each row starts with its name
    assert {"c10d::allreduce_", "aten::mm", "aten::addmm"} <= operators, operators


def test_saved_trace_is_drawn_and_shows_the_wait_the_page_describes():
    trace = json.loads(TRACE.read_text())
    assert (REPO / "docs/assets/profile-trace-cpu.svg").read_text() == figures.profile_trace(trace)
    timeline = figures.trace_timeline(trace)
    assert len(timeline["steps"]) == 3  # "three profiled DDP steps"
    for a, b in timeline["steps"]:
        gaps = [g for g in timeline["gaps"] if a <= g[0] and g[1] <= b]
        widest = max(gaps, key=lambda g: g[1] - g[0])
        # "idle for several milliseconds at the end of each backward, while the last bucket's all_reduce runs"
        assert widest[1] - widest[0] >= max(1.0, 0.1 * (b - a)), (widest, a, b)
        assert figures.covered(widest, timeline["comm"]) >= 0.8, widest  # the main thread wakes a little after


def test_a_trace_without_steps_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="prof.step"):
        figures.trace_timeline({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 0, "dur": 1, "tid": 1}]})


def test_covered_counts_overlapping_spans_once():
    assert figures.covered([0, 10], [[2, 6], [4, 8], [9, 20]]) == pytest.approx(0.7)
    assert figures.covered([0, 10], []) == 0
