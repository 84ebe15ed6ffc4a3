"""A SLURM cluster on one machine: slurmctld on a controller node and one slurmd per compute node, each
node a network namespace of distdocs.lab.links with a host name of its own, so that sbatch, srun and
scontrol run unchanged, as on a real cluster.

    with Cluster(tmp_path, nodes=3) as cluster:
        cluster.client("sbatch", "--parsable", "job.sh", cwd=tmp_path)  # '1': the job's id
        cluster.job(1)["JobState"]  # 'RUNNING', then 'COMPLETED'

Every node is a namespace with its own network (an address on one switch), host name (UTS namespace)
and /etc/hosts (mount namespace) that names every node, so host names resolve as on a cluster. One
munged, on the controller, signs every message for all of them through its socket file. The nodes
share this machine's file system, which stands in for the shared one that checkpoints need. Each
slurmd is a daemon of its own in a node of its own, so this works without SLURM's
--enable-multiple-slurmd build option.

What differs from a real cluster: every node runs on the same CPUs; SLURM tracks a job's processes
by their parents (proctrack/linuxproc), not by cgroups, which the nodes would have to share; and
three timers are shortened, so that a test waits seconds, not minutes: SlurmdTimeout (a silent
node is down after 10 s, not 300), cred_expire (a requeued job may start after 10 s, not 120) and
sched_interval (the scheduler's pass every 5 s, not 60).

Needs root, iproute2 and the Debian packages in PACKAGES. `SlurmError` says in one line why a
cluster cannot start here. Everything started runs inside the cluster's namespaces, and is stopped
when the `with` block ends, however it ends; a cluster whose process was killed is removed with its
namespaces by the next one built on the machine (distdocs.lab.links.remove_orphans).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from distdocs.lab import links

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
DAEMONS = ("munged", "slurmctld", "slurmd")
CONTROLLER = "ctl"
CPUS_PER_NODE = 32  # what each node declares, as a GPU node of the job script's header would; all share this machine's


class SlurmError(RuntimeError):
    """Why a SLURM cluster cannot start or run here, in one line."""


def check_can_run() -> None:
    """Raise SlurmError unless this process can start a cluster: root, the daemons, namespaces."""
    if os.geteuid() != 0:
        raise SlurmError("a SLURM cluster in network namespaces needs root")
    missing = [d for d in (*DAEMONS, "sbatch", "nsenter", "unshare") if not shutil.which(d)]
    if missing:
        raise SlurmError(f"{', '.join(missing)} not found: apt-get install {' '.join(PACKAGES)} (make slurm)")
    try:
        links.check_can_build()
    except links.LinkError as e:
        raise SlurmError(str(e)) from None


class Cluster:
    """A controller and `nodes` compute nodes, node1..nodeN, in one partition, with their files
    (configuration, state, logs, spool) under `root`. Use it as a context manager."""

    def __init__(
        self,
        root: str | os.PathLike,
        nodes: int = 3,
        cred_expire_s: int = 10,
        slurmd_timeout_s: int = 10,
        sched_interval_s: int = 5,
        environ: dict[str, str] | None = None,
    ):
        if not 1 <= nodes <= 16:
            raise ValueError(f"nodes: {nodes}, expected 1 to 16")
        self.root = Path(root).resolve()
        # What the daemons and the jobs see (sbatch passes its environment on to the job): fixed when
        # the cluster is made, whatever the process it lives in sets in os.environ later.
        self.environ = dict(os.environ if environ is None else environ)
        self.names = [f"node{k}" for k in range(1, nodes + 1)]
        self.net = links.Network(nodes=nodes + 1)  # node 0 is the controller
        self.cred_expire_s, self.slurmd_timeout_s = cred_expire_s, slurmd_timeout_s
        self.sched_interval_s = sched_interval_s
        self.conf = self.root / "slurm.conf"
        self.socket = self.root / "munge.socket"
        self._daemons: list[tuple[str, subprocess.Popen]] = []
        self._inodes: set[int] = set()  # of the namespaces, kept after stop() to look for what escaped it

    # --- the nodes ---

    def address(self, name: str) -> str:
        return self.net.node(0 if name == CONTROLLER else self.names.index(name) + 1).address

    def namespace(self, name: str) -> str:
        return self.net.node(0 if name == CONTROLLER else self.names.index(name) + 1).namespace

    def env(self) -> dict:
        """The environment a SLURM command needs to find this cluster."""
        return {**self.environ, "SLURM_CONF": str(self.conf)}

    def _on_node(self, name: str, args: list[str]) -> list[str]:
        """`args` run on node `name`: in its network, with its host name and its /etc/hosts. nsenter
        rather than `ip netns exec`, which remounts /sys and so hides the cgroups slurmd looks for."""
        setup = f'hostname {name} && mount --bind "{self.root}/hosts" /etc/hosts && exec "$@"'
        return ["nsenter", f"--net=/run/netns/{self.namespace(name)}", "unshare", "--uts", "--mount",
                "sh", "-c", setup, "sh", *args]  # fmt: skip

    # --- start and stop ---

    def start(self) -> Cluster:
        check_can_run()
        self.root.mkdir(parents=True, exist_ok=True)
        self.net.build()
        self._inodes = {os.stat(links.NETNS_DIR / ns).st_ino for ns in self.net.namespaces()}
        try:
            self._write_files()
            r = self.root
            self._daemon(
                "munged",
                [  # in the controller's namespace, so that removing the namespaces stops it too
                    "nsenter",
                    f"--net=/run/netns/{self.namespace(CONTROLLER)}",
                    "munged",
                    "--foreground",
                    "--force",
                    f"--socket={self.socket}",
                    f"--key-file={r}/munge.key",
                    f"--pid-file={r}/munged.pid",
                    f"--seed-file={r}/munged.seed",
                    f"--log-file={r}/munged.log",
                ],
            )
            self._wait_for(self.socket.exists, 10, "munged did not open its socket")
            self._daemon("slurmctld", self._on_node(CONTROLLER, ["slurmctld", "-D", "-i"]))
            for name in self.names:
                (self.root / "spool" / name).mkdir(parents=True, exist_ok=True)
                self._daemon(f"slurmd on {name}", self._on_node(name, ["slurmd", "-D", "-N", name]))
            self._wait_for(lambda: self.idle_nodes() == self.names, 30, "the nodes did not all come up idle")
        except BaseException:
            self.stop()
            raise
        return self

    def _write_files(self) -> None:
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        hosts = ["127.0.0.1 localhost", f"{self.address(CONTROLLER)} {CONTROLLER}"]
        hosts += [f"{self.address(n)} {n}" for n in self.names]
        (self.root / "hosts").write_text("\n".join(hosts) + "\n")
        (self.root / "state").mkdir(exist_ok=True)
        r = self.root
        conf = f"""\
ClusterName=distdocs
SlurmctldHost={CONTROLLER}({self.address(CONTROLLER)})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.socket},cred_expire={self.cred_expire_s}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd-%n.pid
SlurmctldLogFile={r}/slurmctld.log
SlurmdLogFile={r}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=sched_interval={self.sched_interval_s}
ReturnToService=2
SlurmdTimeout={self.slurmd_timeout_s}
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
"""
        conf += "".join(
            f"NodeName={n} NodeAddr={self.address(n)} CPUs={CPUS_PER_NODE} State=UNKNOWN\n" for n in self.names
        )
        conf += f"PartitionName=main Nodes={','.join(self.names)} Default=YES MaxTime=INFINITE State=UP\n"
        self.conf.write_text(conf)

    def _daemon(self, name: str, args: list[str]) -> None:
        log = open(self.root / "daemons.log", "ab")
        try:
            popen = subprocess.Popen(args, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            self._daemons.append((name, popen))
        finally:
            log.close()

    def _wait_for(self, ready, timeout_s: float, why: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            dead = [name for name, p in self._daemons if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                tail = (self.root / "daemons.log").read_text(errors="replace").strip().splitlines()[-3:]
                raise SlurmError(
                    f"{why}{' (' + ', '.join(map(str, dead)) + ' exited)' if dead else ''}: {' | '.join(tail)}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop every daemon, job and task: every process in every node, then munged."""
        self.net.close()  # kills every process inside the namespaces: daemons, slurmstepd, tasks
        for _, p in self._daemons:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
        self._daemons = []

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- commands, jobs, nodes ---

    def client(self, *args: str, env: dict | None = None, cwd=None, timeout_s: float = 30) -> str:
        """A SLURM command (sbatch, scontrol, squeue, scancel...) run on the controller; its stdout.
        A failure raises SlurmError with its message."""
        result = subprocess.run(
            ["nsenter", f"--net=/run/netns/{self.namespace(CONTROLLER)}", *args],
            env={**self.env(), **(env or {})}, cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
        )  # fmt: skip
        if result.returncode != 0:
            raise SlurmError(f"{' '.join(args)}: {result.stderr.strip() or f'exit code {result.returncode}'}")
        return result.stdout

    def job(self, job_id: int) -> dict:
        """`scontrol show job` as a dict: JobState, NodeList, Restarts, Reason..."""
        out = self.client("scontrol", "show", "job", "-o", str(job_id))
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def hostnames(self, nodelist: str) -> list[str]:
        """'node[1-2]' -> ['node1', 'node2'], as the job script expands $SLURM_JOB_NODELIST."""
        return self.client("scontrol", "show", "hostnames", nodelist).split()

    def idle_nodes(self) -> list[str]:
        """The nodes that slurmctld counts as up and free, in order."""
        try:
            out = self.client("sinfo", "-h", "-N", "-t", "idle", "-o", "%N", timeout_s=10)
        except (SlurmError, subprocess.TimeoutExpired):
            return []  # slurmctld is not answering yet
        return sorted(set(out.split()), key=self.names.index)

    def lose_node(self, name: str) -> list[int]:
        """The node loses power: SIGKILL every process on it (slurmd, slurmstepd, the job's tasks), with
        no warning to anyone. Returns the pids killed."""
        pids = self.pids(name)
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        for entry in [e for e in self._daemons if e[1].pid in pids]:
            entry[1].wait(timeout=30)
            self._daemons.remove(entry)
        return pids

    def restore_node(self, name: str, timeout_s: float = 60) -> None:
        """Power a lost node back on: start its slurmd again, and wait until slurmctld counts it idle
        (ReturnToService=2 returns a DOWN node that registers)."""
        self._daemon(f"slurmd on {name}", self._on_node(name, ["slurmd", "-D", "-N", name]))
        self._wait_for(lambda: name in self.idle_nodes(), timeout_s, f"{name} did not come back idle")

    def pids(self, name: str) -> list[int]:
        """The processes running on node `name`."""
        ns = self.namespace(name)
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30).stdout
        return [int(p) for p in out.split()]

    def leftovers(self) -> list[str]:
        """Every process this cluster started that still runs, as 'pid command': its daemons, and any
        process in one of its namespaces, found by the namespace's inode in /proc, so that a process in
        a namespace whose name is gone still counts. Empty after stop()."""
        inodes = set(self._inodes)
        if self.net._built:
            inodes |= {os.stat(links.NETNS_DIR / ns).st_ino for ns in self.net.namespaces()}
        pids = {p.pid for _, p in self._daemons if p.poll() is None}
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and os.stat(proc / "ns/net").st_ino in inodes:
                    pids.add(int(proc.name))
            except OSError:
                pass  # gone meanwhile, or not ours to read
        found = []
        for pid in sorted(pids):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                found.append(f"{pid} {command}")
            except OSError:
                pass
        return found

    def log(self, name: str = "slurmctld") -> str:
        """A daemon's log: slurmctld, or slurmd-node1 and so on."""
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""
