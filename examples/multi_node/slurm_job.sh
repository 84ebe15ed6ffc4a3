#!/bin/bash
# A SLURM job: one torchrun per node, all GPUs of each node. Submit with `sbatch slurm_job.sh`; what
# differs on your cluster comes from the variables below, e.g. `TRAIN_SCRIPT=train.py sbatch slurm_job.sh`,
# and from sbatch's own, which override the #SBATCH lines: SBATCH_GPUS_PER_NODE=4, SBATCH_CPUS_PER_TASK=16.
#SBATCH --job-name=distdocs-train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=32
#SBATCH --time=24:00:00
#SBATCH --requeue
#SBATCH --signal=B:USR1@300
#SBATCH --output=%x-%j.out
#SBATCH --open-mode=append
# (--open-mode=append: a requeued run adds to the same log instead of replacing it)

set -euo pipefail

# Your script and its arguments. A requeued job starts here again, on whatever nodes it gets. A script
# that checkpoints takes --ckpt-dir CKPT_DIR, resumes from the newest checkpoint there and saves one on
# SIGTERM; the folder must be on a file system that all nodes share. The default is the job's name: a
# job submitted again under the same name continues from its checkpoints, so give each run its own.
# For a script that does not checkpoint, set CKPT_DIR= (empty): it gets no --ckpt-dir, and a requeue
# starts it over.
TRAIN_SCRIPT=${TRAIN_SCRIPT:-examples/fault_tolerance/step01_resume_after_kill.py}
CKPT_DIR=${CKPT_DIR-/shared/checkpoints/$SLURM_JOB_NAME}
TRAIN_ARGS=${TRAIN_ARGS:-}  # the script's other arguments, e.g. --ckpt-every=100 or --out=model.pt
NPROC_PER_NODE=${NPROC_PER_NODE:-gpu}  # one process per visible GPU; a number on CPU-only nodes
RDZV_PORT=${RDZV_PORT:-29500}  # another job on the same first node needs another port

# The first node of the allocation hosts the rendezvous; every node dials it. Its first address that
# is not loopback (`hostname --ip-address` resolves the name, and a Debian-style /etc/hosts gives
# 127.0.1.1); on nodes with several networks, set RDZV_HOST to the address on the one they share.
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
head_addr=${RDZV_HOST:-$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --all-ip-addresses | awk '{print $1}')}

# torch 2.13: a group that torchrun restarts can hang in init_process_group on the store it shares
# with the rendezvous; a store of its own per attempt avoids it.
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1

# Preemption and the time limit. SLURM stops a job's steps with SIGTERM, and SIGKILL KillWait seconds
# (30 by default) later; the training saves a checkpoint on SIGTERM, which must fit in that time.
# Five minutes before the time limit, --signal above sends USR1 to this shell only (B:), and so does
# `scancel --batch --signal=USR1 <job>`: requeue ourselves at once, which stops the steps that way
# and puts the job back in the queue, to resume from that checkpoint. A USR1 sent to the steps
# instead (scancel without --batch) kills torchrun, which does not handle it: the job fails, and is
# not requeued.
trap 'echo "USR1 reached the batch shell: requeueing job $SLURM_JOB_ID"; scontrol requeue "$SLURM_JOB_ID"' USR1

# --kill-on-bad-exit: a node whose torchrun fails stops the others' too, rather than leaving them to
# wait at the rendezvous. --cpus-per-task again: since SLURM 22.05 srun does not inherit it from
# sbatch (see sbatch's man page), so its task would count as one CPU, and a cluster that binds tasks
# to their CPUs would put torchrun, its ranks and their DataLoader workers all on one core.
srun --kill-on-bad-exit=1 ${SLURM_CPUS_PER_TASK:+--cpus-per-task="$SLURM_CPUS_PER_TASK"} torchrun \
    --nnodes="$SLURM_NNODES" \
    --nproc_per_node="$NPROC_PER_NODE" \
    --rdzv_backend=c10d \
    --rdzv_endpoint="$head_addr:$RDZV_PORT" \
    --rdzv_id="$SLURM_JOB_ID" \
    --max-restarts=3 \
    "$TRAIN_SCRIPT" ${CKPT_DIR:+--ckpt-dir "$CKPT_DIR"} $TRAIN_ARGS &
# bash runs a trap only between commands: in the foreground, srun would hold USR1 back until the
# training ended. `wait` returns as soon as a signal arrives, and otherwise with srun's exit code,
# which `set -e` makes the job's: a bare `wait` would return 0, and a failed job would read COMPLETED.
wait "$!"
