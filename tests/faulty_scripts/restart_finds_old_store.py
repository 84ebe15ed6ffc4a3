"""torchrun restarts its ranks on the store of the attempt before (torch 2.5 to 2.13, at least): run
under `torchrun --standalone --nproc_per_node=2 --max-restarts=1`. In attempt 0, rank 1 dies after the
group has formed. In attempt 1, rank 0 looks in the store that torchrun hands it (MASTER_ADDR and
MASTER_PORT) for the address that gloo's rank 1 published there, before any rank of attempt 1 has
joined a group. It prints whether the key is there; no process group is formed in attempt 1, so the
run never depends on the race that the stale key starts (a rank that dials the dead address).

Unless TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, attempt 1 shares attempt 0's store: the key is there."""

import os
import signal
from datetime import timedelta

import torch
import torch.distributed as dist

# Where ProcessGroupGloo's default group publishes rank 1's address: c10d's "default_pg" prefix, the
# group's name "0", the device "cpu", gloo's device index "0", then the rank.
RANK_1_ADDRESS = "default_pg/0//cpu//0/1"


def main():
    attempt, rank = int(os.environ["TORCHELASTIC_RESTART_COUNT"]), int(os.environ["RANK"])
    if attempt == 0:
        dist.init_process_group("gloo", timeout=timedelta(seconds=30))
        try:
            dist.all_reduce(torch.ones(1))  # the group is formed: every rank's address is in the store
            if rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)  # as a lost node would
            dist.all_reduce(torch.ones(1))  # rank 0 fails here, and torchrun restarts both
        finally:
            dist.destroy_process_group()
        return
    if rank == 0:
        # With the store shared, torchrun's agent hosts it; without, rank 0 does, as init_process_group would.
        hosted_by_agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        store = dist.TCPStore(
            os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=not hosted_by_agent,
            timeout=timedelta(seconds=10),
        )  # fmt: skip
        found = store.check([RANK_1_ADDRESS])
        print(f"attempt {attempt}: the dead rank's address is in the store: {found}", flush=True)
        del store


if __name__ == "__main__":
    main()
