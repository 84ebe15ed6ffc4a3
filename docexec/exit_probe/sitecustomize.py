"""The exit probe, loaded by every Python process that the doc tests launch (docexec/commands.py puts
this folder first on PYTHONPATH; Python imports `sitecustomize` at start-up).

At exit, after the program's own atexit handlers, a process that finished its work (no uncaught
exception) and still runs gloo's worker threads says so on stderr. Such threads mean a process group
outlived destroy_process_group: gloo stops them only when the group is freed, and one that releases a
tensor while the interpreter shuts down aborts the process (`terminate called without an active
exception`). The soak (`make exit-soak`) counts those aborts; this probe sees their cause in every
single run, deterministically."""

import atexit
import os
import sys

MESSAGE = "distdocs exit probe: {} gloo threads outlived destroy_process_group"


def _report_gloo_threads() -> None:
    if hasattr(sys, "last_value"):  # it failed with an exception, whose traceback may hold the group
        return
    try:
        tasks = [t for t in os.listdir("/proc/self/task") if int(t) != os.getpid()]
        names = []
        for t in tasks:
            with open(f"/proc/self/task/{t}/comm") as f:
                names.append(f.read().strip())
    except OSError:  # not Linux, or a thread ended while we read: say nothing
        return
    gloo = [n for n in names if n.startswith(("pt_gloo", "gloo_"))]
    if gloo:
        sys.stderr.write(MESSAGE.format(len(gloo)) + "\n")
        sys.stderr.flush()


atexit.register(_report_gloo_threads)  # registered first, so it runs after every other handler
