"""Quiz answers that the code computes are held to it: the right option of each such question says what
distdocs computes, or what a run printed (an output block, which test_docs.py checks against a fresh
run), and no wrong option says it. The other questions are judgement, listed below. Every question
on the site is in one list or the other, so a new one must be placed."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
import torch

from distdocs.calculators.costmodel import Network, Workload, allreduce_terms, predict_steps, step_time
from distdocs.calculators.memory import bytes_per_parameter
from distdocs.calculators.sync_simulation import simulate_ring_allreduce
from distdocs.training.checkpoint import checkpoint_interval_s
from distdocs.training.pipeline import bubble_fraction

from docexec.fences import DOCS, REPO, classify

pytestmark = pytest.mark.fast  # the test tier: see the testing page

QUIZ = re.compile(r"<quiz>\n(.*?)</quiz>", re.S)


def questions() -> dict[tuple[str, str], str]:
    """(page, stem) -> the question's text, for every quiz on the site."""
    found = {}
    for page in sorted(DOCS.rglob("*.md")):
        for quiz in QUIZ.findall(page.read_text()):
            stem = quiz.split("\n- [")[0].strip()
            found[(str(page.relative_to(DOCS)), stem)] = quiz
    return found


def options(quiz: str) -> tuple[str, list[str]]:
    """The right option and the wrong ones."""
    marked = re.findall(r"^- \[([ x])\] (.*)$", quiz, re.M)
    return next(t for m, t in marked if m == "x"), [t for m, t in marked if m == " "]


def output(page: str, command_part: str) -> str:
    """The output block under the command on `page` that contains `command_part`."""
    blocks = [f for f in classify(DOCS / page) if f.kind == "output" and command_part in f.attrs["after"]]
    assert len(blocks) == 1, f"{page}: {len(blocks)} output blocks after a command with {command_part!r}"
    return blocks[0].body


def steps_computed_without_checkpoints() -> int:
    """The page's run without checkpoints, rank 1 killed (test_fault_tolerance.py asserts the numbers
    its excerpt shows): the steps before the kill, plus those the restart trained."""
    (shown,) = [
        f.body
        for f in classify(DOCS / "operations/checkpoint-and-resume.md")
        if f.kind == "excerpt" and f.attrs["after"].endswith("step06_no_checkpoint.py")
    ]
    killed_at = int(re.search(r"SIGKILL at step (\d+)", shown).group(1))
    trained_again = int(re.search(r"this attempt trained steps \d+ to \d+: (\d+) of", shown).group(1))
    return killed_at + trained_again


def ring_bytes_per_rank(n: int, size: int = 840) -> Fraction:  # 840 divides into 2 to 8 chunks
    """What each worker of the lab's one-process ring sends, as a share of the buffer's bytes."""
    _, trace = simulate_ring_allreduce([torch.ones(size) for _ in range(n)])
    assert len(set(trace.bytes_sent)) == 1  # every worker sends the same
    return Fraction(trace.bytes_sent[0], size * 4)


def ring_key() -> str:
    for n in range(2, 9):  # the lab's ring sends 2(n - 1)/n of the buffer from each worker
        assert ring_bytes_per_rank(n) == Fraction(2 * (n - 1), n)
    assert ring_bytes_per_rank(2) == 1  # S at two ranks
    return "2(n − 1)/n × S"


def accumulation_calls_key() -> str:
    # 4 ranks, 2 micro-batches: the output counts the calls with and without no_sync
    text = output("lesson/gradient-accumulation.md", "--accumulation-steps 2")
    synced, accumulated = map(int, re.search(r"(\d+) syncing every micro-batch, (\d+) with no_sync", text).groups())
    assert synced == 2 * accumulated
    return "k"


def local_sgd_key() -> str:
    text = output("deep-dives/sync-and-async.md", "step01_local_sgd.py")
    rows = re.findall(r"^\s*(.+?)\s{2,}(\d+)\s+(\d+)\s", text, re.M)
    every = {name: (int(calls), int(nbytes)) for name, calls, nbytes in rows}
    (ddp_calls, ddp_bytes), (k4_calls, k4_bytes) = every["DDP, every step"], every["average every 4"]
    assert ddp_calls == 4 * k4_calls and ddp_bytes / ddp_calls == k4_bytes / k4_calls
    return "all_reduce calls, k-fold; each averaging moves as many bytes as one gradient sync"


def unhidden(sync_s: float, world_size: int) -> tuple[Workload, Network]:
    """A workload of 10 ms of compute a step, and a network whose allreduce of its gradients takes
    `sync_s` at `world_size` ranks, none of it hidden behind backward (α = 0)."""
    work = Workload(params=1e6, compute_per_sample=1e-3, micro_batch=10, overlap=False)
    factor = allreduce_terms(world_size)[1]
    return work, Network(alpha=0.0, beta=sync_s / (factor * work.gradient_bytes), name="test")


def scaling_key() -> str:
    # 10 ms of compute, and on two ranks 10 ms of sync that backward does not hide
    work, network = unhidden(0.010, 2)
    one, two = predict_steps(work, [1, 2], network)
    assert two.speedup == pytest.approx(1.0) and two.step == pytest.approx(2 * one.step)
    return "1×"


def in_production_key() -> str:
    # 4x on 8 GPUs with a fixed batch per GPU is efficiency 1/2: the unhidden sync equals the compute
    work, network = unhidden(0.010, 8)
    one, eight = predict_steps(work, [1, 8], network)
    assert eight.speedup == pytest.approx(4.0) and eight.step == pytest.approx(2 * one.step)
    return "twice as long"


def accumulation_sync_key() -> str:
    net = Network(alpha=1e-4, beta=1e-9, name="test")
    steps = [step_time(Workload(1e6, 1e-4, 8, k, overlap=False), 2, net) for k in (1, 4)]
    per_sample = [s.exposed_sync / (8 * k) for s, k in zip(steps, (1, 4))]
    assert per_sample[0] == pytest.approx(4 * per_sample[1])
    return "four-fold"


def checkpoint_interval_key() -> str:
    a_day = 24 * 3600
    assert checkpoint_interval_s(60, a_day / 4) == pytest.approx(checkpoint_interval_s(60, a_day) / 2)
    return "Halve"


def rounding_key() -> str:
    torch.manual_seed(0)  # the data-parallelism page's own check, without processes
    per_sample = torch.randn(64, 1000)
    one, two = per_sample.mean(0), (per_sample[:32].mean(0) + per_sample[32:].mean(0)) / 2
    assert torch.allclose(one, two) and not torch.equal(one, two)
    return "equal up to floating-point rounding"


def elastic_key() -> str:
    # what the survivor of the multi-node page's elastic run printed (tests/test_multi_node.py checks it)
    (excerpt,) = [f.body for f in classify(DOCS / "operations/multi-node.md") if f.kind == "node excerpt"]
    two, one = (
        re.search(rf"on {n} ranks?: 16 samples a step, (\d+) micro-batch(?:es)? of 4 per rank", excerpt)[1]
        for n in (2, 1)
    )
    assert int(one) == 2 * int(two)
    return f"{one} micro-batches of 4"


def mfu_key() -> str:
    # the profile-first page's own command prints it, from torchtitan's inputs (tests/test_mfu.py)
    text = output("deep-dives/profile-first.md", "distdocs mfu")
    return re.search(r"^MFU: ([\d.]+%)$", text, re.M)[1]


def expert_capacity_key() -> str:
    # the expert-parallelism page's example: its constants, the page's factor, its 2 ranks
    import ast

    source = (REPO / "examples/expert_parallel/step01_moe_all_to_all.py").read_text()
    assign = next(
        n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Assign) and "TOKENS" in ast.unparse(n.targets[0])
    )
    experts, _, _, tokens = ast.literal_eval(assign.value)
    ranks = 2
    return str((experts // ranks) * int(1.25 * tokens / experts) * ranks)


def compression_key() -> str:
    # 40 ms of computation and 400 ms of sync at 2 ranks, no overlap; fp16 halves the bytes.
    work = Workload(params=1e6, compute_per_sample=40e-3 / 8, micro_batch=8, overlap=False)
    net = Network(alpha=0.0, beta=0.4 / 4e6)  # 4 MB of fp32 gradients in 400 ms
    assert step_time(work, 2, net).step == pytest.approx(0.440)
    half = step_time(Workload(1e6, 40e-3 / 8, 8, overlap=False, compression=0.5), 2, net).step
    return f"{half * 1e3:.0f} ms"


def model_size_key() -> str:
    # compute per sample grows with the parameters, as the gradient's bytes do: bandwidth alone
    # favours neither size (equal speedups at alpha = 0); each message's latency favours the large one
    def speedup(params: float, alpha: float) -> float:
        work = Workload(params=params, compute_per_sample=params * 1e-10, micro_batch=32, overlap=False)
        return predict_steps(work, [1, 8], Network(alpha=alpha, beta=1e-10))[1].speedup

    small, large = 1e6, 1e8
    assert speedup(small, 0.0) == pytest.approx(speedup(large, 0.0))
    assert speedup(small, 50e-6) < speedup(large, 50e-6)
    return "False"


# (page, the start of the question) -> what the right option must say, computed from the code or a run.
COMPUTED = {
    ("lesson/choosing-a-strategy.md", "In the ZeRO paper's count, training with Adam"): lambda: str(
        bytes_per_parameter("bf16-master").total if bytes_per_parameter("autocast").total == 16 else None
    ),
    ("lesson/collectives.md", "For large tensors the ring"): ring_key,
    ("reference/quiz.md", "In a ring all_reduce of S bytes"): ring_key,
    ("lesson/data-parallelism.md", "DDP on 2 ranks"): lambda: (
        "bitwise equal to one process that averages"
        if "averages the 2 shards' gradients: True"
        in output("lesson/data-parallelism.md", "--nproc_per_node=2 examples/data_parallel/step02_ddp.py")
        else None
    ),
    ("lesson/model-parallelism.md", "Two ranks each hold half"): lambda: (
        "half" if bubble_fraction(ranks=2, microbatches=1) == 0.5 else None
    ),
    ("lesson/pipeline-parallelism.md", "With p = 4 equal stages"): lambda: str(
        Fraction(bubble_fraction(4, 4)).limit_denominator(100)
    ),
    ("lesson/tensor-parallelism.md", "In a column-parallel then row-parallel"): lambda: (
        "One all_reduce"
        if "columns then rows: all_reduce in forward," in output("lesson/tensor-parallelism.md", "exercise01")
        else None
    ),
    ("operations/checkpoint-and-resume.md", "A job without checkpoints"): lambda: str(
        steps_computed_without_checkpoints()
    ),
    ("lesson/gradient-accumulation.md", "Four ranks each accumulate"): lambda: re.search(
        r"global batch (\d+) = micro-batch 8 x accumulation steps 2 x ranks 4",
        output("lesson/gradient-accumulation.md", "--accumulation-steps 2"),
    ).group(1),
    ("lesson/gradient-accumulation.md", "What does running the first k − 1"): lambda: (
        accumulation_calls_key() + " times fewer"
    ),
    ("reference/quiz.md", "Gradient accumulation over k micro-batches"): lambda: (
        "Divides it by " + accumulation_calls_key()
    ),
    ("operations/in-production.md", "With the batch per GPU fixed"): in_production_key,
    ("start/overview.md", "A step takes 10 ms"): scaling_key,
    ("deep-dives/gradient-compression.md", "A step takes 40 ms"): compression_key,
    ("lesson/gradient-accumulation.md", "Accumulating four micro-batches"): accumulation_sync_key,
    ("deep-dives/sync-and-async.md", "Local SGD averages"): local_sgd_key,
    ("operations/checkpoint-and-resume.md", "A checkpoint takes 1 minute"): checkpoint_interval_key,
    ("operations/multi-node.md", "An elastic job"): elastic_key,
    ("deep-dives/profile-first.md", "A dense transformer trains at 2973"): mfu_key,
    ("deep-dives/expert-parallelism.md", "Two ranks hold 4 experts"): expert_capacity_key,
    ("deep-dives/pipeline-schedules.md", "A pipeline has p = 4 ranks, m = 8"): lambda: str(
        Fraction(bubble_fraction(4, 8, chunks=2)).limit_denominator(100)
    ),
    ("reference/quiz.md", "Two ranks each hold half of a batch"): rounding_key,
    ("reference/quiz.md", "Among models that fit on one GPU"): model_size_key,
}

# Questions whose answer is judgement, a definition or a reason, not a number the code computes.
JUDGEMENT = [
    ("deep-dives/gradient-compression.md", "Why does PowerSGD keep"),
    ("lesson/choosing-a-strategy.md", "A model's states do not fit"),
    ("lesson/collectives.md", "Which collective leaves every rank"),
    ("deep-dives/allreduce-across-nodes.md", "Two nodes of 4 GPUs"),
    ("deep-dives/allreduce-across-nodes.md", "In a two-level allreduce"),  # the bytes test_links.py counts
    ("lesson/data-parallelism.md", "Every example's setup picks the GPU"),
    ("deep-dives/ddp-internals.md", "Why does BucketedDDP launch"),
    ("deep-dives/ddp-internals.md", "What does `gradient_as_bucket_view=True` save"),
    ("start/overview.md", "Data parallelism, model parallelism"),
    ("start/overview.md", "In the data-parallel loop, what keeps"),
    ("lesson/launchers.md", "`torchrun --standalone"),
    ("lesson/launchers.md", "On a cluster"),
    ("lesson/model-parallelism.md", "What does rank 1 send back"),
    ("lesson/pipeline-parallelism.md", "Why not simply use very many"),
    ("deep-dives/pipeline-schedules.md", "What does a zero-bubble schedule move"),
    ("lesson/sharded-data-parallelism.md", "Sharded data parallelism (FSDP, ZeRO-3) replaces"),
    ("lesson/sharded-data-parallelism.md", "What does sharding the model state cost"),
    (
        "deep-dives/expert-parallelism.md",
        "Four experts sit on two ranks",
    ),  # the skewed run shows it (test_expert_parallel.py)
    ("deep-dives/context-parallelism.md", "Why does ring attention pass"),
    ("deep-dives/activation-recomputation.md", "A layer keeps 34"),  # the calculator's terms (test_recomputation.py)
    ("deep-dives/activation-recomputation.md", "Why does selective recomputation"),
    ("deep-dives/context-parallelism.md", "With causal attention and contiguous"),  # the ring's own skip rule
    ("lesson/tensor-parallelism.md", "Why is tensor parallelism used"),
    ("start/overview.md", "Before adding a second GPU"),
    ("reference/quiz.md", "When is a checkpoint a backup"),
    ("multi-gpu/convert-your-script.md", "A DDP script saves"),
    ("multi-gpu/convert-your-script.md", "Two processes each take"),
    ("operations/checkpoint-and-resume.md", "Why does one rank decide"),
    ("operations/in-production.md", "On the 2 × 2 × 2 mesh"),  # the run's counts (test_in_production.py)
    ("multi-gpu/launch-on-several-nodes.md", "Both nodes start"),
    ("multi-gpu/launch-on-several-nodes.md", "On two real machines"),
    ("multi-gpu/launch-on-several-nodes.md", "Which setting makes gloo"),
    ("lesson/learning-rate.md", "A run trained well with batch 32"),
    ("lesson/learning-rate.md", "Why did the run with the whole dataset"),
    ("deep-dives/mixed-precision.md", "Why do the weights stay in float32"),
    ("deep-dives/mixed-precision.md", "Which 16-bit format"),
    ("deep-dives/profile-first.md", "In a profile of a DDP step"),
    ("deep-dives/profile-first.md", "Why does the profiler's schedule"),
    ("deep-dives/sync-and-async.md", "Asynchronous training with a large staleness"),
    ("reference/quiz.md", "The most common reason"),
    ("reference/quiz.md", "A training job writes its checkpoint"),
    ("reference/quiz.md", "All ranks of a job stop"),
    ("reference/quiz.md", "Mixed precision with bfloat16 autocast"),
    ("reference/quiz.md", "The cost model times a ring all_reduce"),
    ("reference/quiz.md", "In the scaling explorer"),
    ("operations/checkpoint-and-resume.md", "Why is a checkpoint written to a temporary file"),
    ("deep-dives/debugging-in-depth.md", "A model takes a fraction of a millisecond"),
    ("deep-dives/debugging-in-depth.md", "The same seeded job on 2 ranks"),
    ("multi-gpu/debugging.md", "Each rank times its computation"),
    ("multi-gpu/debugging.md", "A job hangs because one rank"),
    ("operations/multi-node.md", "A job runs on two nodes"),
    ("operations/multi-node.md", "A job runs as two torchft"),  # its run is held by tests/test_multi_node.py
    ("operations/multi-node.md", "A SLURM job runs"),  # its options are held to SLURM runs in tests/test_slurm.py
]


def find(page: str, start: str) -> str:
    matches = [q for (p, stem), q in questions().items() if p == page and stem.startswith(start)]
    assert len(matches) == 1, f"{page}: {len(matches)} questions start with {start!r}"
    return matches[0]


@pytest.mark.parametrize("page, start", list(COMPUTED), ids=[f"{p}: {s}" for p, s in COMPUTED])
def test_a_computed_answer_is_the_marked_option_and_no_other(page, start):
    key = COMPUTED[(page, start)]()
    assert key, f"the code no longer gives this question's answer: {page}: {start}"
    right, wrong = options(find(page, start))
    assert key in right, f"{page}: the marked answer {right!r} does not say {key!r}"
    assert not [w for w in wrong if key in w], f"{page}: a wrong option says {key!r} too"


def test_every_question_is_computed_or_listed_as_judgement():
    placed = [*COMPUTED, *JUDGEMENT]
    for page, start in placed:
        find(page, start)  # each names exactly one question
    unplaced = [
        f"{page}: {stem[:60]}"
        for page, stem in questions()
        if not any(p == page and stem.startswith(s) for p, s in placed)
    ]
    assert not unplaced, f"questions in neither list: {unplaced}"


@pytest.mark.holds(
    "docs/lesson/launchers.md",
    "`LOCAL_RANK` is for your own code, to pick the GPU, and `init_process_group` never reads it.",
)
def test_the_launchers_quiz_names_what_init_process_group_reads():
    """With env://, init_process_group reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, not
    LOCAL_RANK (torch.distributed.rendezvous); the right option's feedback says so."""
    import importlib
    import inspect

    rendezvous = importlib.import_module("torch.distributed.rendezvous")  # the module, not its function
    source = inspect.getsource(rendezvous._env_rendezvous_handler)
    read = set(re.findall(r'_get_env_or_raise\("([A-Z_]+)"\)', source))
    assert read == {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"} and "LOCAL_RANK" not in source
    c10d = importlib.import_module("torch.distributed.distributed_c10d")
    assert "LOCAL_RANK" not in inspect.getsource(c10d.init_process_group)  # nor the call that takes the handler
    right, _ = options(find("lesson/launchers.md", "`torchrun --standalone"))
    feedback = find("lesson/launchers.md", "`torchrun --standalone").split(right, 1)[1].split("\n- [")[0]
    said = feedback[: feedback.index(";")]
    assert all(name in said for name in read) and "LOCAL_RANK" not in said, feedback
