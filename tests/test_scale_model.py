"""The scale model (distdocs.lab.emulated, `distdocs bench emulated`): eight emulated accelerators in torch's
DDP over dialled links. The overview's command is run once, live, inside the suite (as root, over tc's
links); every point it measures is held against the cost model, and each of the lesson's timing claims
against its points, with the margin its arithmetic gives. The lab's step 3, run as a reader without
root, measures the same points with the links paced by the ranks (tests/test_lab.py): each is held
against the tc run and the model. The emulation's own parts (the waits, the exact gradients, DDP's
buckets) are checked without a network."""

from __future__ import annotations

import re
import statistics
import time

import pytest
import torch

from distdocs import cli
from distdocs.bench import emulated as bench
from distdocs.calculators import costmodel
from distdocs.lab.emulated import Device, EmulatedModel, Point, _check

from docexec.fences import REPO, page_command
from support.lab_notebook import lab_without_root

OVERVIEW = REPO / "docs/start/overview.md"
SAVED = REPO / "measurements/emulated-links-cpu.json"
ROW = re.compile(
    r"^\s*(?P<case>[\w-]+) +(?P<link>\w+) +(?P<bucket>\S+) +(?P<workers>\d+) +(?P<accum>\d+) +(?P<step>[\d.]+) +"
    r"(?P<best>[\d.]+) +(?P<compute>[\d.]+|-) +(?P<predicted>[\d.]+) +[\d.]+ +(?:[\d.]+x|-) +(?:[\d.]+x|-)$",
    re.M,
)
COST = re.compile(r"^# the run: (\d+) s of wall time, (\d+) s of CPU$", re.M)


def the_pages_command() -> str:
    """The overview's command, which In production and Mixed precision show too: one run checks all."""
    command = page_command("docs/start/overview.md", "bench emulated")
    assert command == page_command("docs/operations/in-production.md", "bench emulated")
    assert command == page_command("docs/deep-dives/mixed-precision.md", "bench emulated")
    return command


def parse_points(out: str) -> dict:
    """A printed table's points by (case, workers, accumulation), each with its step, best step,
    compute (where split) and prediction, in seconds."""
    points = {}
    for m in ROW.finditer(out):
        points[m["case"], int(m["workers"]), int(m["accum"])] = {
            "step": float(m["step"]) / 1e3,
            "best": float(m["best"]) / 1e3,
            "compute": None if m["compute"] == "-" else float(m["compute"]) / 1e3,
            "predicted": float(m["predicted"]) / 1e3,
        }
    return points


@pytest.fixture(scope="module")
def live(command_runs) -> dict:
    """The overview's command, run once for this module and test_docs."""
    result = command_runs.run_ok(the_pages_command())
    points = parse_points(result.stdout)
    assert len(points) == len(bench.live_points()), result.describe()
    wall, cpu = map(int, COST.search(result.stdout).groups())
    return {"points": points, "wall_s": wall, "cpu_s": cpu, "out": result.stdout}


def speedup(points: dict, case: str, n: int, k: int, key: str = "step") -> float:
    """Samples per second at n workers over 1 worker at the same k."""
    return n * points[case, 1, k][key] / points[case, n, k][key]


def throughput(points: dict, case: str, n: int, k: int, key: str = "step") -> float:
    """Micro-batches per second, all workers together."""
    return n * k / points[case, n, k][key]


@pytest.mark.processes  # the test tiers: see the testing page
def test_every_point_is_predicted_within_10_percent_and_the_median_within_5(live, record_property):
    """The cost model, from the α and β fitted on the same links, the workload and DDP's buckets,
    against each point's best step of three: beside the rest of the suite, eight ranks' host work at
    the end of a step waits for a core now and then, which only ever adds time, and one such wait in a
    median of three put an 8-worker point 10% off (the table shows the medians). The ratios go to the
    JUnit report (`--junitxml`), so that a run inside the whole suite can be read."""
    ratios = {key: p["predicted"] / p["best"] for key, p in live["points"].items()}
    record_property("ratios", {"/".join(map(str, key)): round(r, 3) for key, r in ratios.items()})
    record_property("cost", {"wall_s": live["wall_s"], "cpu_s": live["cpu_s"]})
    # The ranks' wire paces every message in the ranks themselves, on the two cores the rest of the
    # suite shares: its points can only come late, by host work that waited for a core (a fresh clone
    # measured 0.875 at 8 workers), so they may fall 15% short of the model; never more than 10% over.
    low = {key: 0.85 if key[0].endswith("-wire") else 0.90 for key in ratios}
    off = {key: round(r, 3) for key, r in ratios.items() if not low[key] <= r <= 1.10}
    assert not off, f"points the model misses by more than its bound: {off}\n{live['out']}"
    assert abs(statistics.median(ratios.values()) - 1) <= 0.05, live["out"]


@pytest.mark.processes
def test_the_live_run_costs_at_most_60_s_of_wall_time_and_40_s_of_cpu(live):
    """The emulated compute is a wait, so the run's CPU is start-up, gloo and the links; its wall time
    is mostly the steps' own (about 40 s alone)."""
    assert live["wall_s"] <= 60 and live["cpu_s"] <= 40, live["out"]


@pytest.mark.processes
def test_a_compute_bound_job_scales_almost_ideally(live):
    """The overview: "a job whose compute dwarfs its sync ... gets close to n". A 32 KiB gradient under
    400 ms of compute: the sync at 8 workers takes about 7 ms in the model, and eight ranks' host work
    at the end of backward, which two cores run in turn, about 20 ms more; 0.9 n leaves 5% beyond. Each
    size's best step, as the link fit takes it: beside the suite that host work can wait for a core."""
    for n in (2, 4, 8):
        assert speedup(live["points"], "compute-bound", n, 1, "best") >= 0.9 * n, live["out"]


@pytest.mark.processes
def test_a_sync_bound_job_flattens_and_eight_workers_gain_little_over_four(live):
    """The overview's sync-bound job, its global batch held at 8 micro-batches (8 workers x 1, 4 x 2,
    2 x 4, 1 x 8): the first doubling of the workers gains more than either later one (the model:
    1.21x, then 1.10x and 1.05x), and 8 workers gain less than 1.2x over 4. Each step's best of three:
    on a dialled link, waiting for a CPU only ever adds time, and a late wake-up in one median step
    moves a 5% difference between the last two gains. With the batch per worker fixed instead, a ring
    cannot flatten that far: 2(n-1)/n of the bytes grows by 7/6 from 4 to 8, so 8 always gain more
    than 1.7x over 4; what falls there is the gain per worker."""
    p = live["points"]
    held = [throughput(p, "production", n, 8 // n, "best") for n in (1, 2, 4, 8)]
    gains = [b / a for a, b in zip(held, held[1:])]
    assert gains[0] > max(gains[1:]) and gains[2] < 1.2, (gains, live["out"])
    per_worker = [speedup(p, "production", n, 1) / n for n in (2, 4, 8)]
    assert per_worker[0] > per_worker[1] > per_worker[2], live["out"]


@pytest.mark.processes
def test_a_small_model_scaled_out_is_slower_on_two_workers_than_on_one(live):
    """The debugging guide's "slower with more ranks": one micro-batch of the sync-bound job at 2 workers
    trains fewer samples per second than at 1 (the model: 0.57x). The guide's example shows the same on
    two real CPU ranks; its saved run is the one the page prints."""
    assert speedup(live["points"], "production", 2, 1) < 1, live["out"]
    saved = (REPO / "measurements/debugging-small-model-cpu.txt").read_text()
    ratios = dict(re.findall(r"^(mistake|fix): .*\((\d+\.\d+)x\)", saved, re.M))
    assert float(ratios["mistake"]) < 1 < float(ratios["fix"]), saved


@pytest.mark.processes
def test_accumulation_takes_eight_workers_past_3_5x_and_without_it_they_stay_below_2_5x(live):
    """In production: ResNet-50 on 8 V100 nodes over 1 Gbit/s, scaled. Four micro-batches per step reach
    3.5x or more on 8 workers, one stays below 2.5x, each within 10% of the model's speedup. From each
    point's best step: beside the suite, a median of three 8-worker steps has taken 3.41x where its
    best took 3.58x (eight ranks' host work waiting for a core)."""
    p = live["points"]
    with_k, without = speedup(p, "production", 8, 4, "best"), speedup(p, "production", 8, 1, "best")
    model_with, model_without = (speedup(p, "production", 8, k, "predicted") for k in (4, 1))
    assert with_k >= 3.5 and without < 2.5, live["out"]
    assert abs(with_k / model_with - 1) <= 0.10 and abs(without / model_without - 1) <= 0.10, live["out"]


@pytest.mark.processes
def test_over_100mbit_two_workers_lose_to_one_at_one_micro_batch_and_four_micro_batches_win_it_back(live):
    """Gradient accumulation, "Over a slower link", where compute is a stated wait: at one micro-batch a
    step two workers train fewer samples per second than one (the model: 0.62x), and at four, one sync
    serving four micro-batches, more (1.28x). From each point's best step of three: the 1-worker steps
    are waits (63 and 251 ms) that load barely moves, and the 2-worker step at four has 29% to spare.
    The page's two real CPU ranks hold it on their saved run (tests/test_links.py): live, load on
    shared cores turns their comparison either way."""
    p = live["points"]
    assert speedup(p, "production", 2, 1, "best") < 1 < speedup(p, "production", 2, 4, "best"), live["out"]


@pytest.mark.processes
def test_the_split_of_a_slower_step_shows_its_sync_wall_over_half(live):
    """The debugging guide's diagnosis of a speedup below 1: time the step under no_sync() too; at 2
    workers, the sync (the step less its compute) is over half the step (the model: about 70%)."""
    two = live["points"]["production", 2, 1]
    assert speedup(live["points"], "production", 2, 1) < 1
    assert (two["step"] - two["compute"]) / two["step"] > 0.5, live["out"]
    # The guide's two-rank example, as its saved run prints it: 8 samples a rank, most of the step
    # synchronisation; 1024, a small share.
    saved = (REPO / "measurements/debugging-slower-cpu.txt").read_text()
    found = re.findall(r"^(mistake|fix):.*\n  compute .*, (\d+)% of the step$", saved, re.M)
    share = {case: float(percent) for case, percent in found}
    assert share["mistake"] > 50 > share["fix"], saved


@pytest.mark.processes
def test_eight_workers_without_accumulation_train_less_than_four_with_it(live):
    """Gradient accumulation, "when it pays": at the sync-bound setting, throwing nodes at the loop (8
    workers, 1 micro-batch per step) trains fewer samples per second than 4 workers accumulating 4 (the
    model: about 0.7 of them). The page's two-rank run shows the bytes it saves; its saved rates agree."""
    p = live["points"]
    assert throughput(p, "production", 8, 1) < throughput(p, "production", 4, 4), live["out"]
    saved = (REPO / "measurements/accumulation-sync-bound-cpu.txt").read_text()
    rates = {m[0]: float(m[1].replace(",", "")) for m in re.findall(r"^(mistake|fix): .* ranks ([\d,]+)", saved, re.M)}
    assert rates["fix"] > rates["mistake"], saved


@pytest.mark.processes
def test_bf16_gradients_cut_the_sync_8_workers_wait_for_by_more_than_half_as_the_model_says(live):
    """Mixed precision, the part of its speed that holds on every machine: the same 8 workers with their
    gradients sent in bfloat16 (torch's bf16_compress_hook, step for step). The sync the step waits
    for (the step less its computation, timed under no_sync()) falls below 0.6 of fp32's, and within
    0.1 of the model's ratio (0.43: half the bytes, while backward hides the same time in both)."""
    p = live["points"]
    fp32, bf16 = p["production", 8, 1], p["bf16-wire", 8, 1]
    measured = (bf16["best"] - bf16["compute"]) / (fp32["best"] - fp32["compute"])
    model = (bf16["predicted"] - fp32["compute"]) / (fp32["predicted"] - fp32["compute"])
    assert measured < 0.6 and abs(measured - model) <= 0.1, (measured, model, live["out"])


@pytest.mark.processes
def test_eight_workers_train_a_compute_bound_jobs_samples_seven_times_sooner_than_one(live):
    """The overview's "why": a job too slow on one GPU. The compute-bound case's 8 micro-batches take one
    worker 8 steps and eight workers one; eight finish them at least 7 times sooner (the model: 7.9)."""
    p = live["points"]
    one, eight = 8 * p["compute-bound", 1, 1]["best"], p["compute-bound", 8, 1]["best"]
    assert one / eight >= 7, live["out"]


@pytest.mark.processes
def test_the_ranks_pacing_gives_tcs_steps_within_10_percent_and_the_model_predicts_both(live, command_runs):
    """The lab's step 3 as a reader without root runs it (tests/test_lab.py shares the run): the links
    paced by the ranks (distdocs.lab.wire), at the points it shows (1, 2, 4 and 8 workers; 1 and 4
    micro-batches; 100 Mbit/s). Each point's best step is within 10% of the tc run's, and the cost
    model, fitted on each run's own links, predicts both (the bounds below say how closely)."""
    if bench.EMULATION_SAYS["tc"] not in live["out"]:
        pytest.skip("needs root: the overview's run paced its links in the ranks too, with no tc to compare")
    result = command_runs.run_ok(lab_without_root())
    assert bench.EMULATION_SAYS["ranks"] in result.stdout, result.describe()
    # the lab draws its points rather than printing the table: read the run it made, as data
    (run,) = [r for r in result.records if r["benchmark"] == "emulated"]
    ranks = {
        (r["case"], r["workers"], r["accumulation"]): {"best": r["best_s"], "predicted": r["predicted_s"]}
        for r in run["records"]
        if r["case"] == "production" and r["link"] == "100mbit"  # what the lab's step 3 draws
    }
    shared = {("production", n, k) for n in (1, 2, 4, 8) for k in (1, 4)}
    assert set(ranks) >= shared, result.describe()
    apart = {key: round(ranks[key]["best"] / live["points"][key]["best"], 3) for key in shared}
    off = {key: r for key, r in apart.items() if abs(r - 1) > 0.10}
    assert not off, f"ranks' steps over tc's, off by more than 10%: {off}\n{result.stdout}\n{live['out']}"
    # The model never over-predicts a point by more than 10%. Under it, the ranks that pace their own
    # links do that pacing in Python, eight of them on two cores beside the rest of the suite: a core
    # they wait for only ever adds time, so a run paced in the ranks may fall short of the model by up
    # to 15% (tc's run keeps 10%). A model that dropped a term misses by far more (the sync alone is
    # over half of an 8-worker step at 100 Mbit/s).
    for name, run, lowest in (("paced in the ranks", ranks, 0.85), ("paced by tc", live["points"], 0.90)):
        missed = {key: round(run[key]["predicted"] / run[key]["best"], 3) for key in shared}
        bad = {key: r for key, r in missed.items() if not lowest <= r <= 1.10}
        assert not bad, f"{name}: predicted over best step outside {lowest}-1.10: {bad}\n{result.stdout}"


# --- the emulation's parts, without a network ---


def _paced_ring(rank: int, world_size: int, nbytes: int, spec) -> dict:
    """The lesson's ring over the ranks' emulated link: the sum, what the wire counted, when the ring
    began and when its last message arrives on the link's clock (the wire's stamps, perf_counter time,
    which every process on the machine shares), and when this rank returned."""
    import torch.distributed as dist

    from distdocs.lab.wire import Wire
    from distdocs.training.collectives import ring_allreduce

    wire = Wire(spec, rank)
    tensor = torch.arange(nbytes // 4, dtype=torch.float32) * (rank + 1)
    dist.barrier()
    wire.start()
    start = wire.ready
    ring_allreduce(tensor, validate=False, wire=wire)
    returned = time.perf_counter()
    expected = torch.arange(nbytes // 4, dtype=torch.float32) * sum(range(1, world_size + 1))
    return {
        "start": start,
        "arrived": wire.ready,
        "returned": returned,
        "exact": torch.equal(tensor, expected),
        "messages": wire.messages,
        "bytes": wire.bytes_sent,
    }


@pytest.mark.processes
def test_the_ranks_wire_delivers_the_exact_sum_in_the_time_its_bytes_and_latency_take():
    """distdocs.lab.wire, without the scale model: 4 ranks' ring of 1 MiB sends 2(n-1) messages of S/n
    each; over 100 Mbit/s (tbf's frames: 95.6% payload) with 2 ms a message, its last message arrives
    2(n-1)/n·S·β + 2(n-1)·2 ms after the ring began, on the link's clock, and no rank returns before
    its last message arrives. On two nodes of 2 with no inside link, every other hop is loopback,
    unpaced, yet the ranks that send across send all 2(n-1) of their messages through their one card,
    busy from the start: the last arrives the bytes' time and one latency after the start, as the cost
    model prices a ring at its slowest link, while the latencies of hops inside are gone.

    The link's clock is the wire's arithmetic on the stamps, whatever the load: each rank starts the
    clock as it leaves the barrier, a little apart, and the ring's end lies between the earliest
    start and the latest, plus the time above (a microsecond allowed for rounding). The wall clock
    adds Python's own work per message, four ranks on two cores beside the suite (a fresh clone's
    suite measured 18% over the link's time), so it is held only to half again: a wire that missed its
    stamps (paced per byte, or on a clock other than perf_counter) is far off."""
    from distdocs.lab.wire import PAYLOAD_SHARE, LinkSpec
    from distdocs.lab.world import World

    n, nbytes, latency = 4, 2**20, 0.002
    beta = 8 / (100e6 * PAYLOAD_SHARE)
    with World(n, timeout_s=60) as world:
        flat = world.run(_paced_ring, nbytes, LinkSpec("100mbit", latency))
        nodes = world.run(_paced_ring, nbytes, LinkSpec("100mbit", latency, per_node=2))
    bytes_time = 2 * (n - 1) / n * nbytes * beta
    due = bytes_time + 2 * (n - 1) * latency
    assert all(r["exact"] and r["messages"] == 2 * (n - 1) and r["bytes"] == 2 * (n - 1) * nbytes // n for r in flat)
    assert all(r["exact"] for r in nodes)
    for run, took in ((flat, due), (nodes, bytes_time + latency)):
        first, last = min(r["start"] for r in run), max(r["start"] for r in run)
        end = max(r["arrived"] for r in run)
        assert first + took - 1e-6 <= end <= last + took + 1e-6, (end - first, end - last, took)
        assert all(r["returned"] >= r["arrived"] for r in run), run
        assert max(r["returned"] for r in run) - first <= 1.5 * due, run


@pytest.mark.fast
def test_an_emulated_kernel_never_ends_early_and_queues_behind_the_one_before():
    """A kernel of t seconds returns no sooner than t after it started; one launched while the last
    runs, or shortly after it ended, starts when that one ends, as on a GPU stream."""
    device = Device()
    device.free_at = start = time.perf_counter()
    device.run(0.02)
    assert time.perf_counter() - start >= 0.02 and device.free_at == start + 0.02
    ended = device.free_at = time.perf_counter() - 0.005  # the last kernel ended 5 ms before this launch
    device.run(0.0)
    assert device.free_at == ended  # queued behind it: the host's 5 ms are not the device's
    device.free_at = time.perf_counter() - 1.0  # idle for a second: it starts when launched
    device.run(0.0)
    assert device.free_at > time.perf_counter() - 0.5


@pytest.mark.fast
def test_an_emulated_model_returns_integer_gradients_and_the_check_catches_one_wrong_element():
    model = EmulatedModel(4 * 8 * 16, 0.0, layers=8)
    model.value = 3.0
    for _ in range(2):  # two micro-batches accumulate
        model(torch.ones(1, requires_grad=True)).sum().backward()
    assert all(torch.equal(w.grad, torch.full((16,), 6.0)) for w in model.weights)
    _check(model, 2, 1, synced=False)  # passes, and clears the gradients
    model(torch.ones(1, requires_grad=True)).sum().backward()
    model.weights[5].grad[7] += 1
    with pytest.raises(AssertionError, match="layer 5: gradient 4.0 where 3.0 was due"):
        _check(model, 1, 1, synced=False)


@pytest.mark.fast
def test_the_production_case_is_resnet_50_scaled_with_compute_against_sync_kept():
    """ResNet-50's 102.2 MB of fp32 gradients in a 305 ms step over 1 Gbit/s, against 2 MiB in the
    scale model's step over 100 Mbit/s: the same compute per second of gradient transfer."""
    real = bench.RESNET50["step_s"] / (bench.RESNET50["params"] * 4 * 8 / 1e9)
    scaled = bench.PRODUCTION["compute_s"] / (bench.PRODUCTION["gradient_bytes"] * 8 / 1e8)
    assert scaled == pytest.approx(real, rel=1e-3)


@pytest.mark.fast
def test_the_cost_model_puts_in_what_ddp_does_and_what_the_old_one_left_out():
    """The two things the scale model showed: DDP's small first bucket (measured: a 2-worker step 1%
    from the model with it, 11% without), and gloo's two allreduces at once (the bucket sweep's 32 KiB
    buckets: 5% from the model with two lanes, 11% with one). Each changes the prediction the way
    the measurement did."""
    point = Point(2, 1, **bench.PRODUCTION)
    net = costmodel.Network(100e-6, 8 / 95e6)
    ddp = costmodel.step_time(point.workload(), 2, net).step
    equal_buckets = costmodel.step_time(
        costmodel.Workload(point.gradient_bytes / 4, point.compute_s, 1, first_bucket_bytes=25 * 2**20), 2, net
    ).step
    assert equal_buckets > 1.08 * ddp  # the first 1 MiB starts halfway through backward
    small = Point(8, 1, 2 * 2**20, 0.4, layers=32, bucket_mb=1 / 32).workload()
    one, two = (costmodel.step_time(small, 8, costmodel.Network(200e-6, 8 / 95e6, concurrent=c)).step for c in (1, 2))
    assert one > 1.1 * two


@pytest.mark.parametrize(
    "argv",
    [
        ["--workers", "1,17"],
        ["--workers", "1,6", "--per-node", "4"],
        ["--inside", "1gbit"],
        ["--link-emulation", "tc", "--latency-us", "100"],
        ["--workers", "2,4"],
        ["--link", "fast"],
        ["--sweep", "--workers", "1,2"],
        ["--steps", "0"],
        ["--layers", "0"],
        ["--gradient-mb", "0"],
    ],
)
@pytest.mark.fast
def test_bad_arguments_get_one_line_and_exit_2(argv, capsys):
    assert cli.main(["bench", "emulated", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err


# --- the saved sweep, which the pages draw ---


@pytest.mark.fast
def test_the_saved_sweep_draws_the_overviews_figure_and_says_what_the_overview_says():
    import json

    data = json.loads(SAVED.read_text())
    records = data["records"]
    assert (REPO / "docs/assets/emulated-links-cpu.svg").read_text() == bench.plot(records, data["machine"])
    at = {(r["link"], r["workers"]): r for r in records if r["case"] == "production" and r["accumulation"] == 1}
    assert all(at["50mbit", n]["speedup"] < 1 for n in (2, 4, 8))  # "every number of workers ... fewer"
    assert at["100mbit", 2]["speedup"] < 1 < at["100mbit", 8]["speedup"] < 2  # "gains a little from eight"
    assert at["100mbit", 8]["speedup"] < at["200mbit", 8]["speedup"] < 4  # "a little more", not near ideal
    assert all(r["ddp_bucket_bytes"] == r["model_bucket_bytes"] for r in records)
    # Beyond two cores: eight nodes' links from 200 Mbit/s, and eight ranks' messages of 8 KiB (1/16 MiB
    # buckets), as the network-emulation appendix and Inside DDP say.
    kept = [r for r in records if r["link"] != "200mbit" and r["bucket_mb"] != 1 / 16]
    assert all(abs(r["ratio"] - 1) <= 0.10 for r in kept), "the sweep's fit"


@pytest.mark.fast
def test_the_explorers_scale_model_runs_are_the_saved_sweep():
    """hooks/explorer_presets.py reads the sweep without torch: each link's controls reproduce the
    production case (2 MiB in fp32, one 62.6 ms micro-batch, overlapped, gloo's two lanes), and its
    points are the sweep's measured speedups at 2, 4 and 8 workers."""
    import json

    from hooks.explorer_presets import GLOO_LANES, measured_runs

    assert GLOO_LANES == bench.GLOO_LANES
    runs = measured_runs()
    records = [r for r in json.loads(SAVED.read_text())["records"] if r["case"] == "production" and "speedup" in r]
    for link in bench.SWEEP_LINKS:
        run, mine = runs[f"scale-{link}"], [r for r in records if r["link"] == link]
        assert run["params"] * 4 == bench.PRODUCTION["gradient_bytes"] and run["microBatch"] == 1 and run["overlap"]
        assert run["computePerSample"] == pytest.approx(bench.PRODUCTION["compute_s"])
        for k, pairs in run["points"].items():
            at_k = [r for r in mine if r["accumulation"] == int(k) and r["workers"] > 1]
            assert pairs == [[r["workers"], r["speedup"]] for r in at_k]


def saved_records() -> list[dict]:
    import json

    return json.loads(SAVED.read_text())["records"]


@pytest.mark.fast
def test_the_saved_sweep_shows_what_in_production_says():
    """In production: 8 workers reach "about 1.4x" with one micro-batch per step, "nearly 4x" with 4
    and "over 6x" with 16; and the cost model puts the real job (ResNet-50's whole gradient in DDP's
    default buckets, one allreduce at a time as under NCCL, the link 10 times faster) at 3.8x with 4,
    as it puts the scale model, whose buckets are scaled with its gradient: 5 buckets and 4."""
    at8 = {r["accumulation"]: r for r in saved_records() if r["case"] == "production" and r["link"] == "100mbit"
           and r["workers"] == 8}  # fmt: skip
    assert 1.2 < at8[1]["speedup"] < 1.6 and 3.5 <= at8[4]["speedup"] < 4.2 and at8[16]["speedup"] > 6
    net = costmodel.Network(at8[4]["alpha_s"], at8[4]["beta_s_per_byte"] / bench.LINK_SCALE)
    real = costmodel.Workload(bench.RESNET50["params"], bench.RESNET50["step_s"], 1, 4)
    full = costmodel.predict_steps(real, [1, 8], net)[1].speedup
    assert (round(full, 1), round(at8[4]["predicted_speedup"], 1)) == (3.8, 3.8)
    real_buckets = costmodel.ddp_buckets(bench.RESNET50["params"] * 4)
    assert (len(real_buckets), len(at8[4]["ddp_bucket_bytes"])) == (5, 4)


@pytest.mark.fast
def test_the_saved_sweep_over_100mbit_loses_on_two_workers_at_one_micro_batch_and_accumulation_wins_it_back():
    """Two workers over 100 Mbit/s lose to one at one micro-batch a step and win it back at four, as
    live (test_over_100mbit_two_workers_lose_to_one_...), and more at 16: the saved sweep."""
    two = {
        r["accumulation"]: r["speedup"]
        for r in saved_records()
        if (r["case"], r["link"], r["workers"]) == ("production", bench.LIVE_LINK, 2)
    }
    assert two[1] < 1 < two[4] < two[16], two


@pytest.mark.fast
def test_the_saved_bucket_sweep_shows_what_ddp_internals_says():
    """ "One bucket as large as the gradient waits for the whole backward pass": its step is the
    longest; smaller buckets hide more, down to the lowest step between 1/16 and 1/4 MiB; at 1/8 MiB
    the step falls between a model of one allreduce at a time and the model of gloo's two at once,
    which stays within 10%; at 1/16 it falls behind both (two cores, eight ranks' 8 KiB messages)."""
    rows = sorted(
        (r for r in saved_records() if r["case"] == "buckets" and r["bucket_mb"]), key=lambda r: r["bucket_mb"]
    )
    step = {r["bucket_mb"]: r["measured_s"] for r in rows}
    assert max(step, key=step.get) == 2.0 and step[0.25] < step[1.0] < step[2.0]
    assert min(step, key=step.get) in (1 / 16, 1 / 8, 1 / 4)
    assert rows[0]["bucket_mb"] == 1 / 16 and rows[0]["ratio"] < 1
    smallest = rows[1]
    point = Point(
        8, 1, smallest["gradient_bytes"], smallest["compute_ms"] / 1e3, smallest["layers"], smallest["bucket_mb"]
    )
    one_lane = costmodel.step_time(
        point.workload(), 8, costmodel.Network(smallest["alpha_s"], smallest["beta_s_per_byte"])
    )
    assert smallest["predicted_s"] < smallest["measured_s"] < one_lane.step and abs(smallest["ratio"] - 1) <= 0.10
    assert (REPO / "docs/assets/emulated-buckets-cpu.svg").read_text() == bench.plot_buckets(
        saved_records(), json_machine()
    )
    assert (REPO / "docs/assets/emulated-accumulation-cpu.svg").read_text() == bench.plot_accumulation(
        saved_records(), json_machine()
    )


def json_machine() -> dict:
    import json

    return json.loads(SAVED.read_text())["machine"]


@pytest.mark.fast
def test_the_saved_two_level_run_says_what_the_appendix_and_collectives_say():
    """ "DDP's one flat ring then takes as long a step as on 8 nodes of one, within a few percent, and
    the cost model predicts the same time for both": 8 workers on 2 nodes of 4 (loopback dialled to 10
    times the link between) against 8 nodes of one, at each micro-batch count the sweep ran."""
    records = saved_records()
    two = {r["accumulation"]: r for r in records if r["case"] == "two-level"}
    flat = {
        r["accumulation"]: r
        for r in records
        if r["case"] == "production" and r["workers"] == 8 and r["link"] == bench.LIVE_LINK
    }
    assert set(two) == {1, 4} and all(r["nodes"] == bench.NODES and r["workers"] == 8 for r in two.values())
    assert all(r["inside_link"] == bench.INSIDE_LINK for r in two.values())
    for k, r in two.items():
        assert r["predicted_s"] == pytest.approx(flat[k]["predicted_s"], rel=1e-3)  # the slowest link sets it
        assert abs(r["measured_s"] / flat[k]["measured_s"] - 1) <= 0.05 and abs(r["ratio"] - 1) <= 0.10


@pytest.mark.fast
def test_the_saved_ranks_run_gives_the_saved_sweeps_steps_within_10_percent():
    """The network-emulation appendix's saved run with the links paced by the ranks, beside the sweep's
    tc twin: every point they share within 10%, and the cost model within 10% of each."""
    import json

    ranks = json.loads((REPO / "measurements/emulated-ranks-cpu.json").read_text())["records"]
    assert {r["link_emulation"] for r in ranks} == {"ranks"}
    tc = {(r["case"], r["workers"], r["accumulation"]): r for r in saved_records() if r["link"] == bench.LIVE_LINK}
    shared = [r for r in ranks if (r["case"], r["workers"], r["accumulation"]) in tc]
    assert len(shared) == len(ranks) == len(bench.live_points())
    for r in shared:
        twin = tc[r["case"], r["workers"], r["accumulation"]]
        assert abs(r["best_s"] / twin["best_s"] - 1) <= 0.10 and abs(r["predicted_s"] / r["best_s"] - 1) <= 0.10, r


@pytest.mark.fast
def test_every_page_that_draws_or_runs_the_scale_model_says_what_is_emulated_in_one_sentence():
    """Wherever its measurements appear, the reader is told the same sentence: compute is a wait;
    the bytes, the collectives, the overlap and the link are real."""
    sentence = "compute is a wait; the bytes, the collectives, the overlap and the link are real"
    pages = sorted((REPO / "docs").rglob("*.md")) + sorted((REPO / "docs/lab").glob("*.py"))
    shows = [p for p in pages if re.search(r"assets/emulated-|bench emulated|bench\", \"emulated", p.read_text())]
    assert len(shows) >= 5, shows

    def said(page) -> str:  # lower case, one space, no emphasis, no notebook comment marks
        return " ".join(re.sub(r"^# ?", "", page.read_text(), flags=re.M).replace("*", "").lower().split())

    silent = [str(p.relative_to(REPO)) for p in shows if sentence not in said(p)]
    assert not silent, f"pages that show the scale model without saying what is emulated: {silent}"
