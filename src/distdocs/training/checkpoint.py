"""Checkpoints that a crash cannot break: written atomically, checksummed, the last K kept, and loaded
with `weights_only=True`.

A checkpoint is `step-00000120.pt` (the `torch.save` bytes) beside `step-00000120.pt.sha256` (their
SHA-256). Each file is written to a temporary name in the same folder, flushed to disk with fsync,
renamed over its final name with `os.replace` (atomic on POSIX), and the folder is fsynced so that
the rename itself survives a power loss. The checksum is written last: a checkpoint without one, or
whose bytes no longer match it, is skipped with a warning, and the previous one is loaded instead.

    save_checkpoint_atomic({"model": model.state_dict(), "step": 120}, "ckpt", step=120, keep=3)
    step, state = load_latest_checkpoint("ckpt")   # (None, None) when there is none
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import random
import re
import tempfile
import warnings
from pathlib import Path

import torch

NAME = re.compile(r"^step-(\d{8})\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint folder that cannot be used, or a checkpoint that does not fit the model."""


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --8<-- [start:write]
def write_atomically(path: str | os.PathLike, payload: bytes) -> None:
    """Write `payload` to `path` so that a crash at any moment leaves the old file or the new one."""
    path = Path(path)
    tmp = tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False)
    try:
        with tmp:
            tmp.write(payload)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp.name, path)
    except BaseException:
        Path(tmp.name).unlink(missing_ok=True)  # no half-written leftovers beside the checkpoints
        raise
    _fsync_folder(path.parent)


# --8<-- [end:write]


def checkpoint_interval_s(cost_s: float, between_failures_s: float) -> float:
    """The checkpoint interval that wastes the least time, Young's approximation √(2δM) (Young 1974):
    a checkpoint costs training `cost_s` (δ) per interval (the whole write, when the save blocks;
    the stall and the slower steps, when it writes in the background), and a failure, every
    `between_failures_s` (M) on average, costs half an interval of training done again."""
    if not (cost_s > 0 and between_failures_s > 0):
        raise ValueError(f"both times must be positive, not {cost_s!r} and {between_failures_s!r}")
    return math.sqrt(2 * cost_s * between_failures_s)


def check_writable(folder: str | os.PathLike) -> Path:
    """Create `folder` if needed and prove a file can be written there, so that a bad folder fails
    before training starts, not at the first save."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-probe-{os.getpid()}"  # one per process: ranks may check at once
        write_atomically(probe, b"ok")
        probe.unlink()
    except OSError as e:
        raise CheckpointError(f"checkpoint folder {str(folder)!r} is not writable: {e.strerror or e}") from None
    return folder


def list_checkpoints(folder: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint file in `folder`, oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m[1]), folder / m[0]) for m in map(NAME.match, os.listdir(folder)) if m]
    return sorted(found)


def save_checkpoint_atomic(state: dict, folder: str | os.PathLike, step: int, keep: int = 3) -> Path:
    """Save `state` as the checkpoint of `step` in `folder`, then delete all but the newest `keep`."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1, not {keep}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    path = folder / f"step-{step:08d}.pt"
    write_atomically(path, payload)
    write_atomically(path.with_name(path.name + ".sha256"), hashlib.sha256(payload).hexdigest().encode())
    for _, old in list_checkpoints(folder)[:-keep]:
        old.unlink(missing_ok=True)
        old.with_name(old.name + ".sha256").unlink(missing_ok=True)
    return path


def _verified_bytes(path: Path) -> bytes | None:
    """The checkpoint's bytes if its checksum file exists and matches them; else None."""
    digest = path.with_name(path.name + ".sha256")
    try:
        payload, expected = path.read_bytes(), digest.read_text().strip()
    except OSError:
        return None
    return payload if hashlib.sha256(payload).hexdigest() == expected else None


# --8<-- [start:load]
def load_latest_checkpoint(folder: str | os.PathLike, map_location="cpu") -> tuple[int | None, dict | None]:
    """(step, state) of the newest checkpoint whose checksum matches, loaded with weights_only=True
    (tensors and plain containers only: a pickle could run any code). A newest checkpoint that is
    truncated, corrupted or lacks its checksum is skipped with a warning."""
    for step, path in reversed(list_checkpoints(folder)):
        payload = _verified_bytes(path)
        if payload is None:
            warnings.warn(f"{path}: missing or mismatched checksum, skipped; trying an older checkpoint", stacklevel=2)
            continue
        return step, torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)
    return None, None


# --8<-- [end:load]


def rng_states() -> dict:
    """This process's random number generators, in a form `weights_only` loading accepts."""
    states = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np

        name, keys, pos, has_gauss, gauss = np.random.get_state()
        states["numpy"] = (name, torch.from_numpy(keys.copy()), pos, has_gauss, gauss)
    except ImportError:
        pass
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict) -> None:
    """Put back the generators that `rng_states` saved on this rank: Python's, torch's, and NumPy's
    and CUDA's where they were saved."""
    random.setstate(states["python"])
    torch.set_rng_state(states["torch"])
    if "numpy" in states:
        import numpy as np

        name, keys, pos, has_gauss, gauss = states["numpy"]
        np.random.set_state((name, keys.numpy(), pos, has_gauss, gauss))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def check_same_keys(expected: dict, loaded: dict, what: str = "model") -> None:
    """Raise a CheckpointError listing the keys that differ, when a checkpoint belongs to another model."""
    missing, unexpected = sorted(set(expected) - set(loaded)), sorted(set(loaded) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"the checkpoint's {what} does not fit: missing {missing or 'none'}; unexpected {unexpected or 'none'}"
        )
