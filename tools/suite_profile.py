"""Where the test suite's time goes, from a run with `--cpu-profile FILE` (tests/plugins/cpu_profile.py).

    make test PYTEST_ARGS=--cpu-profile=/tmp/cpu.jsonl        # note the wall time make test took
    python -m tools.suite_profile /tmp/cpu.jsonl WALL_S [MACHINE_CPU_S SHARED_FOLDER] \
        > measurements/test-durations-cpu.txt

MACHINE_CPU_S is the machine's CPU over the run, from the run's closing summary line, and
SHARED_FOLDER the folder where its workers saved one result per launch (distdocs-shared, under
pytest's base temp folder): with them, the header states the floor that the launches set
(tools/launch_floor.py) beside the run's wall time.

On 2 cores the suite is bounded by the CPU its tests use (their own and their children's: torchrun,
the ranks, Chromium), not by the sum of their wall times, which overlap when test workers run side by
side. So the profile sorts by CPU seconds, by tier, by module and by test, and records the machine.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def profile(rows: list[dict], wall_s: float, top: int = 25) -> str:
    from distdocs.bench.harness import machine_info  # what every saved benchmark records

    machine, cpu = machine_info(), sum(r["cpu_s"] for r in rows)
    lines = [
        f"# {machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, {machine['date']}; "
        f"make test with --cpu-profile, {len(rows)} tests",
        f"# wall {wall_s:.0f} s ({wall_s // 60:.0f} min {wall_s % 60:.0f} s); CPU {cpu:.0f} s, "
        f"{cpu / wall_s:.2f} cores busy on average",
        "# a process's CPU counts when its parent waits for it: a command's when it ends, but a session's",
        "# browser only at the end of the session (with the last test of its worker), and now and then a",
        "# test carries the CPU of a helper process that ended while it ran",
        "",
        "CPU by tier:",
    ]
    for key, title in (("tier", None), ("module", "CPU by module:")):
        if title:
            lines += ["", title]
        totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        for r in rows:
            name = r.get("tier") or "?" if key == "tier" else r["test"].split("::")[0]
            totals[name][0] += r["cpu_s"]
            totals[name][1] += 1
        for name, (seconds, count) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
            lines.append(f"  {seconds:8.1f} s  {seconds / cpu:6.1%}  {count:4d} tests  {name}")
    lines += ["", f"the {top} tests that use the most CPU (s of CPU, s of wall):"]
    for r in sorted(rows, key=lambda r: -r["cpu_s"])[:top]:
        lines.append(f"  {r['cpu_s']:7.1f} {r['wall_s']:7.1f}  {r['test']}")
    return "\n".join(lines)


def floor_lines(wall_s: float, machine_cpu_s: float, shared: Path) -> list[str]:
    """The floor that the run's launches set, and the run's wall time against it."""
    from tools.launch_floor import count_launches, measure

    cost = measure()
    launches, started = count_launches(shared)
    floor = started * cost["import_torch_s"]
    return [
        f"# floor: {launches} launches started {started} Python processes that import torch, "
        f"{cost['import_torch_s']:.2f} s of CPU each",
        f"#   (a 2-rank torchrun launch of an empty script: {cost['torchrun_2_ranks_s']:.2f} s): {floor:.0f} s of CPU, "
        f"{floor / 2:.0f} s of wall time on 2 cores",
        f"# the machine's CPU over the run: {machine_cpu_s:.0f} s, {machine_cpu_s / 2:.0f} s on 2 cores; the wall time",
        f"#   is {wall_s / (floor / 2):.1f}x the launches' floor and {wall_s / (machine_cpu_s / 2):.2f}x the run's CPU "
        "over 2 cores",
    ]


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 4):
        print(
            "usage: python -m tools.suite_profile CPU_PROFILE.jsonl WALL_SECONDS [MACHINE_CPU_S SHARED_FOLDER]",
            file=sys.stderr,
        )
        return 2
    with open(argv[0]) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    lines = profile(rows, float(argv[1])).split("\n")
    if len(argv) == 4:
        lines[2:2] = floor_lines(float(argv[1]), float(argv[2]), Path(argv[3]))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
