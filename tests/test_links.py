"""distdocs.lab.links and the appendix on the network emulation: a dialled link delivers its rate,
the α-β fit over it recovers that rate, the saved sweep the page draws says so too, and no namespace
outlives its network. Building networks needs root; without it the tests that build one skip, saying
so, and a bench run asking for a link fails with one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from distdocs.arguments import parse_rate
from distdocs.bench.allreduce import link_fits
from distdocs.bench.ddp_steps import MODELS
from distdocs.bench.prediction import speedups
from distdocs.lab import links

from docexec.fences import REPO, page_command
from support.link_bounds import SENT_BOUNDS, link_floor_s

PAGE = REPO / "docs/appendix/network-emulation.md"
SAVED = REPO / "measurements/allreduce-links-cpu.json"
THREE_LINKS = REPO / "measurements/prediction-links-cpu.json"
# tbf counts whole frames: with 1500-byte frames a TCP stream's payload gets about 95% of the rate.
# The bounds: a socket within 10% of the rate, the fit within 15%.
SOCKET_TOLERANCE, FIT_TOLERANCE = 0.10, 0.15
# The least a link must carry, live, as a share of its rate. At 100 Mbit/s the link sets the pace on any
# CPU: within 10%. At 1 Gbit/s the CPU does (two Python threads copying through veth and tbf, on two
# cores that the rest of the suite keeps busy; one run capped a socket at 0.77), so a floor within 10%
# is a floor on the machine's speed. What it keeps is what a mis-dialled link fails: 100 Mbit/s by
# mistake carries 0.1 of 1 Gbit/s, and a best transfer at 0.2 would take five times the dial's time.
# The 1 Gbit/s link's ±15% is held on the saved, quiet sweep; the tc check below holds its dial.
SOCKET_FLOOR = {"100mbit": 1 - SOCKET_TOLERANCE, "1gbit": 0.2}
FIT_LINE = re.compile(r"^  (\S+), 2 ranks on 2 nodes: ([\d.]+) (Mbit|Gbit)/s, ([\d.]+) of the rate dialled", re.M)


def needs_root():
    try:
        links.check_can_build()
    except links.LinkError as err:
        pytest.skip(str(err))


@pytest.mark.processes  # the test tiers: see the testing page
@pytest.mark.parametrize("rate", ["100mbit", "1gbit"])
def test_a_dialled_link_delivers_its_rate_each_way(rate):
    """The best of three transfers each way (as iperf reports a link), each about 0.3 s at the rate:
    on two shared cores a single transfer can be starved of CPU, which says nothing of the link.
    No link beats its dial (load only slows a transfer), and each node's qdisc is tbf at the rate
    dialled and carried every byte sent (tc's own count), which load cannot change."""
    needs_root()
    nbytes = int(parse_rate(rate) / 8 * 0.3)
    with links.Network(2, rate) as net:
        there = max(links.measure_rate(net, 0, 1, nbytes) for _ in range(3))
        back = max(links.measure_rate(net, 1, 0, nbytes) for _ in range(3))
        qdiscs = [qdisc_of(net.node(k)) for k in (0, 1)]
        names = net.namespaces()
    for measured in (there, back):
        assert measured <= (1 + SOCKET_TOLERANCE) * parse_rate(rate), (rate, there, back)
        assert measured >= SOCKET_FLOOR[rate] * parse_rate(rate), (rate, there, back)
    for q in qdiscs:  # each node sent 3 transfers' payload through its tbf, with headers and acks on top
        assert q["kind"] == "tbf" and q["options"]["rate"] * 8 == parse_rate(rate), q
        assert q["bytes"] >= 3 * nbytes, (nbytes, q)
    assert not set(names) & set(links.leftover_namespaces()), "namespaces outlived their network"


def qdisc_of(node: links.Node) -> dict:
    """The root qdisc on a node's link as `tc -s -j` shows it: its kind, its rate (bytes/s) and the
    bytes it has sent."""
    shown = node.run(
        ["tc", "-s", "-j", "qdisc", "show", "dev", node.interface], capture_output=True, text=True, timeout=30
    )
    (root,) = [q for q in json.loads(shown.stdout) if q.get("root")]
    return root


@pytest.mark.processes
def test_no_namespace_outlives_a_network_that_failed_or_whose_builder_was_killed():
    needs_root()
    with pytest.raises(ZeroDivisionError), links.Network(2, "100mbit") as net:
        names = net.namespaces()
        assert set(names) <= set(links.leftover_namespaces(os.getpid()))
        raise ZeroDivisionError("a failure inside the with block")
    assert not set(names) & set(links.leftover_namespaces())
    # A builder killed with SIGKILL cannot clean up: the next Network built on the machine does (the
    # child names what it built; another test's network may be the one that removes it first).
    build_then_die = (
        "import os; from distdocs.lab.links import Network, leftover_namespaces; net = Network(2, '100mbit').build(); "
        "assert set(net.namespaces()) <= set(leftover_namespaces()); print(' '.join(net.namespaces()), flush=True); "
        "os.kill(os.getpid(), 9)"
    )
    child = subprocess.run([sys.executable, "-c", build_then_die], capture_output=True, text=True, timeout=60)
    assert child.returncode == -9, child.stderr
    orphans = child.stdout.split()
    assert len(orphans) == 3, child  # the switch and two nodes
    with links.Network(1):
        pass
    assert not set(orphans) & set(links.leftover_namespaces())


@pytest.mark.processes
def test_the_pages_command_fits_each_dialled_rate_within_15_percent(command_runs):
    """The page's own command, run once for this test and test_docs: it prints a fit line for each
    rate (2 ranks on 2 nodes), and at 100 Mbit/s the fit recovers the rate dialled within 15%."""
    needs_root()
    result = command_runs.run_ok(page_command("docs/appendix/network-emulation.md", "bench allreduce --link"))
    fits = {rate: float(of_dialled) for rate, _, _, of_dialled in FIT_LINE.findall(result.stdout)}
    assert fits.keys() == {"1gbit", "100mbit"}, result.describe()
    # Both fits take each size's best iteration, as the saved sweep's do. 100 Mbit/s is the link's limit
    # on any CPU: within 15%. 1 Gbit/s is not, on two cores that the rest of the suite keeps busy (one
    # run capped a socket at 0.77 of it): what holds on any machine is that no link beats its dial, and
    # that it carries more than a mis-dialled 100 Mbit/s would (0.1; SOCKET_FLOOR says why 0.2). Its
    # ±15% is held on the saved, quiet run
    # (test_the_saved_sweep_recovers_every_dialled_rate_and_loopback_is_far_faster).
    assert abs(fits["100mbit"] - 1) <= FIT_TOLERANCE, result.describe()
    assert SOCKET_FLOOR["1gbit"] <= fits["1gbit"] <= 1 + FIT_TOLERANCE, result.describe()


@pytest.mark.fast
def test_the_link_fit_takes_each_sizes_fastest_iteration():
    """A rank kept waiting for a CPU only adds time: two iterations of three slowed by a third put
    the median's fit at 0.75 of the rate, and the fastest iteration's fit recovers it exactly."""
    rate = parse_rate("100mbit")
    records = [
        {"impl": "gloo", "world_size": 2, "bytes": n, "time_s": 8 * n / rate * 4 / 3, "best_s": 8 * n / rate}
        | {"link": "100mbit", "nodes": 2}
        for n in (4 << 20, 16 << 20)
    ]
    (fit,) = link_fits(records)
    assert fit["of_dialled"] == pytest.approx(1, rel=1e-9)
    (median_fit,) = link_fits([{k: v for k, v in r.items() if k != "best_s"} for r in records])
    assert median_fit["of_dialled"] == pytest.approx(0.75, rel=1e-9)


@pytest.mark.fast
def test_the_saved_sweep_recovers_every_dialled_rate_and_loopback_is_far_faster():
    """What the page says of the saved run: every dialled link's fit within 15% of its rate, and
    loopback at least five times faster than every dialled link."""
    fits = link_fits(json.loads(SAVED.read_text())["records"])
    dialled = [f for f in fits if f["link"] != "loopback"]
    assert {f["link"] for f in dialled} == {"1gbit", "100mbit"} and {f["world_size"] for f in dialled} == {2, 4}
    for f in dialled:
        assert abs(f["of_dialled"] - 1) <= FIT_TOLERANCE, f
    loopback = [f["bits_per_s"] for f in fits if f["link"] == "loopback"]
    assert loopback and min(loopback) >= 5 * max(f["bits_per_s"] for f in dialled), (loopback, dialled)


@pytest.mark.fast
def test_the_saved_three_link_run_is_predicted_within_20_percent_and_has_the_shape_the_scaling_page_gives():
    """docs/lesson/gradient-accumulation.md, "Over a slower link": every measured step time predicted
    within 0.8-1.2 by the cost model fed from other runs; over the slowest link two nodes are slower
    than one and accumulation wins it back; the slower the link, the lower the speedup."""
    records = json.loads(THREE_LINKS.read_text())["records"]
    assert {r.get("link", "loopback") for r in records} == {"loopback", "1gbit", "100mbit"}
    two = [r for r in records if r["world_size"] == 2]  # at 1 rank the ratio is 1 by construction
    assert len(two) == 9 and all("compute_fed_s" in r for r in two), "not fed from a run of its own"
    for r in two:
        assert 0.8 <= r["ratio"] <= 1.2, r
    s = {(r["link"], r["accumulation"]): r["measured"] for r in speedups(records)}
    assert s["100mbit", 1] < 1 < s["100mbit", 4] < s["100mbit", 16], s
    assert s["100mbit", 1] < s["1gbit", 1] < s["loopback", 1], s


@pytest.mark.fast
def test_the_explorers_measured_runs_are_the_saved_three_link_run():
    """hooks/explorer_presets.py reads the run without torch; its numbers are the bench's own."""
    from hooks.explorer_presets import SAMPLES_PER_RANK, measured_runs

    assert SAMPLES_PER_RANK == MODELS["compute-bound"][2]
    records = json.loads(THREE_LINKS.read_text())["records"]
    runs = measured_runs()
    for s in speedups(records):
        assert runs[s["link"]]["points"][str(s["accumulation"])] == [[2, pytest.approx(s["measured"], rel=1e-12)]]
    three_links = {k: r for k, r in runs.items() if not k.startswith("scale-")}  # the scale model's: elsewhere
    for link, run in three_links.items():  # the controls it sets: the 1-rank step of k = 1, the gradient, the fit
        one = next(
            r for r in records if (r.get("link", "loopback"), r["world_size"], r["accumulation"]) == (link, 1, 1)
        )
        assert run["params"] * 4 == one["gradient_bytes"] and run["microBatch"] == SAMPLES_PER_RANK
        assert run["computePerSample"] * run["microBatch"] == pytest.approx(one["measured_step_s"], rel=1e-12)
        assert (run["alpha"], run["beta"]) == (one["alpha_s"], one["beta_s_per_byte"])


@pytest.mark.processes
def test_a_bad_rate_or_uneven_nodes_get_one_line_and_exit_2():
    for flags, message in [
        ("--link 100mbps", "--link: rate '100mbps'"),
        ("--link 100mbit --world-sizes 3", "--nodes 2: need 2 or more, dividing every world size"),
    ]:
        result = subprocess.run(
            [sys.executable, "-m", "distdocs.cli", "bench", "allreduce", *flags.split()],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result


@pytest.mark.processes
def test_without_root_a_link_is_refused_in_one_line():
    if os.geteuid() != 0:
        command = [sys.executable, "-m", "distdocs.cli", "bench", "allreduce", "--link", "100mbit"]
    else:  # as root, drop to nobody to see what a reader without root sees
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m"]
        command += ["distdocs.cli", "bench", "allreduce", "--link", "100mbit"]
    env = os.environ | {"HOME": "/tmp", "MPLCONFIGDIR": "/tmp"}  # nobody cannot write root's home
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd="/tmp", env=env)
    assert result.returncode == 2, result
    refusal = "error: dialled links need root (network namespaces and tc); run as root to measure them\n"
    assert result.stderr == refusal, result.stderr


HIERARCHY = REPO / "measurements/hierarchy-links-cpu.json"


@pytest.mark.fast
def test_the_saved_hierarchy_run_says_what_the_allreduce_across_nodes_page_says():
    """docs/deep-dives/allreduce-across-nodes.md, "Fast inside a node, slow between nodes": on both links the
    two-level allreduce beats the flat ring at the largest size, the model with two links predicts
    both within 0.8-1.2, and HSDP sends the fewest bytes across, FSDP the most."""
    records = json.loads(HIERARCHY.read_text())["records"]
    allreduces = [r for r in records if "impl" in r]
    assert {r["link"] for r in allreduces} == {"1gbit", "100mbit"}
    for r in (r for r in allreduces if r["impl"] in ("ring", "two-level")):
        assert 0.8 <= r["ratio"] <= 1.2, r
    top = max(r["bytes"] for r in allreduces)
    for link in ("1gbit", "100mbit"):
        t = {r["impl"]: r["time_s"] for r in allreduces if (r["link"], r["bytes"]) == (link, top)}
        assert t["two-level"] < t["ring"], (link, t)
    sent = {r["layout"]: r["node_sent_bytes"] / r["gradient_bytes"] for r in records if "layout" in r}
    assert sent["HSDP"] < sent["DDP"] < sent["FSDP"], sent


@pytest.mark.processes
def test_the_hierarchy_command_on_the_page_sends_what_each_allreduce_must_and_no_faster(command_runs):
    """The page's command at 100 Mbit/s, run once for this test and test_docs. What load cannot change:
    the flat ring sends 2(n-1)/n = 1.5 payloads through each node's link (the crossing rank sends all
    its messages across), the two-level allreduce one (its two rings of half the payload share the
    link), so neither takes less than its bytes' time on the link, and the two-level one, with two
    thirds of the ring's bytes, is done first. HSDP's node sends about one gradient across per step.

    The model's prediction within 0.8-1.2 is held on the saved run
    (test_the_saved_hierarchy_run_says_what_the_allreduce_across_nodes_page_says): live, four ranks on
    two cores beside the rest of the suite add their waits for a core to the link's time (a fresh
    clone's suite measured the two-level allreduce at 0.75 of the model)."""
    needs_root()
    result = command_runs.run_ok(page_command("docs/appendix/network-emulation.md", "bench hierarchy"))
    rows = dict(
        (impl, (int(size), float(ms) / 1e3, ratio))
        for size, impl, ms, ratio in re.findall(
            r"^ +100mbit +(\d+) +(\S+) +([\d.]+) +\S+ +\S+ +(\S+)$", result.stdout, re.M
        )
    )
    assert rows.keys() == {"gloo", "ring", "two-level"}, result.describe()
    payload = rows["ring"][0]
    assert rows["two-level"][1] < rows["ring"][1], result.describe()
    for impl, across in (("ring", 1.5 * payload), ("two-level", payload)):
        assert rows[impl][1] >= link_floor_s(across, "100mbit"), (impl, result.describe())
        assert float(rows[impl][2]) <= 1.2, result.describe()  # nor over 20% under the model
    hsdp = re.findall(r"HSDP, node \d: +\d+ \(([\d.]+) x the gradient\)", result.stdout)
    # What crosses: the all_reduce of each rank's half (S/2 each, 2 ranks a node) and TCP/IP's overhead.
    assert len(hsdp) == 2 and all(1.0 <= float(x) <= 1.15 for x in hsdp), result.describe()


@pytest.mark.processes
def test_the_accumulation_pages_slow_link_run_sends_one_gradient_a_step_and_takes_the_links_time(command_runs):
    """docs/lesson/gradient-accumulation.md, "Over a slower link", the page's command at 100 Mbit/s,
    run once for this test and test_docs. At 1 and at 4 micro-batches a step, each node's link sends,
    per synced step, 1.0-1.15x the gradient's bytes (TCP/IP headers and acknowledgements on top, and
    the timer's barriers): syncing every micro-batch would send 4x at 4, skipping the sync nothing,
    and ranks over loopback no count at all. And every 2-rank step takes at least the link's time
    for one gradient (about 74 ms of its 110). Bytes and the link's time: what load cannot change.

    Whether two nodes are slower than one and accumulation wins it back compares real computation
    with real computation on two shared cores, which load turns either way (a fresh clone, its
    1-rank world starved of CPU, measured 2.06x where the quiet run has 0.44x): that is held on the
    saved run
    (test_the_saved_three_link_run_is_predicted_within_20_percent_and_has_the_shape_the_scaling_page_gives)
    and, live, on the scale model, where compute is a stated wait (tests/test_scale_model.py)."""
    needs_root()
    (run,) = command_runs.run_ok(page_command("docs/lesson/gradient-accumulation.md", "bench prediction")).records
    two = {r["accumulation"]: r for r in run["records"] if r["world_size"] == 2 and r.get("link") == "100mbit"}
    assert two.keys() == {1, 4}, run["records"]
    for k, r in two.items():
        least, most = r["sent_bytes_per_sync_min"], r["sent_bytes_per_sync_max"]
        assert least is not None and SENT_BOUNDS[0] <= least / r["gradient_bytes"], (k, r)
        assert most / r["gradient_bytes"] <= SENT_BOUNDS[1], (k, r)
        assert r["measured_step_s"] >= link_floor_s(r["gradient_bytes"], "100mbit"), (k, r)
