"""What torchrun tells each process: the environment variables a distributed script starts from.

Launch (2 processes on one machine, CPU, gloo):

    torchrun --standalone --nproc_per_node=2 examples/launchers/step01_torchrun_env.py

torchrun starts one process per `--nproc_per_node` on every node and gives each its coordinates
in environment variables; `init_process_group()` reads them (the `env://` method). Rank 0 prints one
row per process, and the self-check asserts the arithmetic that ties them together:
RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK, with every rank agreeing on the rendezvous point.
Run it as two "nodes" on one machine (see the page) and GROUP_RANK and LOCAL_RANK part ways from RANK.
"""

import os

import torch.distributed as dist

from distdocs.runtime import distributed, print0

# --8<-- [start:variables]
PER_PROCESS = ("RANK", "LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE")
SHARED = ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
          "TORCHELASTIC_MAX_RESTARTS", "OMP_NUM_THREADS")
# --8<-- [end:variables]


def main() -> None:
    with distributed() as rt:
        mine = {name: os.environ.get(name) for name in PER_PROCESS + SHARED}
        every = [None] * rt.world_size
        dist.all_gather_object(every, mine)  # index r holds rank r's environment

        print0("  ".join(f"{name:>16}" for name in PER_PROCESS))
        for env in every:
            print0("  ".join(f"{env[name]:>16}" for name in PER_PROCESS))
        for name in SHARED:
            values = {env[name] for env in every}
            # The port and run id are chosen afresh by --standalone: say whether they agree, not what they are.
            shown = "(not shown: it can change between launches)" if name in ("MASTER_PORT", "TORCHELASTIC_RUN_ID") else values.pop()
            print0(f"{name} = {shown}; the same on every rank: {len({env[name] for env in every}) == 1}")

        # --8<-- [start:self_check]
        ranks = [int(env["RANK"]) for env in every]
        assert ranks == list(range(rt.world_size)), ranks  # all_gather_object orders by rank
        for env in every:
            assert int(env["WORLD_SIZE"]) == dist.get_world_size()
            node, local, per_node = int(env["GROUP_RANK"]), int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"])
            assert int(env["RANK"]) == node * per_node + local, env
        for name in SHARED:
            assert len({env[name] for env in every}) == 1, f"ranks disagree on {name}"
        nodes = len({env["GROUP_RANK"] for env in every})
        print0(f"{rt.world_size} processes on {nodes} node(s): RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK")
        print0("self-check passed")
        # --8<-- [end:self_check]


if __name__ == "__main__":
    main()
