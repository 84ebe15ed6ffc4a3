"""How an example refuses bad settings: before any process group, with one line on stderr and exit
code 2. `refuse_in_process` runs the example inside this process as rank 0, in milliseconds;
`usage_error_problems` reads a real torchrun launch of one, for torchrun's own report of it. Both
return what is wrong, in words, as docexec.rule does."""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import shlex
import signal
import sys
from pathlib import Path

from docexec.commands import CommandResult
from docexec.copies import EXAMPLE_PATH
from docexec.fences import REPO
from docexec.rule import Expected, problems
from docexec.shared_runs import parse_launch


def usage_error_problems(result: CommandResult, message: str) -> list[str]:
    """What a run given impossible settings did wrong against the way every example must refuse them:
    `message` as a line said once (by rank 0 alone, under torchrun), exit code 2 (which torchrun
    reports as the rank's exitcode), no traceback from the script, and nothing left behind."""
    command = result.command
    torchrun = "torchrun " in command
    # Under torchrun the launcher's own exit code is 1 when a rank exits with 2: its report says 2.
    found = problems(result, Expected(exit_code=1 if torchrun else 2))
    said = result.stderr.splitlines().count(message)
    if said != 1:
        found.append(f"said {message!r} {said} times, not once")
    if torchrun and "exitcode  : 2" not in result.stderr:
        found.append("torchrun reports no rank that exited with 2")
    for script in {Path(p).name for p in EXAMPLE_PATH.findall(command)}:
        if f'{script}", line' in result.stderr:
            found.append(f"{script} printed a traceback")
    return found


def refuse_in_process(command: str) -> tuple[int | None, str]:
    """An example's refusal of bad settings, checked without torchrun: the script named in `command`
    (a `torchrun ... examples/x.py FLAGS` line) runs in this process as rank 0 of the command's world
    (RANK=0, LOCAL_RANK=0, WORLD_SIZE from torchrun's --nproc_per_node, however spelled), until it
    exits. Returns its exit code (None if it returned without exiting) and what it wrote to stderr. Refusals come before
    init_process_group, so no group is started; one that came later would fail at once, with no
    MASTER_ADDR to meet at. sys.argv, the environment and the SIGTERM handler (which an example that
    saves on SIGTERM sets) are restored afterwards."""
    words = shlex.split(command)
    script = next(i for i, w in enumerate(words) if EXAMPLE_PATH.fullmatch(w))
    launch = parse_launch(command)
    nproc = launch.ranks if launch and launch.ranks.isdigit() else "1"
    saved_argv, saved_env = sys.argv, dict(os.environ)
    saved_sigterm = signal.getsignal(signal.SIGTERM)
    err = io.StringIO()
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE=nproc, LOCAL_WORLD_SIZE=nproc)
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(name, None)
    sys.argv = [str(REPO / words[script]), *words[script + 1 :]]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(sys.argv[0], run_name="__main__")
        code = None
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    finally:
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        signal.signal(signal.SIGTERM, saved_sigterm)
    return code, err.getvalue()


def refusal_problems(command: str, message: str) -> list[str]:
    """What the example in `command`, run in this process as rank 0 (refuse_in_process), did wrong
    against refusing with `message` as the one line of its stderr and exit code 2."""
    code, err = refuse_in_process(command)
    if code != 2 or err.splitlines() != [message]:
        return [f"$ {command}\nexit code {code}, not 2; stderr, not just {message!r}:\n{err}"]
    return []
