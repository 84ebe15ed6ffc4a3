"""Faults injected into a run from the outside, so that the examples carry none of their own: a page's
command fence says `fault="kill-rank=1 kill-at-step=13"`, and the run gets docexec/faults/ first on
PYTHONPATH (its sitecustomize.py loads the exit probe too) and one DISTDOCS_FAULT_* variable per
word, which that file reads in every rank."""

from __future__ import annotations

import os
from pathlib import Path

from docexec.commands import EXIT_PROBE

FAULTS = Path(__file__).resolve().parent / "faults"
# A fault as a page's command fence names it (`fault="kill-rank=1 kill-at-step=13"`), word by word, to
# the environment variable that docexec/faults/sitecustomize.py reads.
FAULT_WORDS = {
    "kill-rank": "DISTDOCS_FAULT_KILL_RANK",
    "kill-group": "DISTDOCS_FAULT_KILL_GROUP",  # a torchft replica group, by its REPLICA_GROUP_ID
    "kill-at-step": "DISTDOCS_FAULT_KILL_AT_STEP",
    "kill-launcher": "DISTDOCS_FAULT_KILL_LAUNCHER",
    "kill-in-write": "DISTDOCS_FAULT_KILL_IN_WRITE",
}


def fault_env(fault: str, once: Path) -> dict[str, str]:
    """The environment that injects `fault` (`kill-rank=1 kill-at-step=13 kill-launcher`, say) into the
    ranks of a run: docexec/faults/ first on PYTHONPATH, a DISTDOCS_FAULT_* variable per word, and
    `once`, the file whose creation marks the fault as fired, so that it fires once per run."""
    env = {"DISTDOCS_FAULT_ONCE": str(once)}
    for word in fault.split():
        name, _, value = word.partition("=")
        if name not in FAULT_WORDS:
            raise ValueError(f"unknown fault {name!r} in {fault!r}; known: {sorted(FAULT_WORDS)}")
        env[FAULT_WORDS[name]] = value or "1"
    return env


def with_faults(env: dict[str, str]) -> dict[str, str]:
    """`env` with the fault folder in the exit probe's place on PYTHONPATH (it loads the probe too)."""
    path = env.get("PYTHONPATH", str(EXIT_PROBE)).split(os.pathsep)
    path = [str(FAULTS) if p == str(EXIT_PROBE) else p for p in path]
    return env | {"PYTHONPATH": os.pathsep.join(path if str(FAULTS) in path else [str(FAULTS), *path])}
