"""The SLURM jobs of tests/test_slurm.py, run once per session in one cluster: every event's records,
made under a lock that the pytest-xdist workers share. tests/plugins/background.py starts the run when
the session begins (start_in_background); the tests' fixture reads its records (run_once)."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path

from distdocs.bench import slurm as bench
from distdocs.lab import links
from distdocs.lab.slurm import Cluster, SlurmError, check_can_run

from docexec.shared_runs import file_lock

EVENTS = ("none", "node-loss", "preempt", "usr1-to-steps")


def run_every_event(folder: Path, seed: int, environ: dict[str, str] | None = None) -> dict:
    rng = random.Random(seed)
    records = {}
    cluster = Cluster(folder / "cluster", environ=environ)
    try:
        cluster.start()
        (folder / "config").mkdir(parents=True)
        config = bench.shell(cluster, bench.CONFIG, folder / "config")
        records["config"] = {"commands": [bench.CONFIG], "output": config}
        for event in EVENTS:
            records[event] = bench.run_job(cluster, folder / event, event, rng, slow=event != "none")
        records["converted"] = bench.run_job(
            cluster, folder / "converted", "none", rng, submit=bench.CONVERTED_SUBMIT, example=bench.CONVERTED
        )
    finally:
        cluster.stop()
    time.sleep(0.5)
    records["left"] = {
        "processes": cluster.leftovers(),
        "namespaces": [ns for ns in cluster.net.namespaces() if (links.NETNS_DIR / ns).exists()],
    }
    return records


def run_once(folder: Path, environ: dict[str, str] | None = None) -> dict:
    """Every event's records, from the one run of this test session: made now, under a lock that the
    pytest-xdist workers share, unless another worker made it or is making it (then wait for it). The
    jobs get `environ` (default: this process's, now)."""
    seed = int(os.environ["DISTDOCS_KILL_SEED"])
    done = folder / "records.json"
    with file_lock(folder.parent / "slurm.lock"):
        if not done.exists():
            folder.mkdir(parents=True, exist_ok=True)
            done.write_text(json.dumps(run_every_event(folder, seed, environ)))
    return json.loads(done.read_text()) | {"seed": seed}


def start_in_background(folder: Path) -> threading.Thread | None:
    """The run takes minutes of waiting for SLURM and little CPU: tests/plugins/background.py starts it
    in a thread of the first worker when the session begins, so that no worker sits waiting for it.
    None where SLURM cannot run here (the tests then skip, saying why). The jobs get the environment
    the session began with: the worker's tests go on in its main thread, and one that sets a variable
    (monkeypatch, or an example run in-process) would otherwise reach whichever job sbatch submitted
    meanwhile."""
    try:
        check_can_run()
    except SlurmError:
        return None
    environ = dict(os.environ)
    thread = threading.Thread(target=run_once, args=(folder, environ), name="slurm-runs", daemon=True)
    thread.start()
    return thread
