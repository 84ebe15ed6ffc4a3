"""Processes as Linux's /proc shows them, and how to end a group of them: what the environment report
(`distdocs.doctor`), the page runner (`docexec`) and the lab's launchers share.

A command the tests or a benchmark start runs in a session of its own (`start_new_session=True`), so
that everything it starts, torchrun's ranks and their helpers, can be found and ended together.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import NamedTuple

# How long SIGTERM has to end a session's processes before SIGKILL, and SIGKILL before we stop waiting.
KILL_GRACE_S = 3.0
# What a process that aborted at exit leaves in stderr: libstdc++'s words for an exception with no
# handler (a thread left running at interpreter shutdown), and what torchrun says of a SIGABRT.
ABORT_MARKERS = ("terminate called", "SIGABRT", "Signal 6", "core dumped")


class ProcessStat(NamedTuple):
    state: str  # R, S, Z (a zombie: ended, not yet waited for), ...
    ppid: int
    pgrp: int
    session: int


def process_stat(pid: int) -> ProcessStat | None:
    """The start of /proc/PID/stat (Linux), or None if there is no such process now. The fields that
    follow the command name, which is in parentheses and may itself hold spaces and parentheses."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return ProcessStat(fields[0], int(fields[1]), int(fields[2]), int(fields[3]))
    except (OSError, IndexError, ValueError):
        return None


def pids() -> list[int]:
    """Every process id that /proc lists now."""
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return "?"


def listening_sockets() -> list[tuple[str, int, str]]:
    """Every TCP socket listening on this machine, from Linux's /proc: (address, port, inode), the
    address as "0.0.0.0" or "::" for every interface, else in /proc's hex."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A":  # 0A: LISTEN
                continue
            address, port = fields[1].rsplit(":", 1)
            if set(address) == {"0"}:
                address = "::" if table.endswith("6") else "0.0.0.0"
            found.append((address, int(port, 16), fields[9]))
    return found


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets that process `pid` holds open (empty if /proc does not say)."""
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def session_members(sid: int) -> list[tuple[int, str]]:
    """The live processes in session `sid`, as (pid, command line); zombies are over."""
    members = []
    for pid in pids():
        stat = process_stat(pid)
        if stat is not None and stat.state != "Z" and stat.session == sid:
            members.append((pid, command_line(pid)))
    return members


def wait_for_session_to_end(sid: int, grace_s: float) -> bool:
    """Whether every process of session `sid` has ended within `grace_s` seconds."""
    deadline = time.monotonic() + grace_s
    while session_members(sid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def kill_session(sid: int) -> list[str]:
    """SIGTERM, then SIGKILL, every process of session `sid`; return what was found alive, as
    "PID COMMAND" lines."""
    found = session_members(sid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, _ in session_members(sid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if wait_for_session_to_end(sid, KILL_GRACE_S):
            break
    return [f"{pid} {cmd}" for pid, cmd in found]
