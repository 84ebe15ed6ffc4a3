"""`make test-torch VERSION=2.14.1`: every example under another release of PyTorch, judged by the
rule the tests apply (docexec.rule), so that pyproject.toml's range claims only what ran.

It builds a second virtual environment, .venv-torch-VERSION, with that torch and NumPy, all the
examples need (torch's object collectives, all_gather_object among them, go through NumPy, which
`pip install torch` does not bring), and runs each example's launch command, at the rank count its page shows, with that
environment's torchrun first on PATH, from a folder that holds a copy of the example, as the tests
run them. Each run must exit 0, leave nothing running, not abort, free its process groups, and print
"self-check passed". The two examples that teach a framework (DeepSpeed, torchft) are listed as not
run: their frameworks pin torch releases of their own.

The report, measurements/torch-VERSION-cpu.txt (or PREFIX.txt), names the machine and the torch that ran, and gives a
line per example. It is not part of `make test`: the install is a second torch of several GB.
"""

from __future__ import annotations

import datetime
import platform
import re
import subprocess
import sys
from pathlib import Path

from docexec.fences import REPO, all_examples, example_command
from docexec.rule import Expected, problems
from docexec.shared_runs import CommandRuns

FRAMEWORKS = {"deepspeed", "torchft"}  # examples that import one of these are not run here


def venv_for(version: str) -> Path:
    """.venv-torch-VERSION with torch==VERSION and NumPy, made on first use."""
    venv = REPO / f".venv-torch-{version}"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    have = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    wanted = ["numpy"] + ([f"torch=={version}"] if have.stdout.strip().split("+")[0] != version else [])
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(pip + wanted, check=True)
    return venv


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 3) or not argv[0][:1].isdigit() or len(argv) == 3 and argv[1] != "--save":
        print("usage: python -m tools.torch_check VERSION [--save PREFIX]   (as in 2.14.1)", file=sys.stderr)
        return 2
    version = argv[0]
    report = REPO / f"{argv[2] if len(argv) == 3 else f'measurements/torch-{version}-cpu'}.txt"
    venv = venv_for(version)
    found = subprocess.run(
        [str(venv / "bin/python"), "-c", "import torch; print(torch.__version__, torch.cuda.is_available())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    lines = [
        f"# {platform.machine()}, torch {found[0]} from .venv-torch-{version}, CUDA available: {found[1]} "
        f"(the examples ran on the CPU, gloo), {datetime.date.today()}"
    ]
    runs, failed = CommandRuns(python_bin=venv / "bin"), 0
    for script in all_examples():
        name = str(script.relative_to(REPO))
        frameworks = {f for f in FRAMEWORKS if re.search(rf"^\s*(import|from) {f}\b", script.read_text(), re.M)}
        if frameworks:
            lines.append(f"{name}: not run: it needs {', '.join(sorted(frameworks))}, which pins torch itself")
            print(lines[-1], flush=True)
            continue
        result = runs.run(example_command(script))
        wrong = problems(result, Expected(self_check=True))
        failed += bool(wrong)
        lines.append(f"{name}: {'FAILED: ' + '; '.join(wrong) if wrong else 'passed'} in {result.elapsed_s:.1f} s")
        if wrong:  # the error that ended it, as the rank's traceback names it
            errors = [line for line in result.stderr.splitlines() if re.search(r"\w+(Error|Exception): ", line)]
            ranks = [line for line in errors if line.startswith("[rank")]  # not torchrun's ChildFailedError
            lines[-1] += f"; {(ranks or errors)[0].strip()}" if errors else ""
        print(lines[-1], flush=True)
    report.write_text("\n".join(lines) + "\n")
    print(f"torch-check: {failed} failed under torch {found[0]}; report in {report.relative_to(REPO)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
