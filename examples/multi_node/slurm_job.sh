#!/bin/bash
# A SLURM job: 2 nodes, 8 GPUs each, one torchrun per node. Submit with `sbatch slurm_job.sh`.
# Not run by the tests (it needs a SLURM cluster); they check that it parses (`bash -n`).
#SBATCH --job-name=distdocs-train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=32
#SBATCH --time=24:00:00
#SBATCH --requeue
#SBATCH --signal=B:USR1@300
#SBATCH --output=logs/%x-%j.out

set -euo pipefail

# The first node of the allocation hosts the rendezvous; every node dials it.
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
head_addr=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address | awk '{print $1}')

# A requeued job starts here again, on whatever nodes it gets; the checkpoints must be on a file
# system that all of them share.
CKPT_DIR=/shared/checkpoints/$SLURM_JOB_NAME

# Five minutes before the time limit, SLURM sends USR1 (--signal above): requeue ourselves, so that
# the next run continues from the newest checkpoint.
trap 'scontrol requeue "$SLURM_JOB_ID"' USR1

srun --kill-on-bad-exit=1 torchrun \
    --nnodes="$SLURM_NNODES" \
    --nproc_per_node=gpu \
    --rdzv_backend=c10d \
    --rdzv_endpoint="$head_addr:29500" \
    --rdzv_id="$SLURM_JOB_ID" \
    --max-restarts=3 \
    examples/fault_tolerance/step01_resume_after_kill.py --ckpt-dir "$CKPT_DIR" &
wait
