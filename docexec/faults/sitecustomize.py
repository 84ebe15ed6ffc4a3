"""Fault injection for the pages' failure demonstrations, loaded into every Python process of a run the
way the exit probe is: docexec.fault_injection puts this folder first on PYTHONPATH when a run asks for a
fault (`fault_env`), and this module then loads the exit probe itself, since Python imports only the
first `sitecustomize` it finds. The examples carry no fault of their own: what a reader copies kills
nothing, and the page shows how to cause the same fault by hand (`kill -9 <pid>`).

Driven by environment variables, read in each process at start-up:

- DISTDOCS_FAULT_KILL_RANK=R and DISTDOCS_FAULT_KILL_AT_STEP=N: the process of global rank R
  SIGKILLs itself once it has taken N optimizer steps, just before its optimizer applies step N (a
  global step pre-hook counts them); with DISTDOCS_FAULT_KILL_LAUNCHER=1 it SIGKILLs its launcher
  first, as a lost node loses both.
- DISTDOCS_FAULT_KILL_GROUP=G and DISTDOCS_FAULT_KILL_AT_STEP=N: torchft's replica group G (its
  REPLICA_GROUP_ID) dies, launcher first, as its Manager is about to start the quorum of step N,
  before that step has begun: a whole group lost between two steps.
- DISTDOCS_FAULT_KILL_IN_WRITE=K: the process that renames its K-th checkpoint file (a `*.pt` name)
  into place instead cuts the temporary file to half its bytes and SIGKILLs itself: a write cut short.
- DISTDOCS_FAULT_ONCE=PATH: the fault fires once per run, whatever the restarts: the first process to
  fire creates PATH, and no process fires once it exists (a restarted or replacement rank counts its
  steps from where it resumed, and would otherwise die again).

Before it kills, the process says so on stdout, in a line the pages' excerpts show:
`[rank 1] SIGKILL at step 13`, `[group 1] SIGKILL at step 12`, `[rank 0] SIGKILL halfway through writing
step-00000012.pt`."""

import os
import signal


def _fire_once() -> bool:
    """True for the first process of the run that asks; it claims the fault by creating the file."""
    path = os.environ.get("DISTDOCS_FAULT_ONCE")
    if not path:
        return True
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _die(message: str, launcher_too: bool = False, who: str = "") -> None:
    print(f"[{who or 'rank ' + os.environ.get('RANK', '?')}] {message}", flush=True)
    if launcher_too:
        os.kill(os.getppid(), signal.SIGKILL)  # the launcher first: the node is gone
    os.kill(os.getpid(), signal.SIGKILL)  # a lost process: no cleanup, no goodbye


def _kill_at_step(at_step: int, launcher_too: bool) -> None:
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    taken = [0]

    def count(optimizer, args, kwargs):
        if taken[0] == at_step and _fire_once():
            _die(f"SIGKILL at step {at_step}", launcher_too)
        taken[0] += 1

    register_optimizer_step_pre_hook(count)


def _kill_group_at_step(group: str, at_step: int) -> None:
    from torchft.manager import Manager

    start_quorum = Manager.start_quorum

    def start_quorum_or_die(self, *args, **kwargs):
        if self.current_step() == at_step and _fire_once():
            _die(f"SIGKILL at step {at_step}", launcher_too=True, who=f"group {group}")
        return start_quorum(self, *args, **kwargs)

    Manager.start_quorum = start_quorum_or_die


def _kill_in_write(nth: int) -> None:
    real_replace = os.replace
    renamed = [0]

    def replace(src, dst, *args, **kwargs):
        if os.fspath(dst).endswith(".pt"):
            renamed[0] += 1
            if renamed[0] == nth and _fire_once():
                size = os.path.getsize(src)
                os.truncate(src, size // 2)  # half the bytes reached the disk, and no rename
                _die(f"SIGKILL halfway through writing {os.path.basename(os.fspath(dst))}")
        return real_replace(src, dst, *args, **kwargs)

    os.replace = replace


def _install() -> None:
    env = os.environ
    if "RANK" not in env:  # the launcher, or a process outside the job: nothing to inject
        return
    group = env.get("DISTDOCS_FAULT_KILL_GROUP")
    if group is not None and group == env.get("REPLICA_GROUP_ID") and "DISTDOCS_FAULT_KILL_AT_STEP" in env:
        _kill_group_at_step(group, int(env["DISTDOCS_FAULT_KILL_AT_STEP"]))
    if env.get("DISTDOCS_FAULT_KILL_RANK") == env["RANK"] and "DISTDOCS_FAULT_KILL_AT_STEP" in env:
        _kill_at_step(int(env["DISTDOCS_FAULT_KILL_AT_STEP"]), env.get("DISTDOCS_FAULT_KILL_LAUNCHER") == "1")
    if "DISTDOCS_FAULT_KILL_IN_WRITE" in env:
        _kill_in_write(int(env["DISTDOCS_FAULT_KILL_IN_WRITE"]))


_install()

# The exit probe, which this module shadows on the path: run it here, as Python would have.
_probe = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "exit_probe", "sitecustomize.py")
with open(_probe) as _f:
    exec(compile(_f.read(), _probe, "exec"), {"__name__": "distdocs_exit_probe"})
