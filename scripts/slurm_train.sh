#!/bin/bash
# Multi-node training on SLURM: 2 nodes x 4 GPUs, one task per GPU. Lightning reads SLURM's variables
# (SLURM_PROCID, SLURM_NTASKS, ...) and sets up DDP itself; nothing here is specific to this project.
#   sbatch scripts/slurm_train.sh
# Near the time limit SLURM sends SIGUSR1 (--signal), on which Lightning requeues the job (--requeue allows it);
# the requeued job runs this same command, and train.py goes on with the run in its --output_dir from its
# last.ckpt (SLURM_RESTART_COUNT tells it), as `--ckpt_path last` would.
#SBATCH --job-name=mnist-lightning
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --time=00:30:00
#SBATCH --output=slurm-%j.out
#SBATCH --signal=SIGUSR1@90
#SBATCH --requeue

set -euo pipefail
source .venv/bin/activate
# Every task must name the same run folder: each is started by srun, not by Lightning. The job's id stays the same
# when it is requeued: so does the folder.
srun python scripts/train.py --accelerator gpu --devices 4 --num_nodes 2 --strategy ddp \
    --output_dir "runs/slurm-${SLURM_JOB_ID}" "$@"
