"""One run per distinct command for a whole test session, shared by the parallel test processes of
pytest-xdist: the first to ask runs it under a file lock and saves the result, the others wait for
the lock and read it. Commands that fix the same port never overlap."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import pickle
import re
import socket
import tempfile
from pathlib import Path

from docexec.commands import COMMAND_TIMEOUT_S, CommandResult, command_env, run_command
from docexec.copies import EXAMPLE_PATH, disturbed, set_up_as_reader
from docexec.fault_injection import fault_env, with_faults
from docexec.fences import REPO


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
    files and nothing else of this repository, with `distdocs` reduced to docexec.copies.ALLOWED_IN_EXAMPLES. Every
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
                extra, before = set_up_as_reader(command, cwd)
                env |= extra
            if fault is not None:
                env = with_faults(env | fault_env(fault, Path(folder) / "distdocs-fault-fired"))
            records = Path(folder) / "distdocs-records"
            records.mkdir()
            env["DISTDOCS_RECORDS"] = str(records)
            result = run_command(command, timeout_s=COMMAND_TIMEOUT_S, cwd=cwd, env=env)
            result.records = [json.loads(f.read_text()) for f in sorted(records.iterdir())]
            result.disturbed = disturbed(cwd, before)
            return result
