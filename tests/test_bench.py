"""distdocs bench: the harness, the records each benchmark reports, the saved data the pages quote
(each saved table is generated from its data, and each claim a page makes of it holds, with the
margin stated), and bad input."""

from __future__ import annotations

import json
import re

import pytest

from distdocs import cli
from distdocs.arguments import UsageError, parse_size
from distdocs.bench import (
    allreduce,
    bubble,
    buckets,
    checkpointing,
    compression,
    ddp,
    ddp_steps,
    emulated,
    exits,
    hierarchy,
    killed_run,
    pipeline,
    precision,
    prediction,
    recovery,
    scaling,
)
from distdocs.bench import slurm as slurm_bench
from distdocs.bench import torchft as torchft_bench
from distdocs.bench.harness import median_after_warmup, merge_runs
from distdocs.calculators.costmodel import Network

from docexec.fences import REPO, page_command

SAVED = REPO / "measurements"
NCCL_TESTS_FIELDS = {"impl", "world_size", "bytes", "time_s", "algbw_gbps", "busbw_gbps", "busbw_ratio_vs_gloo"}


def saved(name: str) -> dict:
    return json.loads((SAVED / f"{name}.json").read_text())


@pytest.mark.fast
def test_parse_size_takes_binary_units():
    assert [parse_size(s) for s in ["4096", "256K", "4M", "1G", "4MB", "4MiB"]] == [
        4096,
        262144,
        4 << 20,
        1 << 30,
        4 << 20,
        4 << 20,
    ]
    for bad in ["3", "0", "abc", "1.5M", "-4K"]:
        with pytest.raises(UsageError, match="bad size"):
            parse_size(bad)


@pytest.mark.fast
def test_median_leaves_out_the_warmup():
    assert median_after_warmup([100.0, 50.0, 1.0, 2.0, 3.0], warmup=2) == 2.0
    with pytest.raises(ValueError):
        median_after_warmup([1.0, 2.0], warmup=2)


@pytest.mark.parametrize(
    "module, name",
    [
        (allreduce, "allreduce-cpu"),
        (allreduce, "allreduce-links-cpu"),
        (pipeline, "pipeline-cpu"),
        (ddp, "ddp-cpu"),
        (buckets, "ddp-buckets-cpu"),
        (precision, "precision-cpu"),
        (scaling, "scaling-cpu"),
        (prediction, "prediction-cpu"),
        (prediction, "prediction-links-cpu"),
        (compression, "compression-links-cpu"),
        (hierarchy, "hierarchy-links-cpu"),
        (recovery, "recovery-cpu"),
        (checkpointing, "checkpointing-cpu"),
        (slurm_bench, "slurm-recovery-cpu"),
        (torchft_bench, "torchft-recovery-cpu"),
        (exits, "exits-cpu"),
        (emulated, "emulated-links-cpu"),
        (emulated, "emulated-ranks-cpu"),
        (bubble, "pipeline-bubble-cpu"),
    ],
)
@pytest.mark.fast
def test_saved_table_is_generated_from_its_data(module, name):
    data = saved(name)
    assert {"cpu", "cores", "torch", "backend", "date"} <= data["machine"].keys()
    assert (SAVED / f"{name}.txt").read_text().strip() == module.format_table(data["records"], data["machine"])


def page_run(command_runs, command: str) -> tuple[list[dict], dict]:
    """The records of a benchmark command that a page shows (its one run, shared with test_docs), and
    the flags it was given."""
    (run,) = command_runs.run_ok(command).records
    flags = dict(re.findall(r"--([\w-]+) (\S+)", command))
    return run["records"], flags


@pytest.mark.processes
def test_the_collectives_pages_allreduce_run_reports_every_implementation_with_nccl_tests_definitions(command_runs):
    records, flags = page_run(command_runs, page_command("docs/lesson/collectives.md", "bench allreduce --world-sizes"))
    sizes = [parse_size(s) for s in flags["sizes"].split(",")]
    impls = ["gloo", "ring", "tree", "naive"]
    assert [(r["impl"], r["bytes"]) for r in records] == [(i, b) for b in sizes for i in impls] + [("check", 48)]
    n = int(flags["world-sizes"])
    for r in records:
        assert NCCL_TESTS_FIELDS <= r.keys() and r["time_s"] > 0 and r["world_size"] == n
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * (n - 1) / n)
    assert all(r["busbw_ratio_vs_gloo"] == 1.0 for r in records if r["impl"] == "gloo")
    assert records[-1]["busbw_ratio_vs_gloo"] is None  # the handshake has no gloo counterpart


@pytest.mark.fast
def test_saved_allreduce_supports_what_the_collectives_page_says():
    records = saved("allreduce-cpu")["records"]
    time_of = {(r["world_size"], r["impl"], r["bytes"]): r["time_s"] for r in records}
    sizes = sorted({r["bytes"] for r in records if r["impl"] != "check"})
    ranks = sorted({r["world_size"] for r in records})
    smallest, largest, most = sizes[0], sizes[-1], ranks[-1]
    # "at the smallest size [the tree and the naive version] beat the ring, and the more ranks, the more"
    lead = {
        n: time_of[n, "ring", smallest] / min(time_of[n, "tree", smallest], time_of[n, "naive", smallest])
        for n in ranks
    }
    assert all(x > 1 for x in lead.values()) and lead[most] > lead[ranks[0]]
    # "with four ranks the ring beats [the naive version]" at the largest size, by a tenth or more.
    assert time_of[most, "ring", largest] <= 0.9 * time_of[most, "naive", largest]
    # "[the handshake is] dearer the more ranks share the cores"
    check = [time_of[n, "check", 48] for n in ranks]
    assert check == sorted(check)


@pytest.mark.processes
def test_the_pipeline_pages_run_reports_theory_and_measured_idle_per_stage(command_runs):
    records, flags = page_run(command_runs, page_command("docs/lesson/pipeline-parallelism.md", "bench pipeline"))
    counts = [int(m) for m in flags["microbatches"].split(",")]
    assert [r["microbatches"] for r in records] == counts
    assert [r["bubble_theory"] for r in records] == [pytest.approx(1 / (m + 1)) for m in counts]  # p = 2
    assert all(len(r["idle_measured"]) == 2 and all(0 <= x < 1 for x in r["idle_measured"]) for r in records)
    for r in records:
        assert_schedule_is_gpipes(r)


def assert_schedule_is_gpipes(record: dict) -> None:
    """The saved spans are one GPipe step on one clock: 2m stretches per stage, in order, and stage 1
    computes micro-batch i's forward only after stage 0 has finished it, and stage 0 its backward only
    after stage 1 has."""
    m, (first, last) = record["microbatches"], record["spans"]["busy"]
    assert len(first) == len(last) == 2 * m
    for busy in (first, last):
        assert all(a <= b <= c for (a, b), (c, _) in zip(busy, busy[1:]))
        assert busy[-1][1] <= record["spans"]["step_s"]
    for i in range(m):
        assert last[i][0] >= first[i][1]  # forward i: stage 0, then stage 1
        assert first[2 * m - 1 - i][0] >= last[2 * m - 1 - i][1]  # backward i: stage 1, then stage 0


@pytest.mark.fast
def test_saved_pipeline_schedule_is_drawn_from_its_data():
    data = saved("pipeline-cpu")
    for r in data["records"]:
        assert_schedule_is_gpipes(r)
    assert (REPO / "docs/assets/pipeline-cpu.svg").read_text() == pipeline.plot(data["records"], data["machine"])


@pytest.mark.fast
def test_saved_pipeline_supports_what_the_pipeline_page_says():
    records = saved("pipeline-cpu")["records"]
    # "With one micro-batch, both stages idle about half the time": within 0.1 of the formula's 0.5.
    assert all(abs(x - 0.5) <= 0.1 for x in records[0]["idle_measured"])
    # "More micro-batches shrink the idle share, but it stays above the formula": from the fewest to
    # the most micro-batches by 0.1 or more, and for m > 1 never more than 0.02 below (p-1)/(m+p-1).
    for stage in (0, 1):
        assert records[-1]["idle_measured"][stage] <= records[0]["idle_measured"][stage] - 0.1
        assert all(r["idle_measured"][stage] >= r["bubble_theory"] - 0.02 for r in records[1:])


@pytest.mark.processes
def test_the_ddp_internals_pages_run_reports_both_implementations(command_runs):
    records, flags = page_run(command_runs, page_command("docs/deep-dives/ddp-internals.md", "bench ddp"))
    assert [r["impl"] for r in records] == ["torch DDP", "BucketedDDP"]
    assert all(r["width"] == int(flags["width"]) and r["batch_per_rank"] == int(flags["batch"]) for r in records)
    assert records[0]["ratio_vs_torch"] == 1.0 and all(r["samples_per_s"] > 0 for r in records)
    assert records[1]["ratio_vs_torch"] == pytest.approx(records[1]["samples_per_s"] / records[0]["samples_per_s"])


@pytest.mark.fast
def test_saved_ddp_supports_what_the_data_parallel_page_says():
    # "On a compute-bound model the two run within a quarter of each other's speed."
    ratio = saved("ddp-cpu")["records"][1]["ratio_vs_torch"]
    assert 0.75 <= ratio <= 1 / 0.75


@pytest.mark.processes
def test_the_bucket_run_on_the_page_reports_every_setting_and_the_memory_views_save(command_runs):
    records, flags = page_run(command_runs, page_command("docs/deep-dives/ddp-internals.md", "bench buckets"))
    caps = [float(c) for c in flags["caps"].split(",")]
    assert [(r["bucket_cap_mb"], r["gradient_as_bucket_view"]) for r in records] == [
        (c, view) for view in (False, True) for c in caps
    ]
    assert all(r["step_s"] > 0 and r["compute_s"] > 0 for r in records)
    held = {r["gradient_as_bucket_view"]: r["ddp_bytes"] for r in records}
    if held[False] is not None:  # glibc only
        # Views save one copy of the gradients; small allocations (autograd, gloo) blur it by a few KiB.
        assert held[False] - held[True] == pytest.approx(records[0]["gradient_bytes"], rel=0.05)


@pytest.mark.fast
def test_saved_buckets_support_what_the_data_parallel_page_says():
    records = saved("ddp-buckets-cpu")["records"]
    held = {r["gradient_as_bucket_view"]: r["ddp_bytes"] for r in records}
    grads = records[0]["gradient_bytes"]
    # "three times the gradient size" and "exactly one gradient-size less", within 1%.
    assert held[False] == pytest.approx(3 * grads, rel=0.01)
    assert held[False] - held[True] == pytest.approx(grads, rel=0.01)


@pytest.mark.processes
def test_the_mixed_precision_pages_run_counts_what_a_forward_keeps(command_runs):
    (fp32, bf16), flags = page_run(command_runs, page_command("docs/deep-dives/mixed-precision.md", "bench precision"))
    width, batch = int(flags["width"]), int(flags["batch"])
    assert (fp32["mode"], bf16["mode"]) == ("float32", "bfloat16 autocast") and int(flags["depth"]) == 2
    # The inputs of the two Linear and the two GELU layers, and the loss's input: five batch x width tensors.
    assert fp32["activation_bytes"] == 5 * batch * width * 4 and fp32["weight_copy_bytes"] == 0
    # The layers' inputs in 2 bytes, the loss's input still in 4, and a 16-bit copy of the second
    # weight (the first layer's input needs no gradient, so its weight copy is not kept).
    assert bf16["activation_bytes"] == 4 * batch * width * 2 + batch * width * 4
    assert bf16["weight_copy_bytes"] == width * width * 2


@pytest.mark.fast
def test_saved_precision_supports_what_the_mixed_precision_page_says():
    fp32, bf16 = saved("precision-cpu")["records"]
    # "16 bits nearly halve the activations ... and the weight copies come on top": 0.6 at the most.
    assert bf16["activation_bytes"] <= 0.6 * fp32["activation_bytes"]
    assert fp32["weight_copy_bytes"] == 0 < bf16["weight_copy_bytes"]


@pytest.mark.processes
def test_scaling_bench_splits_each_step_and_measures_speedup_against_one_rank():
    models = {"compute-bound": (16, 2, 32), "sync-bound": (64, 2, 2)}
    records = ddp_steps.bench_scaling([1, 2], [1, 2], steps=2, models=models)
    assert [(r["model"], r["accumulation"], r["world_size"]) for r in records] == [
        (m, k, n) for m in models for k in (1, 2) for n in (1, 2)
    ]
    for r in records:
        assert r["step_s"] > 0 and r["compute_s"] > 0
        assert r["samples_per_s"] == pytest.approx(
            r["world_size"] * models[r["model"]][2] * r["accumulation"] / r["step_s"]
        )
    assert all(r["speedup"] == 1.0 for r in records if r["world_size"] == 1)


@pytest.mark.processes
def test_the_checkpoint_pages_recovery_run_times_each_phase_from_the_kill_to_training_again(command_runs):
    (r,), _ = page_run(command_runs, page_command("docs/operations/checkpoint-and-resume.md", "bench recovery"))
    example = (REPO / killed_run.EXAMPLE).read_text()
    every = int(re.search(r'"--ckpt-every", type=int, default=(\d+)', example)[1])  # the example's default
    assert r["resumed_from"] == r["kill_at_step"] // every * every
    assert r["redone_steps"] == r["kill_at_step"] - r["resumed_from"]
    phases = [r[f"{earlier}_to_{later}_s"] for later, earlier, _ in killed_run.PHASES]
    assert all(t > 0 for t in phases) and r["step_s"] > 0
    # The phases are consecutive: together they are the whole gap, to rounding.
    assert sum(phases) == pytest.approx(r["kill_to_resumed_s"], abs=1e-9)
    assert r["kill_to_noticed_s"] < 1.0  # "torchrun notices within a fraction of a second"


@pytest.mark.fast
def test_saved_recovery_supports_what_the_recovery_page_says():
    records = saved("recovery-cpu")["records"]
    for r in records:
        starting = r["restarting_to_resumed_s"]
        # "Most of it is starting again": the new processes' start-up is the largest phase.
        assert starting > r["kill_to_noticed_s"] and starting > r["noticed_to_restarting_s"]
        # "torchrun notices within a fraction of a second": it polls its workers every 0.1 s.
        assert r["kill_to_noticed_s"] < 1.0


@pytest.mark.fast
@pytest.mark.parametrize("name", ["allreduce-cpu", "allreduce-links-cpu"])
def test_saved_allreduce_figure_is_drawn_from_its_data(name):
    data = saved(name)
    assert (REPO / f"docs/assets/{name}.svg").read_text() == allreduce.plot(data["records"], data["machine"])


@pytest.mark.fast
def test_saved_three_link_prediction_is_drawn_from_its_data():
    data = saved("prediction-links-cpu")
    assert (REPO / "docs/assets/prediction-links-cpu.svg").read_text() == prediction.plot(
        data["records"], data["machine"]
    )


@pytest.mark.fast
def test_saved_compression_run_is_drawn_from_its_data():
    data = saved("compression-links-cpu")
    assert (REPO / "docs/assets/compression-links-cpu.svg").read_text() == compression.plot(
        data["records"], data["machine"]
    )


@pytest.mark.fast
def test_saved_hierarchy_run_is_drawn_from_its_data():
    data = saved("hierarchy-links-cpu")
    assert (REPO / "docs/assets/hierarchy-links-cpu.svg").read_text() == hierarchy.plot(
        data["records"], data["machine"]
    )


@pytest.mark.fast
def test_saved_prediction_is_drawn_from_its_data_and_supports_what_the_lab_says():
    data = saved("prediction-cpu")
    records, machine = data["records"], data["machine"]
    assert (REPO / "docs/assets/prediction-cpu.svg").read_text() == prediction.plot(records, machine)
    at = {(r["model"], r["accumulation"], r["world_size"]): r for r in records}
    for r in records:
        if r["world_size"] == 1:  # "at one rank the prediction is the measurement by construction"
            assert r["ratio"] == pytest.approx(1.0)
    # "the model comes in short" at two ranks, and the two terms the lab names are there in the data:
    assert all(r["ratio"] < 1 for r in records if r["world_size"] == 2)
    assert at["compute-bound", 1, 2]["compute_n_s"] > at["compute-bound", 1, 2]["compute_1_s"]
    assert at["sync-bound", 1, 2]["measured_sync_s"] > at["sync-bound", 1, 2]["modelled_sync_s"]
    # "with the computation measured at two ranks in its place, the prediction comes closer"
    for r in records:
        if r["world_size"] == 2 and r["compute_n_s"] > r["compute_1_s"]:
            assert abs(1 - r["ratio_given_compute"]) < abs(1 - r["ratio"])


@pytest.mark.fast
def test_prediction_compares_each_setting_with_the_model_fed_from_other_runs():
    measured = [
        {"model": "m", "accumulation": 1, "world_size": n, "batch_per_rank": 10, "gradient_bytes": 4_000_000,
         "step_s": step, "compute_s": compute}
        for n, step, compute in ((1, 0.012, 0.010), (2, 0.020, 0.011))
    ]  # fmt: skip
    net = Network(0.0, 1e-9)  # 1 GB/s: 4 MB take 4 ms at 2 ranks
    one, two = prediction.compare(measured, net)
    assert one["predicted_step_s"] == pytest.approx(0.012)  # compute + DDP's 2 ms of its own work
    assert two["predicted_step_s"] == pytest.approx(0.010 + 0.004 + 0.002)
    assert two["measured_sync_s"] == pytest.approx(0.020 - 0.011 - 0.002)
    assert two["ratio"] == pytest.approx(0.016 / 0.020)
    assert two["ratio_given_compute"] == pytest.approx((0.011 + 0.004 + 0.002) / 0.020)


@pytest.mark.fast
def test_prediction_keeps_the_median_of_repeated_runs_and_the_spread_of_the_ratio():
    runs = [[{"model": "m", "world_size": 2, "ratio": r, "measured_step_s": r / 10}] for r in (0.9, 0.8, 1.1)]
    (row,) = merge_runs(runs)
    assert row["ratio"] == 0.9 and row["measured_step_s"] == pytest.approx(0.09)
    assert row["ratio_range"] == [0.8, 1.1] and row["repeats"] == 3 and row["model"] == "m"


@pytest.mark.parametrize(
    "argv",
    [
        ["allreduce", "--sizes", "3"],
        ["allreduce", "--world-sizes", "0"],
        ["allreduce", "--iters", "0"],
        ["allreduce", "--repeat", "0"],
        ["pipeline", "--microbatches", "3"],
        ["pipeline", "--microbatches", "x"],
        ["pipeline", "--width", "0"],
        ["ddp", "--steps", "0"],
        ["buckets", "--caps", "0"],
        ["buckets", "--caps", "x"],
        ["buckets", "--depth", "0"],
        ["precision", "--steps", "0"],
        ["precision", "--batch", "64", "--width", "64"],
        ["scaling", "--world-sizes", "2,4"],
        ["scaling", "--accumulation", "0"],
        ["scaling", "--scale", "2"],
        ["prediction", "--steps", "0"],
        ["prediction", "--accumulation", "0"],
        ["prediction", "--repeat", "0"],
        ["recovery", "--repeat", "0"],
        ["recovery", "--kill-at-step", "32"],
        ["recovery", "--example", "no/such/example.py"],
        ["exits", "--launches", "0"],
        ["exits", "--examples", "no/such/example.py:2"],
        ["exits", "--examples", "examples/sharded/step01_fsdp.py"],
    ],
)
@pytest.mark.fast
def test_bad_bench_arguments_get_one_line_and_exit_2(argv, capsys):
    assert cli.main(["bench", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err


@pytest.mark.fast
def test_saved_exit_soak_supports_what_the_testing_page_says():
    """At least a thousand launches, the examples that used to abort at exit among them, and not one
    abort or other failure."""
    data = saved("exits-cpu")
    records = data["records"]
    assert sum(r["launches"] for r in records) >= 1000
    launched = {(r["example"].split()[0], r["ranks"]) for r in records}
    assert {
        ("examples/model_parallel/step01_split_layers.py", 2),
        ("examples/sharded/step01_fsdp.py", 4),
        ("examples/data_parallel/step03_ddp_from_scratch.py", 2),
        ("examples/in_production/step01_2d_mesh.py", 4),
    } <= launched
    assert [r for r in records if r["aborts"] or r["other_failures"]] == []
    assert data["machine"]["torch"].startswith("2.")


@pytest.mark.processes
def test_exit_soak_counts_a_rank_that_aborts_at_exit():
    outcome, _, excerpt = exits.launch("tests/faulty_scripts/abort_at_exit.py", 2)
    assert outcome == "abort", excerpt


@pytest.mark.fast
def test_the_saved_preemption_soak_saved_on_every_signal():
    """`make preempt-soak`: fifty preemptions of the SLURM job, and in each the ranks saved at the
    signal's step and the requeued job resumed from exactly that step."""
    data = saved("slurm-preempt-soak-cpu")
    runs = data["records"]
    assert len(runs) >= 50 and {r["event"] for r in runs} == {"preempt"}
    assert [r["job"] for r in runs if r["missing"]] == []
    assert all(r["checkpoint_step"] == r["resumed_from"] > 0 and r["restarts"] == 1 for r in runs)
    assert f"medians of {len(runs)}" in (REPO / "measurements/slurm-preempt-soak-cpu.txt").read_text()


@pytest.mark.fast
def test_saved_slurm_recovery_is_drawn_from_its_data_and_supports_what_the_multi_node_page_says():
    data = saved("slurm-recovery-cpu")
    records = data["records"]
    assert (REPO / "docs/assets/slurm-recovery-cpu.svg").read_text() == slurm_bench.plot(records, data["machine"])
    assert {r["event"] for r in records} == {"node-loss", "preempt"}
    for r in records:
        m = r["moments_s"]
        assert r["state"] == "COMPLETED" and r["restarts"] == 1 and r["hash"]
        # "Most of the time goes to SLURM's own timers": noticing a lost node and the wait in the
        # queue make more than half of the time from the event to training again.
        timers_s = m.get("down", 0.0) + m["allocated"] - m["requeued"]
        assert timers_s > m["resumed"] / 2, r
        if r["event"] == "preempt":  # "resumes from exactly the step the signal stopped it at"
            assert r["checkpoint_step"] == r["resumed_from"] > 0
        else:
            assert r["nodes_after"] != r["nodes_before"]  # "the two nodes that are left"
    # "With SLURM's defaults (300, 120 and 60 s), a lost node costs at least seven minutes ... and a
    # preemption at least two": SlurmdTimeout + cred_expire, and cred_expire.
    defaults = slurm_bench.SLURM_DEFAULTS_S
    page = (REPO / "docs/operations/multi-node.md").read_text()
    assert "(300, 120 and 60 s)" in " ".join(page.split())
    assert (defaults["SlurmdTimeout"] + defaults["cred_expire"]) / 60 == 7 and defaults["cred_expire"] / 60 == 2
    said = " ".join(page.split())
    assert "at least seven minutes" in said and "preemption at least two" in said


@pytest.mark.processes
def test_the_checkpoint_pages_run_times_a_blocking_and_a_background_save(command_runs):
    """The page's command: a blocking save stalls training for its whole write and costs nothing
    besides; a background one is durable only after it stops stalling. Orders, not speeds."""
    records, flags = page_run(
        command_runs, page_command("docs/operations/checkpoint-and-resume.md", "bench checkpointing")
    )
    rows = checkpointing.medians(records)
    assert {(r["size_mib"], r["kind"]) for r in rows} == {(int(flags["sizes"]), k) for k in checkpointing.KINDS}
    for r in rows:
        assert 0 < r["stall_s"] <= r["durable_s"]
        if r["kind"] == "sync":
            assert r["slower_steps_s"] == 0 and r["cost_s"] == r["stall_s"] == r["durable_s"]


@pytest.mark.fast
def test_saved_checkpointing_supports_what_the_checkpoint_page_says():
    rows = checkpointing.medians(saved("checkpointing-cpu")["records"])
    background = [r for r in rows if r["kind"] == "async"]
    assert len(background) >= 2
    for r in rows:
        assert 0 < r["stall_s"] <= r["durable_s"]  # durable only once it has stopped stalling
        if r["kind"] == "sync":  # a blocking save costs training its whole write, and nothing besides
            assert r["slower_steps_s"] == 0 and r["cost_s"] == r["stall_s"] == r["durable_s"]
    # "the steps beside the write slow down, and the stall grows with the state"
    assert all(r["slower_steps_s"] > 0 for r in background)
    stalls = [r["stall_s"] for r in sorted(background, key=lambda r: r["size_mib"])]
    assert stalls == sorted(stalls)


@pytest.mark.fast
def test_saved_torchft_recovery_is_drawn_from_its_data_and_supports_what_the_multi_node_page_says():
    data = saved("torchft-recovery-cpu")
    records = data["records"]
    assert (REPO / "docs/assets/torchft-recovery-cpu.svg").read_text() == torchft_bench.plot(records, data["machine"])
    kinds = [r["kind"] for r in records]
    assert kinds.count("torchft") == kinds.count("torchft-later") == kinds.count("torchrun") >= 3
    heartbeat_s, tick_s = 5.0, 0.1  # the lighthouse's defaults (torchft_lighthouse --help)
    for r in records:
        if r["kind"] == "torchft":  # back at once: the quorum takes the lost group in as it arrives
            assert r["kill_to_survivor_s"] == pytest.approx(r["kill_to_rejoined_s"], abs=0.5), r
            assert r["kill_to_survivor_s"] < heartbeat_s, r
        if r["kind"] == "torchft-later":  # "It cannot wait longer than its heartbeat timeout"
            assert r["kill_to_survivor_s"] < heartbeat_s + 2 * tick_s + r["step_seconds"] + 0.5, r
            assert r["kill_to_survivor_s"] < r["kill_to_relaunch_s"] < r["kill_to_rejoined_s"], r
    # "With a model this small, restarting everything costs about as much": within a factor of two.
    rows = dict(torchft_bench.medians(records))
    restart, survivor = rows[torchft_bench.ROWS[0][2]], rows[torchft_bench.ROWS[1][2]]
    assert 0.5 < survivor / restart < 2, rows
