"""docs/operations/multi-node.md and docs/multi-gpu/launch-on-several-nodes.md: two launchers train to
the same weights as one, a lost node's replacement resumes from the checkpoint, in two network
namespaces as on loopback; the launch page's node commands run as written, each in the namespace
that has its address; and the cluster recipes at least parse.

The pages' loopback commands and outputs are run by test_docs.py. The network namespaces need root;
without it those tests skip, saying so."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

from docexec.commands import Background, command_env
from docexec.copies import lay_out_as_copied
from docexec.fault_injection import fault_env, with_faults
from docexec.fences import EXAMPLES, REPO, classify, page_command, page_fences
from docexec.outputs import excerpt_missing
from support.launches import CONVERT_DDP, RESUME_AFTER_KILL

pytestmark = pytest.mark.processes  # the test tier: see the testing page

SCRIPT = "examples/fault_tolerance/step01_resume_after_kill.py"
PAGE = REPO / "docs/operations/multi-node.md"
LAUNCH_PAGE = REPO / "docs/multi-gpu/launch-on-several-nodes.md"
NAMESPACES = {"a": "10.77.0.1", "b": "10.77.0.2"}


def last_line(stdout: str) -> str:
    return stdout.strip().splitlines()[-1]


def page_commands() -> list[str]:
    return [f.command for f in classify(PAGE) if f.kind == "command"]


@pytest.mark.parametrize("which", [0, 1], ids=["two-nodes", "node-loss"])
def test_two_launchers_end_where_one_machine_ends(command_runs, which):
    one = last_line(command_runs.run_ok(RESUME_AFTER_KILL).stdout)
    fence = [f for f in classify(PAGE) if f.kind == "command"][which]
    result = command_runs.run_ok(fence.command, fault=fence.attrs.get("fault"))  # the node loss: injected
    assert one.startswith("weights_sha256=") and last_line(result.stdout) == one, result.describe()
    if which == 1:
        assert "attempt 1: resumed from step 12" in result.stdout, result.describe()


@pytest.mark.holds(
    "docs/multi-gpu/launch-on-several-nodes.md",
    "It prints what `--standalone --nproc_per_node=2` printed, digit for digit: two nodes of one process are "
    "the same two ranks, on the same data in the same order.",
)
def test_two_nodes_of_one_process_print_what_one_node_of_two_prints(command_runs):
    """The launch page's loopback run of two launchers against the convert page's run: the same two
    ranks, so the same output to the digit (both runs are the ones their pages show)."""
    two_nodes = page_command("docs/multi-gpu/launch-on-several-nodes.md", "--rdzv_id=convert")
    assert command_runs.run_ok(two_nodes).stdout == command_runs.run_ok(CONVERT_DDP).stdout


def test_torchft_groups_train_on_and_end_with_the_same_weights(command_runs):
    """The page's torchft command (run once for this test and test_docs): group 1 dies and heals, group 0
    trains on; both end with one hash, and group 0's record shows a step that counted its batch alone."""
    (fence,) = [f for f in classify(PAGE) if f.kind == "command" and "step04_torchft.py" in f.command]
    result = command_runs.run_ok(fence.command, fault=fence.attrs.get("fault"))  # group 1's loss: injected
    hashes = re.findall(r"^\[group (\d)\] weights_sha256=(\w+)$", result.stdout, re.M)
    assert sorted(g for g, _ in hashes) == ["0", "1"] and len({h for _, h in hashes}) == 1, result.describe()
    counted = re.search(r"^groups whose batches counted, step by step: (.+)$", result.stdout, re.M)
    steps = counted[1].split() if counted else []
    assert len(steps) == 40 and "0" in steps and "0+1" in steps, result.describe()
    firsts = [int(n) for n in re.findall(r"^\[group 1\] first step: (\d+), with the weights", result.stdout, re.M)]
    assert "[group 1] SIGKILL at step 12" in result.stdout and firsts and firsts[-1] >= 12, result.describe()


def test_slurm_recipe_parses_and_launches_the_example():
    script = EXAMPLES / "multi_node/slurm_job.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    assert "#SBATCH --requeue" in text and "--rdzv_backend=c10d" in text
    assert SCRIPT in text and (REPO / SCRIPT).is_file()
    # SLURM >= 22.05: srun does not inherit sbatch's --cpus-per-task; the step that starts torchrun
    # asks for it again, or its task counts as one CPU, and a cluster that binds tasks puts it on one core
    launch = next(line for line in text.splitlines() if line.startswith("srun ") and "torchrun" in line)
    assert "#SBATCH --cpus-per-task=" in text and '--cpus-per-task="$SLURM_CPUS_PER_TASK"' in launch


SCHEMA = REPO / "tests/schemas/kubeflow-pytorchjob-v1.9.0.json"  # "source" in it says where it comes from


def unknown_fields(value, schema: dict, path: str = "") -> list[str]:
    """The fields of `value` that `schema` does not name: what the API server drops without a word
    (or rejects, with `kubectl apply --validate=strict`). A misspelled key is one of them."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    found = []
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            if key not in schema["properties"]:
                found.append(f"{path}.{key}")
            else:
                found += unknown_fields(item, schema["properties"][key], f"{path}.{key}")
    elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key, item in value.items():
            found += unknown_fields(item, schema["additionalProperties"], f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            found += unknown_fields(item, schema["items"], f"{path}[{i}]")
    return found


def schema_problems(job: dict) -> list[str]:
    """What the training operator's CustomResourceDefinition says is wrong with `job`: JSON-schema
    errors, then unknown fields. metadata is the API server's to check, not the CRD's."""
    schema = json.loads(SCHEMA.read_text())["schema"]
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(job)]
    return errors + unknown_fields({k: v for k, v in job.items() if k != "metadata"}, schema)


def test_kubernetes_recipe_is_valid_against_the_training_operators_schema():
    job = yaml.safe_load((EXAMPLES / "multi_node/pytorchjob.yaml").read_text())
    assert schema_problems(job) == []
    # The check can fail: a wrong type, a missing required field and a misspelled key each do.
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    for broken, expected in [
        ({"replicas": "two"}, "'two' is not of type 'integer'"),
        ({"template": {"spec": {"containers": [{"image": "x"}]}}}, "'name' is a required property"),
        ({"restartpolicy": "OnFailure"}, ".spec.pytorchReplicaSpecs.Worker.restartpolicy"),
    ]:
        bad = json.loads(json.dumps(job))
        bad["spec"]["pytorchReplicaSpecs"]["Worker"] = worker | broken
        assert any(expected in p for p in schema_problems(bad)), (broken, schema_problems(bad))


def test_kubernetes_recipe_is_a_valid_pytorchjob():
    job = yaml.safe_load((EXAMPLES / "multi_node/pytorchjob.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    policy, worker = job["spec"]["elasticPolicy"], job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert policy["rdzvBackend"] == "c10d" and policy["minReplicas"] <= worker["replicas"] <= policy["maxReplicas"]
    assert worker["restartPolicy"] == "OnFailure"
    (container,) = worker["template"]["spec"]["containers"]
    assert container["command"][0] == "torchrun" and SCRIPT in container["command"]
    assert (REPO / SCRIPT).is_file()


# --- two nodes in two network namespaces, joined by a veth pair (root only) ---


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def namespaces():
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("network namespaces need root and iproute2; the loopback tests cover the rest")
    suffix = str(os.getpid())
    names = {k: f"distdocs-{k}-{suffix}" for k in NAMESPACES}
    try:
        for name in names.values():
            sh("ip", "netns", "add", name)
        sh("ip", "link", "add", "veth-a", "netns", names["a"], "type", "veth", "peer", "veth-b", "netns", names["b"])
        for k, name in names.items():  # each end is eth0 inside its namespace, as on two machines
            sh("ip", "-n", name, "link", "set", f"veth-{k}", "name", "eth0")
            sh("ip", "-n", name, "addr", "add", f"{NAMESPACES[k]}/24", "dev", "eth0")
            sh("ip", "-n", name, "link", "set", "eth0", "up")
            sh("ip", "-n", name, "link", "set", "lo", "up")
    except subprocess.CalledProcessError as e:
        for name in names.values():
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        pytest.skip(f"cannot create network namespaces here: {e.stderr.decode().strip()}")
    yield names
    for name in names.values():  # deleting a namespace deletes its end of the veth pair, and so both
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def launcher(
    names: dict, node: str, run_id: str, ckpt: Path, extra: list[str], log: Path, fault: dict | None = None
) -> Background:
    """One node's torchrun in its namespace; `fault`, from fault_env, injected into its ranks."""
    env = command_env(gpu=False) | {"GLOO_SOCKET_IFNAME": "eth0", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    if fault:
        env = with_faults(env | fault)
    torchrun = str(Path(sys.executable).parent / "torchrun")
    command = [
        "ip", "netns", "exec", names[node], torchrun, "--nnodes=2", "--nproc_per_node=1",
        "--rdzv_backend=c10d", f"--rdzv_endpoint={NAMESPACES['a']}:29400", f"--rdzv_id={run_id}",
        f"--rdzv_conf=is_host={1 if node == 'a' else 0}", f"--local_addr={NAMESPACES[node]}", "--max-restarts=1",
        str(REPO / SCRIPT), "--ckpt-dir", str(ckpt), *extra,
    ]  # fmt: skip
    return Background(command, log, env=env)


def finish(runs: list[Background], timeout_s: float = 150) -> list[int]:
    """The launchers' exit codes, once all have ended; whatever they leave is killed, and a launcher
    still running after `timeout_s` too, failing the test."""
    deadline = time.monotonic() + timeout_s
    try:
        return [run.wait(timeout_s=max(1, deadline - time.monotonic())) for run in runs]
    finally:
        for run in runs:
            run.stop()


def test_two_namespaces_end_where_one_machine_ends(namespaces, command_runs, tmp_path):
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    a = launcher(namespaces, "a", "ns-two", tmp_path / "ckpt", [], logs[0])
    b = launcher(namespaces, "b", "ns-two", tmp_path / "ckpt", [], logs[1])
    codes = finish([a, b])
    text = logs[0].read_text() + logs[1].read_text()
    assert codes == [0, 0], text[-3000:]
    one = last_line(command_runs.run_ok(RESUME_AFTER_KILL).stdout)
    assert one in text and "self-check passed" in text, text[-3000:]


def test_a_lost_namespace_node_is_replaced_and_the_job_resumes(namespaces, command_runs, tmp_path):
    kill = fault_env("kill-rank=1 kill-at-step=13 kill-launcher", tmp_path / "fault-fired")
    logs = [tmp_path / "a.log", tmp_path / "b.log", tmp_path / "b2.log"]
    a = launcher(namespaces, "a", "ns-loss", tmp_path / "ckpt", [], logs[0], kill)
    # Ranks follow the launchers' addresses: 10.77.0.1 is rank 0, on the node that survives.
    b = launcher(namespaces, "b", "ns-loss", tmp_path / "ckpt", [], logs[1], kill)
    first_b = finish([b])
    replacement = launcher(namespaces, "b", "ns-loss", tmp_path / "ckpt", [], logs[2], kill)  # as a scheduler would
    codes = finish([a, replacement])
    text = "".join(log.read_text() for log in logs)
    assert first_b != [0] and codes == [0, 0], text[-3000:]
    assert "[rank 1] SIGKILL at step 13" in text and "attempt 1: resumed from step 12" in text, text[-3000:]
    assert last_line(command_runs.run_ok(RESUME_AFTER_KILL).stdout) in text, text[-3000:]


def test_the_launch_pages_node_commands_run_as_written_in_two_namespaces(
    namespaces, command_runs, tmp_path, record_property
):
    """Each node command runs in the namespace that has its address, all at once, as two machines would;
    the first node prints what the page's loopback run prints."""
    fences = page_fences("docs/multi-gpu/launch-on-several-nodes.md", "node command")
    by_address = {address: name for name, address in zip(namespaces.values(), NAMESPACES.values())}
    assert sorted(f.attrs["node"] for f in fences) == sorted(by_address), [f.where for f in fences]
    loopback = next(f.command for f in classify(LAUNCH_PAGE) if f.kind == "command")
    procs, logs = [], []
    for i, fence in enumerate(fences):
        folder = tmp_path / f"node{i}"  # each machine has its own copy of the script, and its own disk
        folder.mkdir()
        env = command_env(gpu=False) | lay_out_as_copied(fence.command, folder)
        logs.append(tmp_path / f"node{i}.log")
        command = ["ip", "netns", "exec", by_address[fence.attrs["node"]], "bash", "-c", fence.command]
        procs.append(Background(command, logs[-1], cwd=folder, env=env))
    codes = finish(procs)
    texts = [log.read_text() for log in logs]
    assert codes == [0] * len(procs), "\n".join(t[-2000:] for t in texts)
    expected = command_runs.run_ok(loopback).stdout.strip()
    assert expected and expected in texts[0], texts[0][-2000:]
    for _ in fences:
        record_property("executed", "shell commands")


def netns_pids(name: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=30).stdout
    return [int(pid) for pid in out.split()]


def wait_for(what: str, ready, runs: list[Background], timeout_s: float = 120) -> None:
    """Poll `ready()` until it holds; fail, saying `what`, if a run ends first or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        ended = [run for run in runs if run.proc.poll() is not None]
        assert not ended and time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)


def test_the_elastic_node_commands_shrink_when_a_node_is_lost_and_grow_when_it_returns(
    namespaces, tmp_path, record_property
):
    """The page's two elastic node commands, each in the namespace with its address, from one shared
    folder: a random moment after the checkpoint at step 5, every process of the second node is
    SIGKILLed; once the first trains alone, the second command runs again. Both end with 0, the first
    node's log goes 2 -> 1 -> 2 ranks and passes the one-process check, and the page's excerpt is
    in it, numbers aside."""
    fences = [f for f in classify(PAGE) if f.kind in ("node command", "node excerpt")]
    commands = [f for f in fences if f.kind == "node command"]
    (excerpt,) = [f for f in fences if f.kind == "node excerpt"]
    by_address = {address: name for name, address in zip(namespaces.values(), NAMESPACES.values())}
    assert [f.attrs["node"] for f in commands] == list(by_address), [f.where for f in commands]
    seed = int(os.environ.get("DISTDOCS_KILL_SEED", "0"))
    delay = random.Random(seed + 2).uniform(0.5, 3)
    env = command_env(gpu=False) | lay_out_as_copied(commands[0].command, tmp_path)

    def start(i: int, log: Path) -> Background:
        args = ["ip", "netns", "exec", by_address[commands[i].attrs["node"]], "bash", "-c", commands[i].command]
        return Background(args, log, cwd=tmp_path, env=env)

    logs = [tmp_path / "first.log", tmp_path / "second.log", tmp_path / "second-again.log"]
    first, second = start(0, logs[0]), start(1, logs[1])
    runs = [first, second]
    try:
        wait_for("a checkpoint at step 5", lambda: (tmp_path / "elastic/step_000005").is_dir(), runs)
        time.sleep(delay)
        lost = netns_pids(by_address[commands[1].attrs["node"]])
        for pid in lost:  # the node loses power: every process at once, no goodbye
            os.kill(pid, signal.SIGKILL)
        assert second.wait(timeout_s=30) != 0 and lost
        wait_for("the first node training alone", lambda: "on 1 rank:" in logs[0].read_text(), [first])
        runs.append(start(1, logs[2]))
        codes = finish([first, runs[2]])
    finally:
        for run in runs:
            run.stop()
    text = logs[0].read_text()
    why = (
        f"DISTDOCS_KILL_SEED={seed}, SIGKILL {delay:.1f} s after step 5\n" + text[-3000:] + logs[2].read_text()[-1500:]
    )
    assert codes == [0, 0], why
    sizes = re.search(r"world sizes 2 from step 0 -> 1 from step (\d+) -> 2 from step (\d+)\n", text)
    assert sizes and 5 <= int(sizes[1]) < int(sizes[2]) < 40, why
    assert "self-check passed" in text, why
    problem = excerpt_missing(excerpt.body, text)
    assert problem is None, f"{excerpt.where}: {problem}\n{why}"
    assert not any(netns_pids(name) for name in namespaces.values()), "processes outlived the run"
    for _ in commands:
        record_property("executed", "shell commands")
