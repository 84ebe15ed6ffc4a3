"""docs/multi-gpu/debugging.md and docs/deep-dives/debugging-in-depth.md: each broken example fails the
way the page says, within its bound, and the diagnostic the page shows names the cause. The pages' own
commands and excerpts are run by
test_docs.py; this file checks what they cannot: timings, a stack dump of a live hung rank, the
failures without the diagnostic, and the torch behaviour the page warns about."""

from __future__ import annotations

import importlib
import inspect
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from distdocs.doctor import listening_sockets, socket_inodes

from docexec.commands import Background, CommandResult, command_env, run_command
from docexec.copies import lay_out_as_copied
from docexec.fences import REPO, example_command, page_command
from docexec.outputs import excerpt_missing
from support.launches import (
    SHARED_MEMORY,
    SHARED_MEMORY_FILE_SYSTEM,
    SHARED_MEMORY_SMALL_BATCHES,
    STUCK_RANK_EXITS_EARLY,
    STUCK_RANK_FIXED,
    STUCK_RANK_MONITORED,
)

STUCK = "examples/debugging/step05_stuck_rank.py"
UNEVEN = "examples/debugging/step04_uneven_batches.py"
FAULTY = "tests/faulty_scripts"


@pytest.mark.processes
def test_a_mismatch_without_detail_aborts_a_rank_with_gloos_hint(command_runs):
    result = command_runs.run(f"torchrun --standalone --nproc_per_node=2 {UNEVEN}")
    assert result.returncode != 0 and not result.timed_out and not result.leftovers, result.describe()
    assert result.elapsed_s < 60, result.describe()
    assert "Is there a distributed collective mismatch in your code?" in result.stderr, result.describe()


@pytest.mark.processes
def test_mismatched_sizes_can_complete_with_a_wrong_number(command_runs):
    """The page: "with other sizes the smaller collective can even complete with wrong numbers"."""
    result = command_runs.run(f"torchrun --standalone --nproc_per_node=2 {FAULTY}/mismatched_sizes.py")
    assert not result.timed_out and not result.leftovers, result.describe()
    # 1 + 2: rank 1's first element, summed into a collective it never joined.
    assert "rank 0 completed with [3.0]" in result.stdout, result.describe()


@pytest.mark.processes
@pytest.mark.holds(
    "docs/multi-gpu/debugging.md",
    "With torch 2.13 on the CPU, `DETAIL` crashes DDP's constructor with a segmentation fault",
)
def test_ddp_under_detail_still_crashes_on_gloo(command_runs):
    """The page's warning holds for this torch. If this fails, torch fixed it: drop the warning on
    docs/multi-gpu/debugging.md, and let step04 use DDP."""
    command = f"TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc_per_node=2 {FAULTY}/ddp_under_detail.py"
    result = command_runs.run(command)
    assert not result.timed_out and not result.leftovers, result.describe()
    assert "DDP built" not in result.stdout and "SIGSEGV" in result.stderr, result.describe()
    # the page: INFO does not crash it
    result = command_runs.run(command.replace("=DETAIL", "=INFO"))
    assert result.returncode == 0 and result.stdout.count("DDP built") == 2, result.describe()


@pytest.mark.processes
@pytest.mark.holds("docs/multi-gpu/debugging.md", "on gloo the others fail in their next collective within moments")
def test_a_rank_that_exits_early_fails_the_others_within_seconds(command_runs):
    result = command_runs.run(STUCK_RANK_EXITS_EARLY)
    waited = re.search(r"\[rank 0\] all_reduce failed after ([\d.]+) s", result.stdout)
    assert waited and float(waited.group(1)) < 10, result.describe()  # not the 60 s timeout


@pytest.mark.processes
@pytest.mark.holds(
    "docs/multi-gpu/debugging.md", "every rank checks in with rank 0, which names the ranks that did not."
)
def test_monitored_barrier_names_the_stuck_rank_at_its_own_timeout(command_runs):
    result = command_runs.run(STUCK_RANK_MONITORED)
    assert "Rank 1 failed to pass monitoredBarrier in 10000 ms" in result.stderr, result.describe()
    assert result.elapsed_s < 45, result.describe()  # 10 s after the stuck step, not 60


@pytest.mark.processes
@pytest.mark.holds(
    "docs/multi-gpu/debugging.md",
    "rank 0 waits for the examples' 60 s timeout, then fails with "
    "`Timed out waiting 60000ms for recv operation to complete`.",
)
@pytest.mark.holds(
    "docs/multi-gpu/debugging.md", "prints the Python stack of every thread without stopping the process"
)
def test_a_stuck_rank_holds_the_others_until_the_timeout_and_py_spy_shows_where(tmp_path: Path):
    """One run: see where torchrun listens, dump the stuck rank's stack while it hangs, then watch
    rank 0 fail at the 60 s timeout, and nothing outlive it."""
    command = ["torchrun", "--standalone", "--nproc_per_node=2", STUCK]  # no shell: the pid is torchrun's
    with Background(command, tmp_path / "out.txt") as run:
        deadline = time.monotonic() + 60
        pid = None
        while pid is None and time.monotonic() < deadline and run.proc.poll() is None:
            m = re.search(r"stuck in load_batch at step 3; pid (\d+)", run.output())
            pid = int(m.group(1)) if m else None
            time.sleep(0.2)
        assert pid, run.output()
        stuck_at = time.monotonic()
        # docs/operations/multi-node.md's pitfall: even with --standalone, torchrun (this process, the
        # agent that hosts the store) listens on every interface, not only loopback (torch 2.13).
        mine = socket_inodes(run.pid)
        addresses = {address for address, _, inode in listening_sockets() if inode in mine}
        assert addresses & {"0.0.0.0", "::"}, f"torchrun listens on {addresses}: update the multi-node page"
        py_spy = Path(sys.executable).parent / "py-spy"
        dump = subprocess.run([str(py_spy), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
        assert dump.returncode == 0, dump.stderr
        assert "load_batch" in dump.stdout and "step05_stuck_rank.py" in dump.stdout, dump.stdout

        returncode = run.wait(timeout_s=120)
        ended = time.monotonic() - stuck_at
        text = run.output()
        assert returncode != 0 and "Timed out waiting 60000ms for recv operation to complete" in text, text
        assert 55 < ended < 90, f"rank 0 failed {ended:.0f} s after rank 1 got stuck, not at the 60 s timeout"
    assert not run.leftovers, f"left running: {run.leftovers}"


@pytest.mark.processes
@pytest.mark.parametrize("fixed", ["--fixed", "--balanced"])
def test_the_fixes_pass_their_self_checks(command_runs, fixed):
    if fixed == "--fixed":
        command = STUCK_RANK_FIXED
    else:  # the page's command
        command = page_command("docs/deep-dives/debugging-in-depth.md", "step03_straggler.py --balanced")
    result = command_runs.run_ok(command)
    assert result.stdout.splitlines()[-1] == "self-check passed", result.describe()


def saved_rows(name: str) -> list[list[str]]:
    lines = (REPO / "measurements" / name).read_text().splitlines()
    return [
        ln.split() for ln in lines if ln.strip() and ln.split()[0].isdigit() or ln.split()[:1] in (["mistake"], ["fix"])
    ]


@pytest.mark.fast
def test_saved_straggler_run_supports_what_the_page_says():
    """ "The straggler is the rank that waits least", and it keeps the most activations."""
    rows = [r for r in saved_rows("debugging-straggler-cpu.txt") if r[0].isdigit()]
    compute = {int(r[0]): float(r[2]) for r in rows}
    wait = {int(r[0]): float(r[3]) for r in rows}
    kept = {int(r[0]): float(r[4]) for r in rows}
    straggler = max(compute, key=compute.get)
    assert straggler == 1 and min(wait, key=wait.get) == straggler and max(kept, key=kept.get) == straggler


@pytest.mark.fast
def test_saved_data_loading_run_supports_what_the_page_says():
    """ "A batch takes one worker about three times the step ... with two workers, a few ms a step
    instead of most of it"."""
    rows = {
        int(r[0]): (float(r[1]), float(r[2])) for r in saved_rows("debugging-data-loading-cpu.txt") if r[0].isdigit()
    }
    (wait0, step0), (wait2, _) = rows[0], rows[2]
    assert wait0 > 2.5 * step0 and wait2 < wait0 / 3


SMALL_MODEL = REPO / "examples/debugging/step08_small_model_scaled_out.py"
RATIO = re.compile(r"^(mistake|fix): .*\((\d+\.\d+)x\)")


def _ratios(text: str) -> dict[str, float]:
    return {m[1]: float(m[2]) for m in map(RATIO.match, text.splitlines()) if m}


@pytest.mark.processes
def test_the_small_model_reports_both_batch_sizes_and_passes_its_self_check(command_runs):
    out = command_runs.run_ok(example_command(SMALL_MODEL)).stdout
    assert set(_ratios(out)) == {"mistake", "fix"} and "self-check passed" in out.splitlines(), out


@pytest.mark.processes
def test_detail_names_a_stuck_rank_only_at_the_groups_timeout(command_runs):
    """The page and the quiz: TORCH_DISTRIBUTED_DEBUG=DETAIL runs a monitored barrier before every
    collective, so a rank stuck outside torch.distributed is named, but not before the timeout (5 s
    here)."""
    result = command_runs.run(
        f"TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc_per_node=2 {FAULTY}/stuck_rank_under_detail.py"
    )
    assert result.returncode != 0 and not result.timed_out and not result.leftovers, result.describe()
    assert "Rank 1 failed to pass monitoredBarrier in 5000 ms" in result.stderr, result.describe()
    assert 5 <= result.elapsed_s < 45, result.describe()


UNEVEN_PIPELINE = REPO / "examples/debugging/step09_uneven_pipeline.py"
STAGE = re.compile(r"^\s+(\d)\s+(\d)\s+([\d.]+) MiB\s+([\d.]+) MiB\s+[\d.]+$", re.M)


@pytest.mark.processes
def test_the_heavy_stage_of_an_uneven_pipeline_holds_three_times_the_bytes(command_runs):
    """The guide's "out of memory on one rank": 8 blocks split 6:2, so stage 0 holds 3 times the
    parameter bytes and keeps 3 times the activation bytes of stage 1; bytes, the same on any machine."""
    out = command_runs.run_ok(example_command(UNEVEN_PIPELINE)).stdout
    stages = {int(s): (int(b), float(p), float(a)) for s, b, p, a in STAGE.findall(out)}
    (b0, p0, a0), (b1, p1, a1) = stages[0], stages[1]
    assert (b0, b1) == (6, 2), out
    assert p0 / p1 == pytest.approx(3, rel=0.01) and a0 / a1 == pytest.approx(3, rel=0.01), out
    assert "heaviest: stage 0, 3.0x the other's parameters and 3.0x its activations" in out, out


def section(path: Path, name: str) -> str:
    """The lines of a file's snippet section `name`, as a page includes them."""
    text = path.read_text()
    return text.split(f"# --8<-- [start:{name}]\n")[1].split(f"# --8<-- [end:{name}]")[0]


@pytest.mark.processes
def test_the_readers_block_finds_a_known_split_inside_the_converted_script(command_runs, tmp_path):
    """Check 1's `time_the_sync`, pasted into the convert page's converted script and called once
    before its training loop, as a reader would. Its two ranks are emulated accelerators on a dialled
    link (tests/emulated_job): 200 ms of compute a micro-batch, and a 23 KiB gradient (5,770
    parameters) whose ring allreduce over 2 Mbit/s takes 96.5 ms (its bytes at tbf's 95.6% payload
    rate). The emulated compute waits at backward's start, so DDP's one bucket is ready only at its
    end: nothing hides the sync. The block must print that split within 10%, and a command that
    carries the job's numbers."""
    from distdocs.lab.wire import PAYLOAD_SHARE

    script = (REPO / "examples/convert/step02_ddp.py").read_text()
    block = section(REPO / "examples/debugging/step01_slower_with_more_ranks.py", "measure")
    script = script.replace("\ndef run(", f"\n{block}\n\ndef run(", 1)
    call = (
        "    x0, y0 = next(iter(loader))\n"
        '    time_the_sync(model, lambda: nn.functional.cross_entropy(model(x0), y0).backward(), "2mbit")\n'
        "    return  # the test needs the split, not the training\n"
    )
    script = script.replace("    for epoch in range(EPOCHS):\n", call + "    for epoch in range(EPOCHS):\n", 1)
    assert "time_the_sync(model" in script and "def time_the_sync" in script
    (tmp_path / "converted.py").write_text(script)
    emulation = f"PYTHONPATH={REPO / 'tests/emulated_job'} EMULATED_COMPUTE_S=0.2 EMULATED_LINK=2mbit"
    result = command_runs.run_ok(f"{emulation} torchrun --standalone --nproc_per_node=2 {tmp_path / 'converted.py'}")
    out = result.stdout
    compute, adds = map(float, re.search(r"compute ([\d.]+) ms; the sync adds ([\d.]+) ms", out).groups())
    alone, hid = map(float, re.search(r"allreduce alone takes ([\d.]+) ms: backward hid (\d+)%", out).groups())
    gradient_bytes = 4 * (32 * 128 + 128 + 2 * 128 + 128 * 10 + 10)
    sync_ms = gradient_bytes * 8 / (2e6 * PAYLOAD_SHARE) * 1e3  # a ring of 2: each rank sends S/2 twice
    assert abs(compute / 200 - 1) <= 0.10, out
    assert abs(adds / sync_ms - 1) <= 0.10 and abs(alone / sync_ms - 1) <= 0.10 and hid <= 10, (sync_ms, out)
    job = re.search(r"distdocs bench emulated --job ([\d.]+),([\d.]+),(\w+)$", out, re.M)
    assert job and float(job[1]) == float(f"{gradient_bytes / 2**20:.4g}") and job[3] == "2mbit", out
    assert float(job[2]) == float(f"{compute:.4g}"), out


@pytest.mark.processes
def test_the_job_command_the_block_printed_runs_the_scale_model_on_1_to_16_workers(command_runs):
    """The guide runs the command that the saved run of check 1 printed, for 8 samples a rank. Its
    points follow the cost model within 10% up to 8 workers; at 16, sixteen ranks' host work at the
    end of each step queues on two cores, and the model is held within 15%."""
    command = page_command("docs/multi-gpu/debugging.md", "bench emulated --job")
    saved = (REPO / "measurements/debugging-slower-cpu.txt").read_text()
    assert re.search(r"^mistake:.*\n(?:  .*\n)*?  on 1 to 16 GPUs: (.*)$", saved, re.M)[1] == command
    (run,) = command_runs.run_ok(command).records
    points = {r["workers"]: r for r in run["records"]}
    assert sorted(points) == [1, 2, 4, 8, 16] and {r["case"] for r in points.values()} == {"your-job"}
    for n, r in points.items():
        assert abs(r["predicted_s"] / r["best_s"] - 1) <= (0.15 if n == 16 else 0.10), run["records"]


@pytest.mark.processes
@pytest.mark.holds(
    "docs/multi-gpu/debugging.md",
    "A rank that runs out of batches stays in the context and shadows the others' all_reduces, sending zeros, "
    "until every rank is done; the average still divides by the world size",
)
def test_join_shadows_the_missing_ranks_all_reduces_with_zeros(command_runs):
    """The page's run: 5 batches on rank 0, 3 on rank 1, no hang, and the weights of one process that
    sums the gradients of the ranks still training and divides by 2 (the example asserts them equal)."""
    out = command_runs.run_ok(example_command(REPO / "examples/debugging/step12_uneven_inputs_join.py")).stdout
    assert "batches per rank: [5, 3]" in out and "every rank left the join() after 5 steps" in out, out
    assert "max |weights - one process shadowed as join() does| = 0e+00" in out, out


# --- Launch errors: the local rank, and a process without a group ---

PAGE = "docs/multi-gpu/debugging.md"
LOCAL_RANK_SENTENCE = (
    "`python -m torch.distributed.launch` passes each process its local rank as an argument, `--local-rank=N`, "
    "unless it is given `--use-env`; torchrun passes none, and sets `LOCAL_RANK` in each process's environment "
    "instead."
)


@pytest.mark.fast
@pytest.mark.holds(PAGE, LOCAL_RANK_SENTENCE)
def test_only_the_old_launcher_adds_a_local_rank_argument_and_use_env_stops_it(monkeypatch):
    """What each launcher would start, built in this process by torch's own code (torch.distributed.run's
    config_from_args): the old launcher adds `--local-rank=${local_rank}` to the script's arguments, and
    neither `--use-env` nor torchrun does. That torchrun sets LOCAL_RANK instead is the page's torchrun
    run, whose self-check reads it and finds no argument after the script."""
    from torch.distributed import launch, run

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # config_from_args would set it in this process otherwise
    script = ["--nproc_per_node=2", "train.py", "--lr", "0.1"]
    by = {
        "torchrun": run.config_from_args(run.get_args_parser().parse_args(script))[2],
        "launch": run.config_from_args(launch.parse_args(script))[2],
        "launch --use-env": run.config_from_args(launch.parse_args(["--use-env", *script]))[2],
    }
    assert by["launch"] == ["-u", "train.py", "--local-rank=${local_rank}", "--lr", "0.1"], by
    assert by["torchrun"] == by["launch --use-env"] == ["-u", "train.py", "--lr", "0.1"], by


WORKER_ASKS_FOR_THE_RANK = """
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class AsksForTheRank(Dataset):
    def __len__(self):
        return 1

    def __getitem__(self, i):
        try:
            return f"rank {dist.get_rank()}"
        except ValueError as error:
            return f"ValueError: {error}"


if __name__ == "__main__":
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    for start in ("fork", "spawn"):
        for answer in DataLoader(AsksForTheRank(), batch_size=None, num_workers=1, multiprocessing_context=start):
            print(f"{start}: {answer}")
    dist.destroy_process_group()
"""
WORKER_SENTENCE = (
    "A DataLoader worker started with spawn, the default on macOS and Windows, has no process group, so "
    "`dist.get_rank()` fails there with this error; a worker forked on Linux inherits a copy of the group, and "
    "answers."
)


@pytest.mark.processes
@pytest.mark.holds(PAGE, WORKER_SENTENCE)
def test_a_spawned_worker_has_no_process_group_and_a_forked_one_a_copy(tmp_path):
    """One process with a group of one, and a worker of each start method asking for its rank."""
    (tmp_path / "worker_asks.py").write_text(WORKER_ASKS_FOR_THE_RANK)
    result = run_command("python worker_asks.py", timeout_s=120, cwd=tmp_path, env=command_env(gpu=False))
    assert result.returncode == 0 and not result.leftovers, result.describe()
    assert result.stdout.splitlines() == [
        "fork: rank 0",
        "spawn: ValueError: Default process group has not been initialized, please make sure to call "
        "init_process_group.",
    ], result.describe()


@pytest.mark.fast
def test_the_env_rendezvous_leaves_libuv_off_on_windows_unless_asked(monkeypatch):
    """The Windows note (not run on Windows): torch 2.13's env:// rendezvous reads USE_LIBUV with a
    default of 0 on win32 and 1 elsewhere, and the message that names the fix is in its library."""
    rendezvous = importlib.import_module("torch.distributed.rendezvous")  # the module, not the function

    monkeypatch.delenv("USE_LIBUV", raising=False)
    monkeypatch.setattr(sys, "platform", "win32")
    assert rendezvous._get_use_libuv_from_query_dict({}) is False
    assert rendezvous._get_use_libuv_from_query_dict({"use_libuv": "1"}) is True
    monkeypatch.setattr(sys, "platform", "linux")
    assert rendezvous._get_use_libuv_from_query_dict({}) is True
    assert "PyTorch is built without libuv support on windows" in inspect.getsource(rendezvous)
    library = Path(torch.__file__).parent / "lib"
    message = b"use_libuv was requested but PyTorch was built without libuv support, run with USE_LIBUV=0"
    assert any(message in f.read_bytes() for f in library.glob("libtorch_cpu*")), "the message left torch"


# --- DataLoader workers in a 64 MB /dev/shm ---

SHM_MB = 64  # what Docker gives a container unless told otherwise (--shm-size)
SHM_WITHIN_S = 60  # a full /dev/shm fails at the first batches: seconds, not the runner's timeout
FULL_SHM_SENTENCE = (
    "In 64 MB of `/dev/shm`, as in a container started without `--shm-size`, two 48 MiB batches do not fit: "
    "the worker raises `RuntimeError: unable to allocate shared memory(shm) for file </torch_4881_1997839460_0>: "
    "No space left on device (28)`, and the training process raises it again as "
    "`RuntimeError: Caught RuntimeError in DataLoader worker process 1.`"
)
FILE_SYSTEM_SENTENCE = (
    '`torch.multiprocessing.set_sharing_strategy("file_system")` does not help: it changes how a worker hands the '
    "memory over (by file name instead of by file descriptor), not where the memory lives, which is `/dev/shm` "
    "under both strategies."
)
BUS_ERROR_SENTENCE = (
    "A worker that writes shared memory of its own, with Python's `multiprocessing.shared_memory`, say, still dies "
    "that way in torch 2.13: `DataLoader worker (pid 8172) is killed by signal: Bus error. It is possible that "
    "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.`"
)
# What torch's handler in the dying worker prints first; the page's symptom quotes it.
BUS_ERROR_IN_WORKER = (
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm)."
)
OWN_SHARED_MEMORY = """
from multiprocessing import shared_memory

from torch.utils.data import DataLoader, Dataset


class CachesInSharedMemory(Dataset):
    def __len__(self):
        return 1

    def __getitem__(self, i):
        cache = shared_memory.SharedMemory(create=True, size=96 * 2**20)  # its size set, none of it reserved
        try:
            cache.buf[:] = b"\\x01" * len(cache.buf)  # each page is taken as it is written
        finally:
            cache.close()
            cache.unlink()
        return i


if __name__ == "__main__":
    for _ in DataLoader(CachesInSharedMemory(), num_workers=1):
        pass
"""


def messages(sentence: str) -> str:
    """The error messages a held sentence quotes, one a line: its code spans that torch prints."""
    return "\n".join(s for s in re.findall(r"`([^`]+)`", sentence) if s.startswith(("RuntimeError", "DataLoader")))


def small_shm_missing() -> str | None:
    """None where this process may give a command a /dev/shm of SHM_MB of its own; else, in one line,
    what is missing and how to grant it."""
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux) to give a run a 64 MB /dev/shm of its own"
    probe = ["unshare", "--mount", "--propagation", "private", "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs"]
    done = subprocess.run([*probe, "/dev/shm"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["refused"])[-1]
        return (
            f"needs a mount namespace with a tmpfs over /dev/shm ({why}): run as root with CAP_SYS_ADMIN, "
            "e.g. docker run --cap-add SYS_ADMIN --security-opt seccomp=unconfined"
        )
    return None


def in_small_shm(command: str, folder: Path) -> CommandResult:
    """`command` (python ...) run from `folder` as a reader's copy runs (docexec.copies), in a mount
    namespace of its own whose /dev/shm is a tmpfs of SHM_MB, with a hard timeout; whatever it leaves
    running is killed and reported."""
    folder.mkdir(parents=True, exist_ok=True)
    env = command_env(gpu=False) | lay_out_as_copied(command, folder)
    inner = f"mount -t tmpfs -o size={SHM_MB}m tmpfs /dev/shm && exec {command}"
    return run_command(
        f"unshare --mount --propagation private sh -c {shlex.quote(inner)}",
        timeout_s=2 * SHM_WITHIN_S,
        cwd=folder,
        env=env,
    )


@pytest.fixture(scope="module")
def small_shm():
    missing = small_shm_missing()
    if missing:
        pytest.skip(missing)
    return in_small_shm


@pytest.mark.processes
@pytest.mark.holds(PAGE, FULL_SHM_SENTENCE)
def test_in_64_mb_of_shared_memory_big_batches_fail_as_the_page_shows_and_small_ones_fit(small_shm, tmp_path):
    """The example as the page runs it, in a container's 64 MB: it fails within seconds with the two
    messages the page quotes (numbers aside), and `--batch-size 8` passes its self-check there."""
    result = small_shm(SHARED_MEMORY, tmp_path / "default")
    assert result.returncode == 1 and not result.timed_out and not result.leftovers, result.describe()
    assert result.elapsed_s < SHM_WITHIN_S, result.describe()
    problem = excerpt_missing(messages(FULL_SHM_SENTENCE), result.stdout + result.stderr)
    assert problem is None, f"{problem}\n{result.describe()}"
    fits = small_shm(SHARED_MEMORY_SMALL_BATCHES, tmp_path / "small")
    assert fits.returncode == 0 and not fits.leftovers, fits.describe()
    assert "self-check passed" in fits.stdout.splitlines() and "192 MiB through shared memory" in fits.stdout


@pytest.mark.processes
@pytest.mark.holds(PAGE, FILE_SYSTEM_SENTENCE)
def test_the_file_system_strategy_still_puts_the_batches_in_dev_shm(small_shm, tmp_path):
    """Both strategies of torch.multiprocessing.reductions.reduce_storage make the storage shared by
    torch's own calls (by name, `_share_filename_cpu_`, or by descriptor, `_share_fd_cpu_`); in 64 MB
    the file_system one fails as the default does."""
    source = inspect.getsource(torch.multiprocessing.reductions.reduce_storage)
    assert "_share_filename_cpu_" in source and "_share_fd_cpu_" in source
    result = small_shm(SHARED_MEMORY_FILE_SYSTEM, tmp_path)
    assert result.returncode == 1 and not result.timed_out and not result.leftovers, result.describe()
    assert "unable to allocate shared memory(shm) for file </torch_" in result.stderr, result.describe()


@pytest.mark.processes
@pytest.mark.holds(PAGE, BUS_ERROR_SENTENCE)
def test_a_worker_that_overfills_shared_memory_of_its_own_dies_of_a_bus_error(small_shm, tmp_path):
    """A worker writes 96 MiB into a segment of Python's multiprocessing.shared_memory, which sets its
    size and reserves none of it, in 64 MB: the write that finds no room kills it, and torch names the
    signal and its likely cause."""
    (tmp_path / "own_shared_memory.py").write_text(OWN_SHARED_MEMORY)
    result = small_shm("python own_shared_memory.py", tmp_path)
    assert result.returncode != 0 and not result.timed_out, result.describe()
    assert result.elapsed_s < SHM_WITHIN_S, result.describe()
    for message in (messages(BUS_ERROR_SENTENCE), BUS_ERROR_IN_WORKER):
        problem = excerpt_missing(message, result.stderr)
        assert problem is None, f"{problem}\n{result.describe()}"


# --- Peer-to-peer between the GPUs of one machine ---


@pytest.mark.processes
def test_with_peer_to_peer_off_no_channel_between_gpus_goes_peer_to_peer(command_runs):
    """The page's GPU command (it names no Output, since its lines depend on the machine): with
    NCCL_P2P_DISABLE=1, NCCL_DEBUG=INFO's channel lines name another transport than P2P."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs on one machine: peer-to-peer runs between them")
    command = page_command("docs/multi-gpu/debugging.md", "NCCL_P2P_DISABLE=1")
    result = command_runs.run_ok(command, gpu=True)
    lines = (result.stdout + result.stderr).splitlines()
    channels = [ln for ln in lines if "NCCL INFO Channel" in ln and " via " in ln]
    assert channels and not [ln for ln in channels if "via P2P" in ln], result.describe()
