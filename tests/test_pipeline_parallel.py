"""docs/deep-dives/pipeline-schedules.md, interleaving and zero bubble, and the bubble that
docs/lesson/pipeline-parallelism.md measures: what the
schedules' run shows (its one launch is shared with test_docs.py, which checks the excerpt, and
test_examples.py, which checks the self-check), and what the saved longer run and its figure say."""

from __future__ import annotations

import json
import re

import pytest

from distdocs import figures
from distdocs.training.pipeline import bubble_fraction

from docexec.fences import REPO
from support.runs import check_refusal

SCRIPT = "examples/pipeline_parallel/step03_schedules.py"
COMMAND = f"torchrun --standalone --nproc_per_node=2 {SCRIPT}"
SAVED = REPO / "measurements" / "pipeline-schedules-cpu.json"
HEADER = re.compile(r"^p=2 ranks, m=4 micro-batches of (\d+), (\d+) layers of width (\d+)$", re.M)
ROW = re.compile(r"^(\w+)\s+(\d)\s+(\d+)%\s+(\d+)%, (\d+)%\s+([\d.]+), ([\d.]+)\s+(\d+), (\d+)\s+(\d+)$", re.M)
# What the schedules' shapes fix, for p = 2 ranks and m = 4 micro-batches: stages a rank, the
# micro-batches in flight at the peak on ranks 0 and 1, and the activation sends a step.
SHAPES = {
    "GPipe": (1, 4, 4, 4),
    "1F1B": (1, 2, 1, 4),
    "Interleaved1F1B": (2, 2.5, 1.5, 12),
    "InterleavedZeroBubble": (2, 2, 2, 12),
    "ZBVZeroBubble": (2, 2, 2, 8),
}


@pytest.mark.processes
def test_each_schedule_holds_and_sends_what_its_shape_says(command_runs):
    result = command_runs.run_ok(COMMAND)
    rows = {r[0]: r[1:] for r in ROW.findall(result.stdout)}
    rows_per_microbatch, layers, width = map(int, HEADER.search(result.stdout).groups())
    assert rows.keys() == SHAPES.keys(), result.describe()
    for name, (v, peak0, peak1, sends) in SHAPES.items():
        stages, formula, _, _, p0, p1, kib0, kib1, sent = rows[name]
        assert int(stages) == v and int(formula) == round(100 * bubble_fraction(2, 4, v)), name
        assert (float(p0), float(p1), int(sent)) == (peak0, peak1, sends), name
        # A stage keeps, for each micro-batch, its input and each of its layers' outputs, float32.
        chunk_kib = (layers // (2 * v) + 1) * rows_per_microbatch * width * 4 // 1024
        assert int(kib0) == peak0 * v * chunk_kib and int(kib1) == peak1 * v * chunk_kib, name


@pytest.mark.processes
def test_a_micro_batch_count_that_the_rounds_cannot_split_gets_one_line():
    check_refusal(
        f"{COMMAND} --microbatches 5",
        "error: torch's interleaved schedules run m micro-batches in max(1, m // p) equal rounds: 5 does not "
        "split into 2 on 2 ranks; try 4 or 6",
    )


@pytest.mark.fast
def test_the_saved_run_and_its_figure_support_what_the_page_says():
    data = json.loads(SAVED.read_text())
    assert {"machine", "cores", "torch", "ranks", "date"} <= data["machine"].keys()
    assert (REPO / "docs/assets/pipeline-schedules-cpu.svg").read_text() == figures.pipeline_schedules(data)
    summary = (REPO / "docs/assets/pipeline-schedules-summary-cpu.svg").read_text()
    assert summary == figures.pipeline_schedules_summary(data)
    runs = data["schedules"]
    for name, (v, peak0, peak1, sends) in SHAPES.items():
        ranks = runs[name]["ranks"]
        assert [r["peak"] / v for r in ranks] == [peak0, peak1] and sum(r["sends"] for r in ranks) == sends
    idle = {name: [r["idle"] for r in s["ranks"]] for name, s in runs.items()}
    busy = {name: [sum(end - start for start, end, *_ in r["spans"]) for r in s["ranks"]] for name, s in runs.items()}
    ends = {name: max(span[1] for r in s["ranks"] for span in r["spans"]) for name, s in runs.items()}
    # "Both ranks idle more than the formulas say. ... Interleaving still idles less than 1F1B on both."
    assert all(i > runs[name]["formula"] for name in runs for i in idle[name])
    assert all(a < b for a, b in zip(idle["Interleaved1F1B"], idle["1F1B"]))
    # "the zero-bubble schedules compute more: ScheduleInterleavedZeroBubble computes longest of all.
    # ZBV idles least on rank 1, yet its step ends after interleaved 1F1B's."
    assert all(max(busy, key=lambda name: busy[name][rank]) == "InterleavedZeroBubble" for rank in (0, 1))
    assert min(idle, key=lambda name: idle[name][1]) == "ZBVZeroBubble"
    assert ends["ZBVZeroBubble"] > ends["Interleaved1F1B"]


# --- the bubble on emulated accelerators: bench bubble ---

BUBBLE = REPO / "measurements/pipeline-bubble-cpu.json"


def within_the_bubble(records: list[dict]) -> dict:
    """Each point's stages whose median idle share is off the formula by more than 0.10 of the step."""
    return {
        (r["schedule"], r["stages"], r["microbatches"]): [round(v, 3) for v in r["idle_median"]]
        for r in records
        if any(abs(v - r["bubble"]) > 0.10 for v in r["idle_median"])
    }


@pytest.mark.processes
def test_the_bubble_on_emulated_stages_is_the_formula_live(command_runs):
    """The page's `distdocs bench bubble`: GPipe and 1F1B, 2 and 4 stages, 1 to 8 micro-batches, each
    stage's idle share from its own timestamps within 0.10 of the step of (p-1)/(m+p-1), never below it
    by more than 0.02 (a stage cannot idle less than the fill and the drain), and falling with m."""
    from docexec.fences import page_command

    (run,) = command_runs.run_ok(page_command("docs/lesson/pipeline-parallelism.md", "bench bubble")).records
    records = run["records"]
    assert {(r["schedule"], r["stages"]) for r in records} == {(s, p) for s in ("gpipe", "1f1b") for p in (2, 4)}
    assert not within_the_bubble(records), records
    assert all(min(r["idle_median"]) >= r["bubble"] - 0.02 for r in records), records
    for schedule in ("gpipe", "1f1b"):
        for p in (2, 4):
            line = sorted(
                (r for r in records if (r["schedule"], r["stages"]) == (schedule, p)), key=lambda r: r["microbatches"]
            )
            idle = [max(r["idle_median"]) for r in line]
            assert idle == sorted(idle, reverse=True), (schedule, p, idle)


@pytest.mark.fast
def test_the_saved_bubble_run_draws_the_pages_figure_and_holds_the_formula():
    from distdocs.bench import bubble

    data = json.loads(BUBBLE.read_text())
    assert (REPO / "docs/assets/pipeline-bubble-cpu.svg").read_text() == bubble.plot(data["records"], data["machine"])
    assert not within_the_bubble(data["records"])
    assert all(r["bubble"] == bubble_fraction(r["stages"], r["microbatches"]) for r in data["records"])


@pytest.mark.fast
def test_1f1b_fills_with_fewer_forwards_on_later_stages_and_runs_every_op_once():
    from distdocs.lab.emulated_pipeline import schedule

    for p, m in ((2, 1), (4, 8), (4, 2)):
        for s in range(p):
            for name in ("gpipe", "1f1b"):
                ops = schedule(name, s, p, m)
                assert sorted(ops) == sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
                assert all(ops.index(("F", i)) < ops.index(("B", i)) for i in range(m))
            warm = schedule("1f1b", s, p, m)
            first_backward = next(i for i, (op, _) in enumerate(warm) if op == "B")
            assert first_backward == min(p - s, m)  # p - 1 - s forwards to fill, then one more
