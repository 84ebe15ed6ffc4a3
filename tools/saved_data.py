"""The saved data's one list, measurements/saved-data.yml: read it, and run the commands that regenerate it.

    python -m tools.saved_data list                 # every artefact: its target, files and pages
    python -m tools.saved_data run bench            # what `make bench` does: every "bench" artefact, in order
    python -m tools.saved_data run TARGET           # likewise for another target: exit-soak, audit
    python -m tools.saved_data run NAME [NAME ...]  # the named artefacts only

Commands run from the repository root with this Python's folder first on PATH (its torchrun,
distdocs and python) and the GPUs hidden, since the files hold CPU measurements; each by bash, and
the first that fails stops the run with its exit code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field

import yaml

from docexec.commands import command_env
from docexec.fences import REPO

LIST = REPO / "measurements" / "saved-data.yml"
FOLDERS = ("measurements", "docs/assets")  # every file in these has an entry


@dataclass
class Artefact:
    name: str
    files: list[str]
    target: str  # the make target that regenerates the files, or "by hand"
    pages: list[str]
    tests: list[str]
    commands: list[str] = field(default_factory=list)
    note: str = ""
    root: bool = False  # its commands build network namespaces (distdocs.lab.links): skipped, saying so, without root


def artefacts() -> list[Artefact]:
    return [Artefact(**entry) for entry in yaml.safe_load(LIST.read_text())]


def run(selected: list[Artefact]) -> int:
    env = command_env(gpu=False)  # the tests' environment: this venv first, GPUs hidden (the -cpu files)
    for artefact in selected:
        if artefact.root and os.geteuid() != 0:
            print(
                f"[{artefact.name}] skipped: {artefact.note or 'needs root'}; run this as root to remake it", flush=True
            )
            continue
        for command in artefact.commands:
            print(f"[{artefact.name}] {command}", flush=True)
            code = subprocess.run(["bash", "-c", command], cwd=REPO, env=env).returncode
            if code != 0:
                print(f"error: [{artefact.name}] exited with {code}", file=sys.stderr)
                return code
    return 0


def main(argv: list[str]) -> int:
    everything = artefacts()
    if argv == ["list"]:
        for a in everything:
            print(f"{a.name} ({a.target}): {', '.join(a.files)}; shown on {', '.join(a.pages) or 'no page'}")
        return 0
    if len(argv) >= 2 and argv[0] == "run":
        by_name = {a.name: a for a in everything}
        targets = {a.target for a in everything}
        if len(argv) == 2 and argv[1] in targets - {"by hand"}:
            return run([a for a in everything if a.target == argv[1]])
        unknown = [n for n in argv[1:] if n not in by_name]
        if unknown:
            names = ", ".join(sorted(by_name))
            made = sorted(targets - {"by hand"})
            print(f"error: no target or artefact {unknown[0]!r}; the targets are {made} and the names {names}",
                  file=sys.stderr)  # fmt: skip
            return 2
        return run([by_name[n] for n in argv[1:]])
    print("usage: python -m tools.saved_data list | run TARGET | run NAME [NAME ...]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
