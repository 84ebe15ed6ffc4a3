"""distdocs doctor: each trap it knows is found when the machine sets it, and not otherwise, with the
fix named; it exits non-zero only for a trap that stops the launch it is asked about."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time

import pytest

from distdocs import cli, doctor

CLEAN = {"cpu_count": 8, "cuda_available": False, "distributed_available": True, "backends": {"gloo": True}}


@pytest.fixture
def quiet(monkeypatch):
    """A machine with no traps, so that each test sets exactly one."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(doctor, "port_holder", lambda port: None)
    monkeypatch.setattr(doctor, "stale_launchers", lambda: [])
    monkeypatch.setattr(doctor, "localhost_traps", lambda: [])


def messages(traps) -> str:
    return "\n".join(f"{t.level}: {t.message} / {t.fix}" for t in traps)


@pytest.mark.fast
def test_a_clean_machine_has_no_traps(quiet):
    assert doctor.find_traps(2, report=CLEAN) == []


@pytest.mark.fast
def test_more_processes_than_cores(quiet):
    (trap,) = doctor.find_traps(16, report=CLEAN)
    assert trap.level == "warning" and "16 processes on 8 cores" in trap.message and "at most 8" in trap.fix


@pytest.mark.fast
def test_more_processes_than_gpus_is_an_error(quiet):
    one_gpu = {**CLEAN, "cuda_available": True, "gpu_count": 1}
    (trap,) = doctor.find_traps(2, report=one_gpu)
    assert trap.level == "error" and "2 processes on 1 GPU(s)" in trap.message, messages([trap])
    assert trap.fix.startswith("--nproc_per_node=1, or CUDA_VISIBLE_DEVICES=")
    assert doctor.find_traps(1, report=one_gpu) == []  # one process per GPU: fine
    assert doctor.find_traps(16, report={**one_gpu, "gpu_count": 16}) == []  # the cores do not bind on GPUs


@pytest.mark.fast
def test_oversubscribed_threads(quiet, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    (trap,) = doctor.find_traps(2, report=CLEAN)
    assert "OMP_NUM_THREADS=8 for each of 2 processes is 16 threads on 8 cores" in trap.message
    assert trap.fix.startswith("OMP_NUM_THREADS=4")
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert doctor.find_traps(2, report=CLEAN) == []  # exactly the cores: fine


@pytest.mark.fast
def test_no_gloo_is_an_error(quiet):
    traps = doctor.find_traps(2, report={**CLEAN, "backends": {"gloo": False}})
    assert [t.level for t in traps] == ["error"]


@pytest.mark.fast
def test_a_busy_port_names_the_process_that_holds_it():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        holder = doctor.port_holder(port)
    assert holder is not None and f" by pid {os.getpid()} (" in holder  # this test's own process holds it
    assert doctor.port_holder(port) is None  # closed: free again


@pytest.mark.fast
def test_localhost_on_an_unusable_ipv6_address_is_a_warning(monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [(socket.AF_INET6, 1, 6, "", ("::1", 0, 0, 0))])
    monkeypatch.setattr(doctor, "can_bind", lambda family, address: False)
    (trap,) = doctor.localhost_traps()
    assert trap.level == "warning" and "::1" in trap.message and "127.0.0.1" in trap.fix
    monkeypatch.setattr(doctor, "can_bind", lambda family, address: True)
    assert doctor.localhost_traps() == []  # IPv6 that works is fine


@pytest.mark.fast
def test_localhost_that_does_not_resolve_is_an_error(monkeypatch):
    def fail(*args, **kwargs):
        raise socket.gaierror("no such name")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    assert [t.level for t in doctor.localhost_traps()] == ["error"]


@pytest.mark.processes
def test_a_launcher_left_running_is_found_and_this_one_is_not():
    stale = subprocess.Popen(["bash", "-c", "exec -a torchrun sleep 60"])
    try:
        deadline = time.monotonic() + 10
        while not doctor.command_line(stale.pid).startswith("torchrun") and time.monotonic() < deadline:
            time.sleep(0.05)  # until bash has exec'd into the renamed sleep
        found = dict(doctor.stale_launchers())
        assert stale.pid in found and found[stale.pid].startswith("torchrun")
    finally:
        stale.kill()
        stale.wait()


@pytest.mark.fast
def test_exit_code_is_1_only_for_errors(quiet, monkeypatch, capsys):
    monkeypatch.setattr(doctor, "environment_report", lambda: {**CLEAN, "distdocs": "x", "gpu_count": 0})
    monkeypatch.setenv("OMP_NUM_THREADS", "64")
    assert cli.main(["doctor"]) == 0  # a warning: runs work, slowly
    assert "warning: OMP_NUM_THREADS=64" in capsys.readouterr().out
    monkeypatch.setattr(doctor, "environment_report", lambda: {**CLEAN, "backends": {"gloo": False}})
    assert cli.main(["doctor", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [t["level"] for t in out["traps"]] == ["error", "warning"]


@pytest.mark.fast
@pytest.mark.parametrize("argv", [["doctor", "--nproc-per-node", "0"], ["doctor", "--port", "70000"]])
def test_bad_doctor_arguments_get_one_line_and_exit_2(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
