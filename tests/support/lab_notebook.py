"""The lab notebook's command as a reader without root runs it. tests/test_lab.py runs it and checks
its three steps; tests/test_scale_model.py reads the same run (one run per launch for the session)."""

from __future__ import annotations

import os

LAB = "docs/lab/simulate-data-parallel-sync.py"


def lab_without_root() -> str:
    """The lab's command as a reader without root runs it. As root (CI), inside a user namespace of its
    own (`unshare --user`), where it is uid 65534, nobody, with no capability outside: distdocs.lab.links
    refuses it (it never tries a namespace), as it refuses any ordinary user. Dropping to nobody with
    setpriv would do the same, where nobody may run this Python; in CI's image it lives in /root."""
    return f"unshare --user python {LAB}" if os.geteuid() == 0 else f"python {LAB}"
