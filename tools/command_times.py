"""Time every command the routes show, as a reader runs it, for the route times' rule
(hooks/reading_time.py): measurements/command-times.json.

    python -m tools.command_times measurements/command-times.json   # minutes; listed in saved-data.yml
    python -m tools.command_times --missing   # seconds: only the commands the saved file has no time for

Each command runs once, as the doc tests run it (docexec.shared_runs: copied out, with a hard timeout),
one at a time, with the GPUs hidden; a notebook runs whole, with plain python. Commands that two
machines or a SLURM cluster run are left out: the tests set their scene, and each runs in seconds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from distdocs.bench.harness import machine_info

from docexec.fences import REPO, classify
from docexec.shared_runs import CommandRuns

sys.path.insert(0, str(REPO / "hooks"))
from reading_time import COMMAND_TIMES, DOCS, NOTEBOOK, command_key, page_parts  # noqa: E402


def route_pages() -> list[str]:
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    return list(dict.fromkeys(p for route in config["extra"]["routes"] for p in route["pages"]))


def commands(page: str) -> list[tuple[str, str, int | None]]:
    """(key, command, busy port) for each command the rule counts on `page`, as the CPU runs it."""
    if page.endswith(".py"):
        return [(command_key(page, NOTEBOOK), f"python docs/{page}", None)]
    counted, found = page_parts(page)["timed_commands"], []  # what the rule times: the CPU's, shown open
    for fence in classify(DOCS / page):
        if fence.kind == "command" and fence.command in counted:
            port = int(fence.attrs["busy_port"]) if "busy_port" in fence.attrs else None
            found.append((command_key(page, fence.body.strip()), fence.command, port))
    return found


def main() -> None:
    args = sys.argv[1:]
    missing_only = "--missing" in args  # a new page's commands, timed beside the saved ones
    args = [a for a in args if a != "--missing"]
    saved = Path(args[0] if args else COMMAND_TIMES)
    known = json.loads(saved.read_text()) if missing_only else {"seconds": {}}
    runs, seconds = CommandRuns(), dict(known["seconds"])
    for page in route_pages():
        for key, command, port in commands(page):
            if key in seconds and missing_only:
                continue
            result = runs.run(command, busy_port=port)  # a command two pages show runs once
            seconds[key] = round(result.elapsed_s, 1)
            print(f"{seconds[key]:7.1f} s  exit {result.returncode}  {key}", flush=True)
    machine = known["machine"] if missing_only else machine_info()  # times added on a machine of that kind
    saved.write_text(json.dumps({"machine": machine, "seconds": seconds}, indent=1) + "\n")


if __name__ == "__main__":
    main()
