"""One run per distinct launch for a whole test session, shared by the parallel test processes of
pytest-xdist: the first to ask runs it under a file lock and saves the result, the others wait for
the lock and read it. Commands that fix the same port never overlap.

Two commands are one launch when they have the same `launch_key`: the same settings, launcher, script
and arguments, however the launcher's own options are spelled or ordered (`--nproc_per_node=2` and
`--nproc-per-node 2` are one option). A command that is not a single launch (a pipe, `&&`, `&`,
`wait`, several lines, a comment) is its own key, character for character."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import pickle
import re
import shlex
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

from docexec.commands import COMMAND_TIMEOUT_S, CommandResult, command_env, run_command
from docexec.copies import EXAMPLE_PATH, disturbed, set_up_as_reader
from docexec.fault_injection import fault_env, with_faults
from docexec.fences import REPO

# torchrun's options that take no value; each of its other options takes one (`--x=v` or `--x v`).
TORCHRUN_FLAGS = {"standalone", "no-python", "module", "m", "run-path", "virtual-local-rank"}
# python's own options that take the next word (`-X dev`, written `-Xdev` in a key); `-m MODULE` and
# `-c CODE` end its options.
PYTHON_VALUE_OPTIONS = {"-X", "-W", "-Q"}
SETTING = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
SHELL_OPERATOR = re.compile(r"[;&|()<>]+")


@dataclass(frozen=True)
class Launch:
    """One launch, in canonical parts: `NAME=value` settings (sorted), the launcher (`torchrun`,
    `python`, `python3`, `distdocs`), its own options (sorted, `--name=value` with dashes for
    underscores), the script (`examples/x.py`; `-m MODULE` or `-c CODE` for python; none for
    distdocs) and its arguments, in order."""

    settings: tuple[str, ...]
    launcher: str
    options: tuple[str, ...]
    script: tuple[str, ...]
    args: tuple[str, ...]

    @property
    def ranks(self) -> str:
        """The processes it starts on this machine: torchrun's --nproc-per-node (1 unless given, and
        perhaps `gpu`), 1 for python, "" for distdocs, whose subcommands start their own."""
        if self.launcher == "torchrun":
            given = [o.split("=", 1)[1] for o in self.options if o.startswith("--nproc-per-node=")]
            return given[-1] if given else "1"
        return "1" if self.launcher.startswith("python") else ""

    @property
    def key(self) -> str:
        return shlex.join([*self.settings, self.launcher, *self.options, *self.script, *self.args])


def parse_launch(command: str) -> Launch | None:
    """`command` as a Launch, or None when it is not one launch of torchrun, python or distdocs."""
    if "\n" in command.strip():
        return None
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    try:
        words = list(lexer)
    except ValueError:  # an unclosed quote
        return None
    if any(SHELL_OPERATOR.fullmatch(w) or w.startswith("#") for w in words):
        return None
    i = 0
    while i < len(words) and SETTING.match(words[i]):
        i += 1
    settings, rest = tuple(sorted(words[:i])), words[i:]
    if not rest or rest[0] not in ("torchrun", "python", "python3", "distdocs"):
        return None
    launcher, rest = rest[0], rest[1:]
    options = []
    if launcher == "torchrun":
        while rest and rest[0].startswith("-"):
            name, has_value, value = rest.pop(0).lstrip("-").partition("=")
            name = name.replace("_", "-")  # torchrun takes both spellings of a name, not of a value
            if not has_value and name not in TORCHRUN_FLAGS and rest:
                value, has_value = rest.pop(0), True
            options.append(f"--{name}={value}" if has_value else f"--{name}")
    elif launcher.startswith("python"):
        while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
            option = rest.pop(0)
            options.append(option + rest.pop(0) if option in PYTHON_VALUE_OPTIONS and rest else option)
    script_words = 0 if launcher == "distdocs" else 2 if rest[:1] in (["-m"], ["-c"]) else 1
    if len(rest) < script_words:
        return None
    return Launch(settings, launcher, tuple(sorted(options)), tuple(rest[:script_words]), tuple(rest[script_words:]))


def launch_key(command: str) -> str:
    """What a run is cached by: the canonical form of the launch in `command` (Launch.key), so that
    equivalent spellings share one run; the command itself when it is not a single launch."""
    launch = parse_launch(command)
    return launch.key if launch else command


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
    """Runs each distinct launch (`launch_key`) once per session, with a hard timeout: an example's
    docstring command and the same launch on a page or in a test share one run, however its launcher
    options are spelled. The first spelling asked for is the one that runs.

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
        """The result of `command`, run once per session for every spelling of its launch; with `fault`
        (fault_env), the same command with that fault injected into its ranks, a run of its own."""
        launch = launch_key(command)
        key = (launch, gpu, busy_port) if fault is None else (launch, gpu, busy_port, fault)
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
