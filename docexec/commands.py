"""The doc tests' command runner: run a shell command (a `torchrun ...` line, say) in its own process
session, with a hard timeout, and kill whatever it left running."""

from __future__ import annotations

import ast
import contextlib
import fcntl
import hashlib
import json
import os
import pickle
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from distdocs.processes import kill_session, wait_for_session_to_end

from docexec.fences import REPO
from docexec.rule import EXIT_0, Expected, problems

COMMAND_TIMEOUT_S = 180
EXIT_PROBE = Path(__file__).resolve().parent / "exit_probe"
# Loaded instead of the exit probe (which it loads in turn) into a run that asks for a fault: see
# docexec/faults/sitecustomize.py and fault_env().
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
# What a copied-out example finds beside it before it runs: a reader's folder that already holds a
# `checkpoints/` folder (the examples' default) with files of the reader's own. A run must leave
# these as they were (test_examples.py): an example deletes nothing it did not create in this run.
READERS_FILES = {
    "checkpoints/README-reader.txt": "the reader's own notes, in the folder the examples checkpoint to\n",
    "checkpoints/step-sentinel.bin": "bytes that are not a checkpoint\n",
    "notes.txt": "a file of the reader's, beside the example\n",
}
EXAMPLE_PATH = re.compile(r"\bexamples/[\w/]+\.py\b")
# The distdocs modules an example may import: those of `distdocs.training`, the pieces that run
# inside a training job, each with the first line of its docstring as the reason. They import nothing
# from distdocs but each other (tests/test_library.py), so that a reader who copies an example and
# `pip install -e .` gets all an example needs.
TRAINING = REPO / "src" / "distdocs" / "training"
ALLOWED_IN_EXAMPLES = {
    path.stem: ast.get_docstring(ast.parse(path.read_text())).split("\n")[0]
    for path in sorted(TRAINING.glob("*.py"))
    if path.stem != "__init__"
}

# Helpers that end on their own once their parent has gone (multiprocessing's resource tracker, say)
# get this long before they count as left behind.
LINGER_S = 2.0


@dataclass
class CommandResult:
    command: str
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float
    pid: int  # also the session id of everything the command started
    timed_out: bool = False
    leftovers: list[str] = field(default_factory=list)  # processes still alive after it ended
    # What each `distdocs bench` it ran measured, as that command's --json prints it ({benchmark,
    # machine, records}): a page's benchmark command, shown as a table, checked as data.
    records: list[dict] = field(default_factory=list)
    # Files that were in the run's folder before it started (READERS_FILES, the copied examples) and
    # that it changed or removed: a run of a copied-out example must leave this empty.
    disturbed: list[str] = field(default_factory=list)

    def describe(self, tail: int = 3000) -> str:
        """A failure report: what ran, how it ended, and the end of each stream."""
        status = "timed out" if self.timed_out else f"exit code {self.returncode}"
        parts = [f"$ {self.command}\n{status} after {self.elapsed_s:.1f} s"]
        if self.leftovers:
            parts.append("left running (killed): " + "; ".join(self.leftovers))
        parts.append("--- stdout (end) ---\n" + self.stdout[-tail:])
        parts.append("--- stderr (end) ---\n" + self.stderr[-tail:])
        return "\n".join(parts)


def run_command(
    command: str, *, timeout_s: float, cwd: str | Path | None = None, env: dict | None = None
) -> CommandResult:
    """Run `command` with bash in a new session; kill the whole session on timeout or when done.

    Output goes to temporary files rather than pipes, so that a background process that inherited
    them cannot keep us waiting after the command itself has exited."""
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_session(proc.pid)
            proc.wait()
        wait_for_session_to_end(proc.pid, LINGER_S)
        leftovers = kill_session(proc.pid)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    return CommandResult(
        command, proc.returncode, stdout, stderr, time.monotonic() - start, proc.pid, timed_out, leftovers
    )


class Background:
    """A command that a test watches while it runs: started in its own session, stdout and stderr
    going to `log`. Leaving the `with` block (or `stop()`) kills whatever it started; `leftovers`
    then says what was still alive. `command` is a shell line, or a list of arguments run as is."""

    def __init__(self, command: str | list[str], log: Path, *, cwd: str | Path = REPO, env: dict | None = None):
        args = ["bash", "-c", command] if isinstance(command, str) else command
        self.log = log
        self.leftovers: list[str] = []
        with log.open("w") as sink:
            self.proc = subprocess.Popen(
                args,
                cwd=cwd,
                env=env if env is not None else command_env(gpu=False),
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text()

    def wait(self, timeout_s: float) -> int:
        """Its exit code; subprocess.TimeoutExpired if it runs past `timeout_s`."""
        return self.proc.wait(timeout=timeout_s)

    def stop(self) -> list[str]:
        self.leftovers = kill_session(self.proc.pid)
        self.proc.wait()
        return self.leftovers

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def command_env(gpu: bool, python_bin: Path | None = None) -> dict[str, str]:
    """The reader's environment, with this venv's torchrun, python and distdocs first on PATH (or
    those of `python_bin`, another venv's bin/). CPU commands run with the GPUs hidden, so that they
    test the gloo path on a GPU machine too."""
    env = dict(os.environ)
    env["PATH"] = str(python_bin or Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(EXIT_PROBE)
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


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


def snapshot(folder: Path, only: set[str] | None = None) -> dict[str, str]:
    """Every file under `folder` (or those of `only` that still exist), by relative path, with a hash
    of its bytes."""
    files = sorted(folder.rglob("*")) if only is None else [folder / p for p in sorted(only)]
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}


def lay_out_as_copied(command: str, folder: Path) -> dict[str, str]:
    """Copy each example that `command` names into `folder`, at the same relative path, next to a
    `distdocs` that holds only the modules examples may import; return the environment variables
    that put that `distdocs` first on the import path. Run from `folder`, the command then works
    only if its examples run with torch alone, as a reader's copies must."""
    for relative in set(EXAMPLE_PATH.findall(command)):
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, folder / relative)
    package = folder / "allowed" / "distdocs"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""Only the modules that examples may import."""\n')
    shutil.copytree(TRAINING, package / "training", ignore=shutil.ignore_patterns("__pycache__"))
    return {"PYTHONPATH": os.pathsep.join([str(EXIT_PROBE), str(folder / "allowed")])}


@contextlib.contextmanager
def holding_port(port: int | None):
    """Listen on 127.0.0.1:`port` for the duration, as another job would; a port that is already
    busy stays busy, which is all the test needs."""
    if port is None:
        yield
        return
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen()
    except OSError:
        pass  # someone else holds it already
    try:
        yield
    finally:
        sock.close()


# A port a command fixes for itself (`--master_port=29500`, `--rdzv_endpoint=127.0.0.1:29401`): two
# commands that name the same one must not run at the same time, in one test process or in parallel ones.
FIXED_PORT = re.compile(r"(?:port[=\s]|127\.0\.0\.1:)(\d{4,5})\b")


@contextlib.contextmanager
def file_lock(path: Path, exclusive: bool = True):
    """An advisory lock on `path` (flock), held until the block ends; processes that share the folder
    wait for each other."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def ports_held(locks: Path | None, command: str, busy_port: int | None):
    """Hold the lock of every fixed port that `command` names (and of `busy_port`), in order."""
    ports = sorted({int(p) for p in FIXED_PORT.findall(command)} | ({busy_port} if busy_port else set()))
    with contextlib.ExitStack() as stack:
        for port in ports if locks else []:
            stack.enter_context(file_lock(locks / f"port-{port}.lock"))
        yield


class CommandRuns:
    """Runs each distinct command once per session, with a hard timeout. An example's docstring
    command and the same command on a page share one run.

    With `shared`, a folder that parallel test processes of one session share, a command runs once
    for all of them: the first to ask runs it under a lock and saves the result there, the others wait
    for the lock and read it. Commands that name the same fixed port never run at the same time.

    A command that names files under examples/ runs in a temporary folder that holds copies of those
    files and nothing else of this repository, with `distdocs` reduced to ALLOWED_IN_EXAMPLES. Every
    other command runs from the repository root."""

    def __init__(self, shared: Path | None = None, python_bin: Path | None = None) -> None:
        self._results: dict[tuple[str, bool, int | None], CommandResult] = {}
        self._shared = shared
        self._python_bin = python_bin  # another venv's bin/: its torchrun and python run the commands

    def run(
        self, command: str, gpu: bool = False, busy_port: int | None = None, fault: str | None = None
    ) -> CommandResult:
        """The result of `command`, run once per session; with `fault` (fault_env), the same command
        with that fault injected into its ranks, a run of its own."""
        key = (command, gpu, busy_port) if fault is None else (command, gpu, busy_port, fault)
        if key not in self._results:
            if self._shared is None:
                self._results[key] = self._run(command, gpu, busy_port, fault)
            else:
                name = hashlib.sha256(repr(key).encode()).hexdigest()[:20]
                saved = self._shared / f"{name}.pickle"
                with file_lock(self._shared / f"{name}.lock"):
                    if not saved.exists():
                        saved.write_bytes(pickle.dumps(self._run(command, gpu, busy_port, fault)))
                    self._results[key] = pickle.loads(saved.read_bytes())
        return self._results[key]

    def _run(self, command: str, gpu: bool, busy_port: int | None, fault: str | None = None) -> CommandResult:
        env = command_env(gpu, self._python_bin)
        with (
            ports_held(self._shared, command, busy_port),
            tempfile.TemporaryDirectory(prefix="distdocs-copy-") as folder,
            holding_port(busy_port),
        ):
            cwd: Path = REPO
            before: dict[str, str] = {}
            if EXAMPLE_PATH.search(command):
                cwd = Path(folder)
                env |= lay_out_as_copied(command, cwd)
                for relative, text in READERS_FILES.items():
                    (cwd / relative).parent.mkdir(parents=True, exist_ok=True)
                    (cwd / relative).write_text(text)
                before = snapshot(cwd)
            if fault is not None:
                env = with_faults(env | fault_env(fault, Path(folder) / "distdocs-fault-fired"))
            records = Path(folder) / "distdocs-records"
            records.mkdir()
            env["DISTDOCS_RECORDS"] = str(records)
            result = run_command(command, timeout_s=COMMAND_TIMEOUT_S, cwd=cwd, env=env)
            result.records = [json.loads(f.read_text()) for f in sorted(records.iterdir())]
            after = snapshot(cwd, only=set(before)) if before else {}  # what the run wrote is its own
            result.disturbed = [
                f"{p} ({'removed' if p not in after else 'changed'})" for p in before if before[p] != after.get(p)
            ]
            return result

    def run_failing(
        self, command: str, exit_code: int, within_s: float, busy_port: int | None = None, fault: str | None = None
    ) -> CommandResult:
        """Run a command that is meant to fail, and fail the test unless it ended with `exit_code`
        within `within_s` seconds, leaving nothing behind and without aborting."""
        return _fail_on_problems(self.run(command, busy_port=busy_port, fault=fault), Expected(exit_code, within_s))

    def run_usage_error(self, command: str, message: str) -> CommandResult:
        """Run a command given impossible settings, and fail the test unless it refused them the way
        every example must: `message` as a line said once (by rank 0 alone, under torchrun), exit code
        2 (which torchrun reports as the rank's exitcode), no traceback from the script, and nothing
        left behind."""
        result = self.run(command)
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
        return _fail_with(result, found)

    def run_ok(
        self,
        command: str,
        gpu: bool = False,
        busy_port: int | None = None,
        expected: Expected = EXIT_0,
        fault: str | None = None,
    ) -> CommandResult:
        """Run, and fail the test unless the run shows what `expected` says (by default: exit code 0),
        in time, leaving nothing behind, with every process group freed by its destroy_process_group
        (docexec.rule). `fault`: inject it into the ranks (fault_env)."""
        return _fail_on_problems(self.run(command, gpu, busy_port, fault), expected)


def _fail_on_problems(result: CommandResult, expected: Expected) -> CommandResult:
    return _fail_with(result, problems(result, expected))


def _fail_with(result: CommandResult, found: list[str]) -> CommandResult:
    """Fail the test with the run's report if anything was found; else return the result."""
    if found:
        pytest.fail("; ".join(found) + "\n" + result.describe(), pytrace=False)
    return result


def refuse_in_process(command: str) -> tuple[int | None, str]:
    """An example's refusal of bad settings, checked without torchrun: the script named in `command`
    (a `torchrun ... examples/x.py FLAGS` line) runs in this process as rank 0 of the command's world
    (RANK=0, LOCAL_RANK=0, WORLD_SIZE from --nproc_per_node), until it exits. Returns its exit code
    (None if it returned without exiting) and what it wrote to stderr. Refusals come before
    init_process_group, so no group is started; one that came later would fail at once, with no
    MASTER_ADDR to meet at. sys.argv, the environment and the SIGTERM handler (which an example that
    saves on SIGTERM sets) are restored afterwards."""
    import io
    import runpy
    import shlex
    import signal

    words = shlex.split(command)
    script = next(i for i, w in enumerate(words) if EXAMPLE_PATH.fullmatch(w))
    nproc = next((w.split("=", 1)[1] for w in words[:script] if w.startswith("--nproc_per_node=")), "1")
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


def check_refusal(command: str, message: str) -> None:
    """Fail the test unless the example in `command`, run in this process as rank 0, refuses with
    `message` as the one line of its stderr and exit code 2 (refuse_in_process). One torchrun launch
    per refusal mechanism stays (CommandRuns.run_usage_error), for torchrun's own report of it."""
    code, err = refuse_in_process(command)
    if code != 2 or err.splitlines() != [message]:
        pytest.fail(f"$ {command}\nexit code {code}, not 2; stderr, not just {message!r}:\n{err}", pytrace=False)
