#!/bin/bash
# A SLURM job: one torchrun per node, all GPUs of each node. Submit with `sbatch slurm_job.sh`; what
# differs on your cluster comes from the variables below, e.g. `TRAIN_SCRIPT=train.py sbatch slurm_job.sh`.
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

# Your script and its arguments. A requeued job starts here again, on whatever nodes it gets, so the
# checkpoints must be on a file system that all of them share.
TRAIN_SCRIPT=${TRAIN_SCRIPT:-examples/fault_tolerance/step01_resume_after_kill.py}
CKPT_DIR=${CKPT_DIR:-/shared/checkpoints/$SLURM_JOB_NAME}
NPROC_PER_NODE=${NPROC_PER_NODE:-gpu}  # one process per visible GPU; a number on CPU-only nodes
RDZV_PORT=${RDZV_PORT:-29500}

# The first node of the allocation hosts the rendezvous; every node dials it.
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
head_addr=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address | awk '{print $1}')

# Five minutes before the time limit, SLURM sends USR1 (--signal above): requeue ourselves, so that
# the next run continues from the newest checkpoint.
trap 'scontrol requeue "$SLURM_JOB_ID"' USR1

srun --kill-on-bad-exit=1 torchrun \
    --nnodes="$SLURM_NNODES" \
    --nproc_per_node="$NPROC_PER_NODE" \
    --rdzv_backend=c10d \
    --rdzv_endpoint="$head_addr:$RDZV_PORT" \
    --rdzv_id="$SLURM_JOB_ID" \
    --max-restarts=3 \
    "$TRAIN_SCRIPT" --ckpt-dir "$CKPT_DIR" &
wait
