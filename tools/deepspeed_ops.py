"""`make test` runs this first: build DeepSpeed's CPU communication op once, outside any test's timeout.

The first DeepSpeed job on a machine compiles a small C++ op (`deepspeed_shm_comm`) and caches it
under ~/.cache/torch_extensions: about a minute of CPU on an idle 2-core machine, and over three
minutes of wall time while the test workers share those cores. A compile that a test's timeout kills
leaves its lock file behind, and torch then waits for that lock forever, with no message: every
later DeepSpeed run hangs. So the op is built here, alone, before the tests start, and a lock that no
live build holds is removed first. Once the op is cached this takes the time of `import deepspeed`.
It builds with this venv's ninja, the one the tests' commands find first on their PATH.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

# A lock older than this was left by a build that died: a build takes about a minute at most.
STALE_AFTER_S = 600


def remove_stale_lock(build_dir: Path, stale_after_s: float = STALE_AFTER_S, now: float | None = None) -> bool:
    """Remove `build_dir`/lock if it is older than `stale_after_s`; return whether it was removed."""
    lock = build_dir / "lock"
    try:
        age = (time.time() if now is None else now) - lock.stat().st_mtime
    except FileNotFoundError:
        return False
    if age < stale_after_s:
        return False
    lock.unlink(missing_ok=True)
    return True


def main() -> int:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    # Build with the ninja the tests' commands find: this venv's, first on their PATH. Another ninja (the
    # system's) writes its log in another format, and the venv's then rebuilds everything, inside a test.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    try:
        from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder
        from torch.utils.cpp_extension import _get_build_directory
    except ImportError as err:  # DeepSpeed is in the lock; a reader's own environment may lack it
        print(f"deepspeed_ops: DeepSpeed is not installed ({err}); nothing to build")
        return 0
    builder = ShareMemCommBuilder()
    build_dir = Path(_get_build_directory(builder.name, verbose=False))
    if remove_stale_lock(build_dir):
        print(f"deepspeed_ops: removed a stale lock left by an interrupted build in {build_dir}")
    start = time.monotonic()
    builder.load(verbose=False)
    print(f"deepspeed_ops: {builder.name} ready in {time.monotonic() - start:.1f} s ({build_dir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
