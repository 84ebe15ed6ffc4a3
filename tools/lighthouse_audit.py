"""`make audit`: Lighthouse's performance, accessibility and best-practices scores for a page of each
kind on the built site, on a phone (Lighthouse's default: a mid-range phone on a slow 4G link,
simulated) and on a desktop, served gzipped from 127.0.0.1 as GitHub Pages serves it. Each page is
audited --runs times (3 by default) and the median kept, as Lighthouse's own guidance on variability
advises, with every run's performance score and the median total blocking time, the metric that
moves the score here.
Saves measurements/lighthouse.{json,txt}, with the machine; the testing page shows the table.

Needs node and npm: Lighthouse 12.2.3 is installed into .audit/ on first use (13 wants Node 22).
Without node it says so in one line and exits 0. Not part of `make test`: it takes minutes, and
scores move with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.browser import CHROMIUM, CHROMIUM_ARGS, serve_directory

REPO = Path(__file__).resolve().parent.parent
LIGHTHOUSE_VERSION = "12.2.3"
PREFIX = REPO / ".audit"
PAGES = [
    "",
    "lesson/collectives/",
    "deep-dives/mixed-precision/",
    "operations/checkpoint-and-resume/",
    "lab/simulate-data-parallel-sync/",
    "lab/scaling-explorer/",
    "reference/quiz/",
    "reference/api/",
]
CATEGORIES = ("performance", "accessibility", "best-practices")
FORM_FACTORS = {"phone": [], "desktop": ["--preset=desktop"]}


def lighthouse() -> Path:
    binary = PREFIX / "node_modules" / ".bin" / "lighthouse"
    if not binary.exists():
        PREFIX.mkdir(exist_ok=True)
        package = f"lighthouse@{LIGHTHOUSE_VERSION}"
        npm = ["npm", "install", "--prefix", str(PREFIX), "--no-audit", "--no-fund", "--save-exact", package]
        subprocess.run(npm, check=True, stdout=subprocess.DEVNULL)
    return binary


def audit(binary: Path, url: str, flags: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run(
            [str(binary), url, "--quiet", "--output=json", f"--output-path={report}",
             f"--only-categories={','.join(CATEGORIES)}", f"--chrome-flags={' '.join(CHROMIUM_ARGS)}", *flags],
            check=True,
            env=os.environ | {"CHROME_PATH": CHROMIUM},
            timeout=180,
        )  # fmt: skip
        result = json.loads(report.read_text())
    scores = {name: round(100 * result["categories"][name]["score"]) for name in CATEGORIES}
    return scores | {"tbt_ms": round(result["audits"]["total-blocking-time"]["numericValue"])}


def median_of(runs: list[dict[str, float]]) -> dict:
    """The median of each score over the runs, the performance scores themselves, and the median
    total blocking time."""
    record = {c: statistics.median(r[c] for r in runs) for c in CATEGORIES}
    record["performance_runs"] = [r["performance"] for r in runs]
    record["tbt_ms"] = statistics.median(r["tbt_ms"] for r in runs)
    return record


def table(records: list[dict]) -> str:
    lines = [
        f"{'page':<34} {'form factor':<12} {'performance':>11} {'(runs)':>12} {'blocking ms':>11} "
        f"{'accessibility':>13} {'best practices':>14}"
    ]
    for r in records:
        runs = ",".join(str(x) for x in r["performance_runs"])
        lines.append(
            f"{r['page'] or '(home)':<34} {r['form_factor']:<12} {r['performance']:>11g} {runs:>12} "
            f"{r['tbt_ms']:>11g} {r['accessibility']:>13g} {r['best-practices']:>14g}"
        )
    for form in FORM_FACTORS:
        mine = [r for r in records if r["form_factor"] == form]
        medians = [statistics.median(r[c] for r in mine) for c in CATEGORIES]
        tbt = statistics.median(r["tbt_ms"] for r in mine)
        lines.append(
            f"{'median':<34} {form:<12} {medians[0]:>11g} {'':>12} {tbt:>11g} {medians[1]:>13g} {medians[2]:>14g}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=REPO / "site")
    parser.add_argument("--save", type=Path, default=REPO / "measurements" / "lighthouse")
    parser.add_argument("--runs", type=int, default=3, help="audits of each page; the median is kept")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if shutil.which("node") is None or shutil.which("npm") is None:
        print("audit skipped: Lighthouse needs node and npm, and this machine has none")
        return 0
    if not (args.site / "index.html").is_file():
        print(f"error: no built site in {args.site}; run make build first", file=sys.stderr)
        return 1
    binary = lighthouse()
    records = []
    with serve_directory(args.site, compress=True) as base:
        for page in PAGES:
            for form, flags in FORM_FACTORS.items():
                runs = [audit(binary, base + page, flags) for _ in range(args.runs)]
                record = {"page": page, "form_factor": form, **median_of(runs)}
                records.append(record)
                print(f"{page or '(home)'} {form}: {record}", flush=True)
    from distdocs.bench.harness import machine_info  # the one record of the machine; it imports torch

    chromium = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout.strip()
    host = machine_info()
    machine = {"cpu": host["cpu"], "cores": host["cores"], "browser": chromium, "lighthouse": LIGHTHOUSE_VERSION}
    machine["runs"] = args.runs
    machine["date"] = host["date"]
    text = f"# {host['cpu']}, {host['cores']} cores, {chromium}, Lighthouse {LIGHTHOUSE_VERSION}, {host['date']}, "
    text += f"median of {args.runs} runs\n"
    text += table(records)
    args.save.with_suffix(".json").write_text(json.dumps({"machine": machine, "records": records}, indent=2) + "\n")
    args.save.with_suffix(".txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
