# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab: simulate data-parallel sync
#
# Data parallelism in three steps, each small enough to print: workers that train on shards of a
# batch, the allreduce that merges their gradients, and the cost model that says when that merge,
# not the computation, sets the pace. The last step then measures your own machine and sets the
# measurement next to the prediction.
#
# The notebook runs in well under a minute on 2 CPU cores, with `pip install -e ".[lab]"` from the
# repository (it imports `distdocs`, which draws with matplotlib; the extra adds JupyterLab). Download
# it with the button at the top of the page, or run it as a script:
# `python docs/lab/simulate-data-parallel-sync.py`.

# %%
import torch
from torch import nn

from distdocs.calculators.sync_simulation import (
    merge_gradients,
    shard_gradients,
    simulate_naive_allreduce,
    simulate_ring_allreduce,
    split_batch,
)

torch.manual_seed(0)

# %% [markdown]
# ## Step 1: workers train on shards
#
# Four workers share a batch of 64 samples, 16 each. Each computes the gradient of the mean loss on
# its own shard, with the same weights. Averaging the four gradients gives the gradient of the mean
# loss on the whole batch, which is why data parallelism trains the same model as one process.

# %%
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
x, y = torch.randn(64, 8), torch.randn(64, 1)
loss_fn = nn.functional.mse_loss

full = shard_gradients(model, loss_fn, [(x, y)])[0]  # one worker, the whole batch
equal = shard_gradients(model, loss_fn, split_batch(x, y, [16, 16, 16, 16]))
merged = merge_gradients(equal)
print(
    "max |average of 4 shard gradients - full-batch gradient| =",
    f"{max((a - b).abs().max().item() for a, b in zip(merged, full)):.0e}",
)

# %% [markdown]
# The difference is rounding: the same sums, added in another order. Now let the shards differ
# in size, as they do when a dataset does not divide evenly among workers.

# %%
sizes = [40, 12, 8, 4]
unequal = shard_gradients(model, loss_fn, split_batch(x, y, sizes))
plain = merge_gradients(unequal)
weighted = merge_gradients(unequal, weights=sizes)
gap = lambda grads: max((a - b).abs().max().item() for a, b in zip(grads, full))  # noqa: E731
print(f"unequal shards {sizes}:")
print(f"  plain average:              max difference from the full batch {gap(plain):.0e}")
print(f"  weighted by shard size:     max difference from the full batch {gap(weighted):.0e}")

# %% [markdown]
# The plain average gives a worker with 4 samples as much say as one with 40: each of its samples
# counts ten times as much, and the merged gradient is no longer the batch's. Weighting each
# gradient by its shard's size restores it.

# %%
# Self-check. float32 tolerance: the sums differ only in order, so 1e-6 relative is plenty.
for a, b in zip(merged, full):
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
for a, b in zip(weighted, full):
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
assert gap(plain) > 100 * gap(weighted), "the plain average of unequal shards should be visibly off"
print("step 1 self-check passed")

# %% [markdown]
# **Exercise.** DDP averages gradients with equal weights, yet its results equal one process's. How
# does PyTorch keep the shards equal, and what does it do with the samples left over?
#
# <details><summary>Solution</summary>
#
# `DistributedSampler` gives every rank the same number of samples: by default it pads the last
# shards by repeating samples from the start of the dataset (so a few samples count twice in that
# epoch), or, with `drop_last=True`, it drops the remainder. Either way every rank's batch has the
# same size, and the plain average is the right one.
#
# </details>
#
# **What you learned**
#
# - Averaging the shard gradients of equal shards gives the full batch's gradient.
# - Unequal shards need weights: each gradient times its share of the samples.
# - DDP assumes equal shards; the sampler makes them equal.

# %% [markdown]
# ## Step 2: the allreduce merge
#
# The workers must end with the same merged gradient. An *allreduce* gives every worker the sum of
# everyone's buffers. The naive way sends everything to one worker, which adds and sends back; the
# ring cuts each buffer into n chunks and passes chunks around a ring, first adding
# (reduce-scatter), then copying the finished sums (all-gather).
#
# Four workers, each with a buffer of 8 numbers. Whole numbers, so that the sums are exact and the
# check can be bitwise.

# %%
n = 4
buffers = [torch.arange(8, dtype=torch.float32) + 100 * w for w in range(n)]
expected = sum(buffers)
naive_out, naive_trace = simulate_naive_allreduce(buffers)
ring_out, ring_trace = simulate_ring_allreduce(buffers)
for step in range(ring_trace.steps + 1):
    phase = "start" if step == 0 else "reduce-scatter" if step < n else "all-gather"
    print(f"ring, after step {step} ({phase}): which workers' data each chunk sums")
    print(ring_trace.table(step), end="\n\n")

# %% [markdown]
# After n − 1 = 3 reduce-scatter steps each worker owns one finished chunk (`all`); after 3 more,
# every worker has every chunk. Now count what each worker sent.

# %%
S = buffers[0].numel() * buffers[0].element_size()
print(f"buffer size S = {S} bytes, n = {n} workers")
print(f"ring:  {ring_trace.steps} steps, bytes sent per worker {ring_trace.bytes_sent}")
print(f"       2(n-1)/n * S = {2 * (n - 1) * S // n}")
print(f"naive: {naive_trace.steps} steps, bytes sent per worker {naive_trace.bytes_sent}")
print(f"       worker 0 sends (n-1) * S = {(n - 1) * S}")

# %%
# How the busiest worker's traffic grows with n: the ring's stays under 2S, the naive root's does not.
print(f"{'n':>3} {'ring, per worker':>17} {'naive, worker 0':>16}   (in units of S)")
for workers in (2, 4, 8, 16):
    bufs = [torch.ones(16 * workers) for _ in range(workers)]
    size = bufs[0].numel() * 4
    ring_most = max(simulate_ring_allreduce(bufs)[1].bytes_sent) / size
    naive_most = max(simulate_naive_allreduce(bufs)[1].bytes_sent) / size
    print(f"{workers:>3} {ring_most:>17.3f} {naive_most:>16.0f}")

# %%
# Self-check: both give every worker the exact sum; the counts match the formulas.
for out in (naive_out, ring_out):
    assert all(torch.equal(o, expected) for o in out)
assert ring_trace.steps == 2 * (n - 1)
assert all(b == 2 * (n - 1) * S // n for b in ring_trace.bytes_sent)
assert naive_trace.bytes_sent[0] == (n - 1) * S and all(b == S for b in naive_trace.bytes_sent[1:])
print("step 2 self-check passed")

# %% [markdown]
# **Exercise.** With 8 workers, how many steps does the ring take, and how many bytes does each
# worker send for a 1 MiB buffer? Check your answer with `simulate_ring_allreduce`.
#
# <details><summary>Solution</summary>
#
# 2(n − 1) = 14 steps: 7 of reduce-scatter, 7 of all-gather. Each step sends one chunk of
# 1 MiB / 8, so each worker sends 14 / 8 = 1.75 MiB: `max(trace.bytes_sent) / 2**20` prints 1.75
# for `simulate_ring_allreduce([torch.ones(2**18) for _ in range(8)])` (2**18 floats are 1 MiB).
#
# </details>
#
# **What you learned**
#
# - An allreduce leaves the sum on every worker; the ring does it in 2(n − 1) steps.
# - Each ring worker sends 2(n − 1)/n × S bytes: under 2S however many workers there are.
# - The naive root sends (n − 1) × S: it becomes the bottleneck as n grows.

# %% [markdown]
# ## Step 3: the bottleneck, measured on a scale model of a cluster
#
# Steps 1 and 2 showed what the allreduce computes. This step measures what it costs, at 1 to 8
# workers, on one ordinary machine. Its CPU cannot do eight GPUs' arithmetic, and it does not
# have to: while a GPU's big kernels run, the process that launched them mostly waits, and a wait
# needs next to no CPU. (A job of many small kernels is different: launching each takes the CPU
# microseconds, and it can set the pace. The emulation leaves that launch-bound case out.)
# So the workers here are emulated accelerators. **Compute is a wait; the bytes, the
# collectives, the overlap and the link are real**: each worker is a rank of torch's own DDP on a
# node of its own, and the nodes share a switch through links dialled to 100 Mbit/s.
#
# What it trains is a real job, shrunk: ResNet-50 on V100 GPUs in FP32, 112 images in 305 ms a step
# on one GPU (the 367 images/s of [NVIDIA's published run][nvidia], on a DGX-1; we take only the
# step time from it) and 102 MB of gradients ([25,557,032 parameters][torchvision]), one GPU per node
# over 1 Gbit/s Ethernet: that layout is ours, not NVIDIA's. The gradient shrinks 48.7 times, to
# 2 MiB, and the link 10 times, so every time stretches by 10/48.7: a step's compute becomes 62.6 ms,
# and DDP's bucket caps shrink with the gradient (25 MiB to 0.51 MiB, the first bucket's 1 MiB to
# 21 KiB), so that the scale model overlaps its sync as the real job does. The speedup depends on
# compute against sync, which is the same at both scales; what does not carry over is said below.
#
# [nvidia]: https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/Classification/ConvNets/resnet50v1.5
# [torchvision]: https://pytorch.org/vision/stable/models/generated/torchvision.models.resnet50.html
#
# `distdocs bench emulated` dials the links, fits α and β on them, and times steps at 1, 2, 4 and 8
# workers, with 1 and with 4 micro-batches per step (and a few points more, which the overview uses).
# As root on Linux it dials them with the kernel's traffic control between network namespaces;
# anywhere else each worker paces the messages it sends itself (the first line it prints says
# which). Each point's prediction comes from the cost model, given α, β, the compute, the gradient
# and DDP's buckets.
#
# **Before you run it, predict.** A step at 1 worker is 62.6 ms of compute. At 8 workers each step
# also allreduces the 2 MiB gradient over 100 Mbit/s, about 95 Mbit/s of payload: a ring sends
# 2 × 7/8 of it, and DDP hides part of that under the backward pass (two thirds of the compute).
# How many times the samples per second of 1 worker will 8 workers train, with one micro-batch per
# step? Write your answer here, then run the next cells.

# %%
my_prediction_at_8 = None  # your guess, e.g. 5.0: 8 workers' samples per second over 1 worker's

# %%
import json
import subprocess
import sys
from pathlib import Path

from distdocs.bench.emulated import format_table, plot_accumulation


def distdocs(*args: str) -> dict:
    """Run the distdocs command line in a fresh process and return its --json output."""
    out = subprocess.run(
        [sys.executable, "-m", "distdocs.cli", *args, "--json"], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)


run = distdocs("bench", "emulated")  # about a minute
records = [
    r
    for r in run["records"]
    if r["case"] == "production" and r["link"] == "100mbit" and r["accumulation"] in (1, 4) and "speedup" in r
]
# The run's comment lines: where it ran, how the links were dialled, the fit and the run's cost. Its
# table's rows, every point, are drawn below, and the speedups print here.
print("\n".join(line for line in format_table(records, run["machine"]).splitlines() if line.startswith("#")))
workers = sorted({r["workers"] for r in records})
by = {(r["workers"], r["accumulation"]): r for r in records}
for k in (1, 4):
    print(f"{k} micro-batch{'es' if k > 1 else ''} a step, speedup at {', '.join(map(str, workers))} workers:",
          ", ".join(f"{by[n, k]['speedup']:.2f}x" for n in workers), "measured;",
          ", ".join(f"{by[n, k]['predicted_speedup']:.2f}x" for n in workers), "the cost model")  # fmt: skip
at_8 = by[8, 1]
yours = "-" if my_prediction_at_8 is None else f"{my_prediction_at_8:.2f}x"
print(f"8 workers, 1 micro-batch: you {yours}, the cost model {at_8['predicted_speedup']:.2f}x, "
      f"measured {at_8['speedup']:.2f}x")  # fmt: skip

# %% [markdown]
# The same points drawn against the ideal, where n workers train n times the samples, by the code
# that draws the overview's chart from the saved run:

# %%
svg = plot_accumulation(records, run["machine"])  # matplotlib, as an SVG
if "ipykernel" in sys.modules:  # in Jupyter (and on the site): show it, with a text alternative
    import base64

    from IPython.display import HTML, display

    alt = (
        "Speedup against 1 to 8 emulated workers, each measured point labelled with its value (the speedups "
        "printed above): with one micro-batch per step the points stay far below the dashed ideal line, with "
        "four they climb higher; the model's lines pass near the points."
    )
    display(HTML(f'<img alt="{alt}" src="data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()}">'))

# %% [markdown]
# With one micro-batch per step the job is sync-bound: the 2 MiB allreduce takes longer than the
# computation it serves, so 2 workers train fewer samples per second than one, and 8 gain little.
# Four micro-batches per step give each sync four times the work, and the same 8 workers go several
# times further.
#
# The model's lines are a prediction, not a fit to these steps: only α and β come from this run,
# from two all_reduces timed before any step. Where it misses, it leaves something out: the emulation
# has no NIC offloads or switch buffers, and α, the time per message on these links, is not
# scaled with the rest (the fit's line says how large it is next to a step).

# %%
# Self-check: the run's gradients were exact at every step (the benchmark compares every element, and
# stops at the first that is not), DDP built the buckets the cost model assumed, and, measured and in
# the model alike, 2 workers at one micro-batch train slower than 1, and more micro-batches per step
# scale better at every number of workers.
assert all(r["ddp_bucket_bytes"] == r["model_bucket_bytes"] for r in records)
by = {(r["workers"], r["accumulation"]): r for r in records}
for key in ("speedup", "predicted_speedup"):
    assert by[2, 1][key] < 1, by[2, 1]
    assert all(by[n, 4][key] > by[n, 1][key] for n in workers if n > 1), key
print("step 3 self-check passed")

# %% [markdown]
# ### On real CPU ranks: a saved comparison
#
# With real computation in place of the wait, the same model meets real CPU ranks, two of them.
# `distdocs bench prediction` trains two MLPs with DDP at 1 and 2 ranks, with and without
# accumulation; the saved run below names its machine in its first line. The model's inputs come
# from other runs than the one predicted: the computation per sample and DDP's own work per sync
# from the 1-rank run, α and β from an allreduce sweep. The last two columns split any miss into
# its two terms: the computation at n ranks against at 1, and the sync that DDP paid against the
# α-β allreduce of the same bytes.

# %%
saved = next(
    p / "measurements/prediction-cpu.txt"
    for p in [Path.cwd(), *Path.cwd().parents]
    if (p / "measurements/prediction-cpu.txt").exists()
)
print(saved.read_text())

# %% [markdown]
# At one rank the prediction is the measurement by construction. At two, the model comes in short,
# and the columns say where. Two ranks on one CPU slow each other's computation down: they share
# its memory bandwidth and caches, which no term of the model describes, and which the scale model's
# waits do not have. And the sync that DDP pays is longer than a bare allreduce of the same bytes:
# DDP copies each gradient into its bucket and back and divides by the world size, passes over the
# whole gradient that the α-β model leaves out (`gradient_as_bucket_view=True` saves the copy back).
# On a CPU rank those passes take the same core as the computation, so nothing overlaps.

# %% [markdown]
# **Exercise.** On the same links, how many micro-batches per step would the ResNet-50 job need for
# 8 workers to reach 6×? Use the cost model with the scale model's workload and fitted network.
#
# <details><summary>Solution</summary>
#
# A point of the run knows its workload (`distdocs.lab.emulated.Point(...).workload()`) and the record
# keeps the fitted α and β (`alpha_s`, `beta_s_per_byte`). The sync at 8 workers does not change
# with the micro-batches, and the compute grows with them, so raise `accumulation` in 4, 8, 16, ...
# until `8 * step_time(one, 1, net).step / step_time(eight, 8, net).step` passes 6. A larger batch
# per GPU has the same effect, if it fits in memory.
#
# </details>
#
# **What you learned**
#
# - A step is computation plus the sync that does not hide; only the computation grows with the
#   samples each worker takes per step, so only it pays for more workers.
# - The α-β model, fitted to two allreduce timings on the links, predicts every point of a run at 1
#   to 8 workers, DDP's buckets and overlap included.
# - A sync-bound job gets its speedup back from more work per sync: accumulation, or a larger batch.
