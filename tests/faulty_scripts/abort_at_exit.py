"""Succeeds, then dies at exit with SIGABRT, as a process whose C++ threads outlive the interpreter
does: the harness must count this as a failure."""

import atexit
import os

from distdocs.runtime import distributed, print0

with distributed():
    print0("self-check passed")
atexit.register(os.abort)
