"""distdocs.training.checkpoint: atomic writes that a crash cannot break, retention, checksums with fallback,
weights_only loading, RNG states, and clear errors for bad folders and foreign checkpoints."""

import os
import pickle
import random
import subprocess
import sys

import pytest
import torch

from distdocs.training import checkpoint as ck


def state(step: int) -> dict:
    torch.manual_seed(step)
    return {"model": {"w": torch.randn(4, 4)}, "step": step}


@pytest.mark.fast
def test_save_and_load_the_newest_keeping_the_last_k(tmp_path):
    for step in (10, 20, 30, 40):
        ck.save_checkpoint_atomic(state(step), tmp_path, step, keep=2)
    assert [s for s, _ in ck.list_checkpoints(tmp_path)] == [30, 40]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step-00000030.pt", "step-00000030.pt.sha256", "step-00000040.pt", "step-00000040.pt.sha256"
    ]  # fmt: skip
    step, loaded = ck.load_latest_checkpoint(tmp_path)
    assert step == 40 and torch.equal(loaded["model"]["w"], state(40)["model"]["w"])  # bitwise


@pytest.mark.fast
def test_a_crash_during_the_rename_leaves_the_old_checkpoint_and_no_temporary_file(tmp_path, monkeypatch):
    ck.save_checkpoint_atomic(state(1), tmp_path, 1)
    before = sorted(p.name for p in tmp_path.iterdir())

    def crash(*args):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        ck.save_checkpoint_atomic(state(2), tmp_path, 2)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert ck.load_latest_checkpoint(tmp_path)[0] == 1


@pytest.mark.fast
@pytest.mark.parametrize("damage", ["truncate", "flip", "no checksum"])
def test_a_damaged_newest_checkpoint_is_skipped_with_a_warning(tmp_path, damage):
    ck.save_checkpoint_atomic(state(1), tmp_path, 1)
    newest = ck.save_checkpoint_atomic(state(2), tmp_path, 2)
    data = newest.read_bytes()
    if damage == "truncate":
        newest.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        newest.write_bytes(data[:-9] + bytes([data[-9] ^ 1]) + data[-8:])
    else:
        newest.with_name(newest.name + ".sha256").unlink()
    with pytest.warns(UserWarning, match="step-00000002.pt: missing or mismatched checksum"):
        step, loaded = ck.load_latest_checkpoint(tmp_path)
    assert step == 1 and torch.equal(loaded["model"]["w"], state(1)["model"]["w"])


class Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.mark.fast
def test_weights_only_refuses_a_pickle_that_would_run_code(tmp_path):
    ck.save_checkpoint_atomic({"evil": Payload()}, tmp_path, 1)  # checksummed, so only weights_only stands guard
    with pytest.raises(pickle.UnpicklingError):
        ck.load_latest_checkpoint(tmp_path)


@pytest.mark.fast
def test_rng_states_round_trip_through_a_checkpoint(tmp_path):
    random.seed(3)
    torch.manual_seed(3)
    ck.save_checkpoint_atomic({"rng": ck.rng_states()}, tmp_path, 1)
    expected = (random.random(), torch.rand(3))
    random.seed(99)
    torch.manual_seed(99)
    ck.restore_rng_states(ck.load_latest_checkpoint(tmp_path)[1]["rng"])
    assert random.random() == expected[0] and torch.equal(torch.rand(3), expected[1])


@pytest.mark.fast
def test_no_checkpoint_yet_gives_none(tmp_path):
    assert ck.load_latest_checkpoint(tmp_path / "absent") == (None, None)


@pytest.mark.fast
def test_an_unwritable_folder_is_reported_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ck.CheckpointError, match="is not writable"):
        ck.check_writable(blocker / "ckpt")
    assert ck.check_writable(tmp_path / "ok") == tmp_path / "ok"


@pytest.mark.fast
def test_a_checkpoint_from_another_model_names_the_keys_that_differ():
    with pytest.raises(ck.CheckpointError, match=r"missing \['b'\]; unexpected \['c'\]"):
        ck.check_same_keys({"a": 1, "b": 2}, {"a": 1, "c": 3})


@pytest.mark.fast
def test_keep_below_one_is_refused(tmp_path):
    with pytest.raises(ValueError, match="keep"):
        ck.save_checkpoint_atomic(state(1), tmp_path, 1, keep=0)


HALF_WRITTEN = """
import resource, signal, sys
import torch
from distdocs.training import checkpoint as ck

folder = sys.argv[1]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))  # no file may grow past 1 MiB
big = {"w": torch.ones(1 << 20)}  # 4 MiB of checkpoint
new_checkpoint = lambda: ck.save_checkpoint_atomic(big, folder, 2)
over_a_file = lambda: ck.write_atomically(f"{folder}/old.bin", b"x" * (4 << 20))
for attempt in (new_checkpoint, over_a_file):
    try:
        attempt()
    except OSError as e:
        print("failed:", e.strerror)
"""


@pytest.mark.processes
def test_a_write_that_fails_halfway_leaves_the_old_files_and_nothing_under_a_final_name(tmp_path):
    """The disk fills in the middle of a write: a child process may not grow any file past 1 MiB
    (RLIMIT_FSIZE), and writes a 4 MiB checkpoint, then 4 MiB over an existing file. Whatever way the
    writer works, the step-2 checkpoint must not appear under its final name, the previous one and the
    old file must keep their bytes, and no temporary file may be left."""
    ck.save_checkpoint_atomic(state(1), tmp_path, 1)
    (tmp_path / "old.bin").write_bytes(b"old contents")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    child = subprocess.run([sys.executable, "-c", HALF_WRITTEN, str(tmp_path)], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    assert child.stdout.count("failed: File too large") == 2, child.stdout + child.stderr  # both writes failed
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert ck.load_latest_checkpoint(tmp_path)[0] == 1
