"""The cost model (distdocs.calculators.costmodel, fed by distdocs.calculators.fits) and `distdocs sim`:
formulas checked against hand-derived values, the fit against timings made from known α and β, and bad
input."""

import json
import subprocess
import sys

import pytest

from distdocs import cli
from distdocs.calculators.costmodel import (
    PRESETS,
    Network,
    Workload,
    allreduce_seconds,
    allreduce_terms,
    ddp_buckets,
    predict_steps,
    step_time,
)
from distdocs.calculators.fits import fit_alpha_beta, from_scaling, load_fit

pytestmark = pytest.mark.fast  # the test tier: see the testing page

NET = Network(alpha=1e-5, beta=1e-9)  # 10 µs per message, 1 GB/s


@pytest.mark.parametrize(
    ("algorithm", "n", "expected"),
    [
        ("ring", 1, (0, 0)),
        ("ring", 2, (2, 1)),
        ("ring", 4, (6, 1.5)),
        ("ring", 8, (14, 1.75)),
        ("tree", 2, (2, 2)),
        ("tree", 5, (6, 6)),  # ceil(log2 5) = 3 rounds up, 3 down
        ("naive", 4, (6, 6)),
    ],
)
def test_allreduce_terms_match_the_algorithms_as_built(algorithm, n, expected):
    assert allreduce_terms(n, algorithm) == pytest.approx(expected)


def test_ring_moves_2_n_minus_1_over_n_of_the_bytes():
    s = 64 * 2**20
    assert allreduce_seconds(s, 4, NET) == pytest.approx(6 * 1e-5 + 1.5 * s * 1e-9)
    assert allreduce_seconds(s, 1, NET) == 0


def test_fit_recovers_alpha_and_beta_from_exact_timings():
    records = [
        {"impl": "gloo", "world_size": n, "bytes": s, "time_s": allreduce_seconds(s, n, NET)}
        for n in (2, 4)
        for s in (2**18, 2**22, 2**26)
    ]
    fit = fit_alpha_beta(records)
    # Exact data: only float rounding separates the fit from the truth.
    assert fit.network.alpha == pytest.approx(NET.alpha, rel=1e-9)
    assert fit.network.beta == pytest.approx(NET.beta, rel=1e-9)
    assert fit.relative_rms < 1e-9 and fit.points == 6


def test_fit_of_the_saved_allreduce_run_describes_it():
    """The saved 2-rank gloo timings follow α + S·β closely; the fit reports how closely."""
    fit = load_fit("measurements/allreduce-cpu.json", "gloo", world_size=2)
    assert fit.points >= 2 and fit.relative_rms < 0.25
    assert 0 < fit.network.alpha < 1e-2 and 0.1 < fit.network.gb_per_s < 100


def test_accumulation_multiplies_compute_and_keeps_one_sync():
    one = step_time(Workload(100e6, 1e-3, 32), 8, PRESETS["pcie4"])
    four = step_time(Workload(100e6, 1e-3, 32, accumulation=4), 8, PRESETS["pcie4"])
    assert four.compute == pytest.approx(4 * one.compute)
    assert four.sync == pytest.approx(one.sync)
    assert four.samples_per_s > one.samples_per_s


def test_bf16_gradients_halve_the_bytes_term():
    fp32 = step_time(Workload(100e6, 1e-3, 32, overlap=False), 2, Network(0.0, 1e-9))
    bf16 = step_time(Workload(100e6, 1e-3, 32, gradient_dtype="bf16", overlap=False), 2, Network(0.0, 1e-9))
    assert bf16.sync == pytest.approx(fp32.sync / 2)


def test_overlap_hides_all_but_what_the_backward_cannot_cover():
    work = Workload(50e6, 1e-3, 64)  # 200 MB of gradients; backward 2/3 of 64 ms
    buckets = ddp_buckets(work.gradient_bytes)
    assert buckets[:2] == [2**20, 25 * 2**20] and sum(buckets) == 200e6  # DDP's small first bucket, then 25 MiB
    hidden = step_time(work, 8, PRESETS["nvlink4"])
    exposed = step_time(Workload(50e6, 1e-3, 64, overlap=False), 8, PRESETS["nvlink4"])
    assert exposed.exposed_sync == pytest.approx(exposed.sync)
    # Fast links: every bucket's allreduce ends before the next bucket is ready, so only the last
    # bucket's allreduce, after the backward pass, shows.
    assert hidden.exposed_sync == pytest.approx(allreduce_seconds(buckets[-1], 8, PRESETS["nvlink4"]))


def test_ddp_closes_a_bucket_at_a_parameters_end_once_it_holds_its_limit():
    """torch's C++ Reducer (compute_bucket_assignment_by_size): parameters in the order backward produces
    them; the first bucket up to its limit, then the others, each closed at the parameter that fills it."""
    mib = 2**20
    assert ddp_buckets(2 * mib, parameter_bytes=(mib // 4,) * 8) == [mib, mib]
    assert ddp_buckets(40 * mib, parameter_bytes=(3 * mib,) * 13 + (mib,)) == [3 * mib, 27 * mib, 10 * mib]
    assert ddp_buckets(10 * mib, 4 * mib, 4 * mib) == [4 * mib, 4 * mib, 2 * mib]  # bucket_cap_mb given
    assert ddp_buckets(0.5 * mib) == [0.5 * mib]


def test_predict_steps_gives_speedup_and_efficiency_against_one_rank():
    steps = predict_steps(Workload(100e6, 0.5e-3, 64), [1, 2, 8], PRESETS["pcie4"])
    assert steps[0].speedup == 1 and steps[0].exposed_sync == 0
    for s in steps:
        assert s.speedup == pytest.approx(s.world_size * steps[0].step / s.step)
        assert s.efficiency == pytest.approx(s.speedup / s.world_size)


@pytest.mark.parametrize(
    ("make", "names"),
    [
        (lambda: Workload(0, 1e-3, 8), "params"),
        (lambda: Workload(1e6, -1, 8), "compute_per_sample"),
        (lambda: Workload(1e6, 1e-3, 8, accumulation=0), "accumulation"),
        (lambda: Workload(1e6, 1e-3, 8, gradient_dtype="fp8"), "gradient_dtype"),
        (lambda: Network.from_bandwidth(0, 1), "bandwidth"),
        (lambda: allreduce_terms(4, "butterfly"), "algorithm"),
        (lambda: allreduce_terms(0), "world_size"),
        (lambda: fit_alpha_beta([{"impl": "gloo", "world_size": 2, "bytes": 4, "time_s": 1e-4}]), "records"),
    ],
)
def test_bad_api_input_raises_a_value_error_naming_the_argument(make, names):
    with pytest.raises(ValueError, match=names):
        make()


def test_sim_prints_a_table_and_json_with_the_same_numbers(capsys, tmp_path):
    argv = ["sim", "--params", "100M", "--compute-per-sample", "0.5", "--micro-batch", "64", "--world-sizes", "1,8"]
    assert cli.main([*argv, "--plot", str(tmp_path / "s.svg")]) == 0
    table = capsys.readouterr().out
    assert cli.main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = predict_steps(Workload(100e6, 0.5e-3, 64), [1, 8], PRESETS["pcie4"])
    assert [s["speedup"] for s in data["steps"]] == pytest.approx([s.speedup for s in expected])
    assert f"{expected[1].speedup:.2f}x" in table.splitlines()[-1]
    assert (tmp_path / "s.svg").read_text().startswith("<?xml")


def test_sim_with_a_fit_reads_the_saved_benchmark(capsys):
    assert cli.main(["sim", "--params", "8.4M", "--compute-per-sample", "3.8", "--micro-batch", "8",
                     "--fit", "measurements/allreduce-cpu.json", "--fit-world-size", "2"]) == 0  # fmt: skip
    assert "relative RMS error" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra",
    [
        ["--params", "4XB"],
        ["--params", "0"],
        ["--algorithm", "butterfly"],
        ["--world-sizes", "0,2"],
        ["--accumulation", "0"],
        ["--compute-per-sample", "-1"],
        ["--network", "carrier-pigeon"],
        ["--bandwidth", "10"],
        ["--bandwidth", "0", "--latency", "5"],
        ["--gradient-dtype", "fp8"],
        ["--fit", "pyproject.toml"],
        ["--fit", "measurements/scaling-cpu.json"],
    ],
)
def test_bad_sim_arguments_get_one_line_and_exit_2(extra, capsys):
    base = {"--params": "1M", "--compute-per-sample": "1", "--micro-batch": "8"}
    for flag, value in zip(extra[::2], extra[1::2]):
        base[flag] = value
    argv = ["sim", *[x for kv in base.items() for x in kv]]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err


def test_calibration_on_the_saved_scaling_run_reproduces_its_two_rank_speedup():
    """By construction: the 1-rank step is the compute and the 2-rank step's extra time the sync."""
    with open("measurements/scaling-cpu.json") as f:
        records = json.load(f)["records"]
    for model in ("compute-bound", "sync-bound"):
        for k in (1, 4):
            work, network = from_scaling(records, model, k)
            measured = next(r for r in records if (r["model"], r["accumulation"], r["world_size"]) == (model, k, 2))
            two = predict_steps(work, [1, 2], network)[1]
            assert two.speedup == pytest.approx(measured["speedup"], rel=1e-9)


def test_sim_measured_needs_a_model_and_a_scaling_file(capsys):
    assert cli.main(["sim", "--measured", "measurements/scaling-cpu.json"]) == 2
    assert cli.main(["sim", "--measured", "measurements/allreduce-cpu.json", "--model", "sync-bound"]) == 2
    assert cli.main(["sim", "--measured", "measurements/scaling-cpu.json", "--model", "sync-bound"]) == 0


def test_what_the_production_page_says_of_its_recommendation_model():
    """docs/operations/in-production.md: 100M parameters, 10 µs a sample, 2048 samples per GPU, 8 GPUs."""
    at8 = {
        (net, k): predict_steps(Workload(100e6, 1e-5, 2048, accumulation=k), [1, 8], PRESETS[net])[1]
        for net in PRESETS
        for k in (1, 4)
    }
    pcie = at8["pcie4", 1]
    assert 3.5 < pcie.speedup < 5 and 0.7 < pcie.exposed_sync / pcie.compute < 1.3  # "about as long"
    assert at8["pcie4", 4].speedup > 5.5  # "well past 4x"
    assert at8["eth-100g", 1].speedup < pcie.speedup  # "over slower links, 8 GPUs give less"
    assert at8["nvlink4", 1].speedup > 7.5  # "nowhere near sync-bound"


@pytest.mark.fast
@pytest.mark.parametrize("argv", [["--help"], ["sim", "--help"], ["memory", "--params", "7B"], ["bench", "--help"]])
def test_the_command_line_imports_torch_only_for_a_benchmark(argv):
    """`distdocs --help`, the calculators and the list of benchmarks answer at once (torch alone takes
    over a second to import on 2 cores): only `distdocs bench NAME` imports NAME's module, and torch."""
    probe = (
        "import sys\n"
        "from distdocs import cli\n"
        "try:\n"
        f"    cli.main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('torch imported' if 'torch' in sys.modules else 'no torch', file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.stderr.strip().splitlines()[-1] == "no torch", result.stderr


@pytest.mark.fast
def test_two_links_reduce_to_one_when_nodes_hold_one_rank_and_price_what_crosses():
    """With one rank a node, the flat ring and the two-level allreduce are the ring over the link
    between nodes. With k ranks a node sharing its link, the two-level allreduce sends 2(N-1)/N * S
    across (N nodes), the flat ring 2(n-1)/n * S: at 2 nodes of 2, S against 1.5 S."""
    from distdocs.calculators.costmodel import allreduce_on_nodes_seconds, flat_ring_on_nodes_seconds, two_level_seconds

    inside, between, s = Network(1e-6, 1e-11), Network(5e-5, 1e-8), 2**24
    ring = allreduce_seconds(s, 4, between)
    assert flat_ring_on_nodes_seconds(s, 1, 4, inside, between) == pytest.approx(ring, rel=1e-12)
    assert two_level_seconds(s, 1, 4, inside, between) == pytest.approx(ring, rel=1e-12)
    free_inside = Network(0.0, 1e-30)  # inside the node costs nothing: what is left is what crosses
    assert flat_ring_on_nodes_seconds(s, 2, 2, free_inside, Network(0.0, 1e-8)) == pytest.approx(1.5 * s * 1e-8)
    assert two_level_seconds(s, 2, 2, free_inside, Network(0.0, 1e-8)) == pytest.approx(1.0 * s * 1e-8)
    assert allreduce_on_nodes_seconds(s, 4, between, "two-level", 2, inside) == two_level_seconds(
        s, 2, 2, inside, between
    )
    assert allreduce_on_nodes_seconds(s, 2, between, "ring", 4, inside) == allreduce_seconds(s, 2, inside)  # one node
    with pytest.raises(ValueError, match="do not fill nodes"):
        allreduce_on_nodes_seconds(s, 6, between, "ring", 4, inside)


@pytest.mark.fast
@pytest.mark.holds(
    "docs/start/overview.md",
    "a rank's sync bytes grow with n only toward twice the gradient's, so past a few ranks each added rank adds "
    "about the same, a fraction of one rank, compute ÷ (compute + sync). The speedup keeps rising; the "
    "efficiency, speedup ÷ n, stays low.",
)
def test_weak_scaling_of_a_sync_bound_job_keeps_rising_at_a_low_efficiency():
    """The cost model at α = 0, the batch per rank fixed, a sync as long as the compute (no overlap):
    the speedup rises at every n, each added rank adds less than one rank, and the added speedup tends
    to compute / (compute + 2 S β), the share of a step that is compute once a rank sends 2S."""
    work = Workload(params=1e6, compute_per_sample=1e-3, micro_batch=10, overlap=False)
    network = Network(alpha=0.0, beta=work.micro_batch * work.compute_per_sample / work.gradient_bytes)
    steps = predict_steps(work, list(range(1, 257)), network)
    speedups = [s.speedup for s in steps]  # at 1, 2, ..., 256 ranks
    gains = [b - a for a, b in zip(speedups, speedups[1:])]
    efficiency = [s / n for n, s in enumerate(speedups, 1)]
    assert gains[0] == pytest.approx(0) and all(0 < g < 1 for g in gains[1:])  # 2 ranks = 1; then rising
    assert all(b < a for a, b in zip(efficiency, efficiency[1:]))
    assert gains[-1] == pytest.approx(1 / 3, rel=0.01)  # compute 1, sync 2 x 1: a third of a rank each
    assert speedups[7] > speedups[3] > speedups[1]  # the saved sweep's shape: 0.63, 0.86, 1.52 at 2, 4, 8
