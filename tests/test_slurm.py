"""examples/multi_node/slurm_job.sh under a real slurmctld: the launch page's job script, submitted
with sbatch to a cluster of three nodes in network namespaces (distdocs.lab.slurm), runs the
fault-tolerant example across two of them and ends on the one-machine hash, and runs the converted
script of the convert page as the launch page shows. Then, at a random moment
each: a node is lost and SLURM requeues the job onto the nodes left; the job is preempted with USR1
to its batch shell, checkpoints on SIGTERM, requeues and resumes; and USR1 sent to the steps instead
kills torchrun, and the job fails. Nothing the cluster started is left running.

Every job runs once, in one cluster, under a lock that the pytest-xdist workers share, started in the
background when the session begins (tests/support/slurm_runs.py, which tests/plugins/background.py
starts); the tests read the records. Needs root and the SLURM packages (`make slurm` installs them);
without them the tests skip, saying so. `make slurm-check` runs this file alone."""

from __future__ import annotations

import os

import pytest

from distdocs.lab.slurm import Cluster, SlurmError, check_can_run

from docexec.fences import REPO, classify
from docexec.outputs import DIGEST, excerpt_missing
from support.launches import RESUME_AFTER_KILL
from support.slurm_runs import EVENTS, run_once

pytestmark = pytest.mark.processes


@pytest.fixture(scope="session")
def slurm_runs(tmp_path_factory, workers_folder) -> dict:
    try:
        check_can_run()
    except SlurmError as e:
        pytest.skip(str(e))
    return run_once((workers_folder or tmp_path_factory.mktemp("slurm")) / "slurm")


def describe(record: dict, seed: int) -> str:
    """A run's record and the end of its output, for a failing assertion."""
    shown = {k: v for k, v in record.items() if k != "output"}
    return f"DISTDOCS_KILL_SEED={seed}: {shown}\n{record['output'][-3000:]}"


def test_the_job_script_runs_across_two_nodes(slurm_runs, command_runs):
    run = slurm_runs["none"]
    one = command_runs.run_ok(RESUME_AFTER_KILL).stdout.strip().splitlines()[-1]
    assert run["state"] == "COMPLETED" and run["restarts"] == 0, describe(run, slurm_runs["seed"])
    assert run["nodes_after"] == "node[1-2]", describe(run, slurm_runs["seed"])
    assert "self-check passed" in run["output"] and f"weights_sha256={run['hash']}" == one


def test_a_lost_node_is_requeued_onto_the_nodes_left_and_resumes_bitwise(slurm_runs):
    run, none = slurm_runs["node-loss"], slurm_runs["none"]
    why = describe(run, slurm_runs["seed"])
    assert not run["missing"], why
    assert run["state"] == "COMPLETED" and run["restarts"] == 1, why
    assert run["nodes_before"] == "node[1-2]" and run["nodes_after"] == "node[1,3]", why
    assert run["hash"] == none["hash"] and "self-check passed" in run["output"], why
    assert run["resumed_from"] > 0 and f"resumed from step {run['resumed_from']}" in run["output"], why
    m = run["moments_s"]
    assert 0 < m["down"] <= m["requeued"] <= m["allocated"] <= m["resumed"], why


def test_a_preempted_job_checkpoints_on_the_signal_requeues_and_resumes_there(slurm_runs):
    run, none = slurm_runs["preempt"], slurm_runs["none"]
    why = describe(run, slurm_runs["seed"])
    assert not run["missing"], f"no line for {run['missing']}: a preempted job that did not save?\n{why}"
    assert run["state"] == "COMPLETED" and run["restarts"] == 1, why
    assert "USR1 reached the batch shell" in run["output"], why
    # The checkpoint is the one the signal caused, not a periodic one, and the job resumed from it.
    assert run["checkpoint_step"] == run["resumed_from"] > 0, why
    assert run["hash"] == none["hash"] and "self-check passed" in run["output"], why
    m = run["moments_s"]
    assert 0 < m["trapped"] <= m["checkpoint"] <= m["requeued"] <= m["allocated"] <= m["resumed"], why


def test_usr1_sent_to_the_steps_kills_torchrun_and_the_job_fails_unrequeued(slurm_runs):
    run = slurm_runs["usr1-to-steps"]
    why = describe(run, slurm_runs["seed"])
    assert run["state"] == "FAILED" and run["restarts"] == 0 and run["hash"] is None, why
    assert "User defined signal 1" in run["output"] and "USR1 reached the batch shell" not in run["output"], why
    assert "SIGTERM: saved a checkpoint" not in run["output"], why


def test_the_template_runs_the_converted_script_as_the_launch_page_shows(slurm_runs, command_runs):
    """The converted script keeps no checkpoints: with CKPT_DIR= it gets no --ckpt-dir, takes its own
    flag from TRAIN_ARGS, and prints on two nodes what it prints as two processes on one machine."""
    run = slurm_runs["converted"]
    assert run["state"] == "COMPLETED" and run["restarts"] == 0, describe(run, slurm_runs["seed"])
    one = command_runs.run_ok("torchrun --standalone --nproc_per_node=2 examples/convert/step02_ddp.py").stdout
    epochs = [line for line in one.splitlines() if line.startswith("epoch ")]
    assert epochs and all(line in run["output"] for line in epochs), describe(run, slurm_runs["seed"])
    assert "self-check passed" in run["output"], describe(run, slurm_runs["seed"])


def test_nothing_the_cluster_started_is_left(slurm_runs):
    assert slurm_runs["left"] == {"processes": [], "namespaces": []}


def test_a_cluster_that_cannot_start_says_why_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SlurmError, match=r"^a SLURM cluster in network namespaces needs root$"):
        Cluster(tmp_path).start()


PAGE = "docs/operations/multi-node.md"
LAUNCH_PAGE = "docs/multi-gpu/launch-on-several-nodes.md"


def test_the_pages_show_the_commands_that_ran_and_lines_of_their_logs(slurm_runs):
    """Every slurm command on the two pages is one that a job above ran, exactly; every excerpt after
    one is in the log of the job that the command ended (numbers and digests aside)."""
    fences = [f for page in (PAGE, LAUNCH_PAGE) for f in classify(REPO / page) if f.kind.startswith("slurm ")]
    runs = {slurm_runs[e]["commands"][-1]: slurm_runs[e] for e in (*EVENTS, "config", "converted")}
    shown = [f.command for f in fences if f.kind == "slurm command"]
    assert sorted(shown) == sorted(runs), "the pages' slurm commands are not the ones the tests ran"
    for fence in (f for f in fences if f.kind == "slurm excerpt"):
        run = runs[fence.attrs["after"]]
        problem = excerpt_missing(DIGEST.sub("<sha256>", fence.body), DIGEST.sub("<sha256>", run["output"]))
        assert problem is None, f"{fence.where}: {problem}\n{describe(run, slurm_runs['seed'])}"


def test_the_quiz_on_signals_says_what_the_runs_did(slurm_runs):
    text = (REPO / PAGE).read_text()
    quiz = text[text.index("<quiz>\nA SLURM job runs") :].split("</quiz>")[0]
    right = [line for line in quiz.splitlines() if line.startswith("- [x]")]
    assert len(right) == 1 and "scancel --batch --signal=USR1" in right[0]
    assert "- [ ] `scancel --signal=USR1 JOBID`" in quiz
    preempt, to_steps = slurm_runs["preempt"], slurm_runs["usr1-to-steps"]
    assert preempt["commands"][-1].startswith("scancel --batch --signal=USR1") and preempt["restarts"] == 1
    assert to_steps["commands"][-1].startswith("scancel --signal=USR1") and to_steps["state"] == "FAILED"
