"""Scale-out, verified: two "nodes" on this machine (torchrun, gloo on the CPU) train as one job, with the same
result as two processes on one node, on the tests' own task (conftest.py's ``task``); the SLURM script agrees with
what Lightning reads from the variables srun sets."""

import json
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import command, command_environment

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def two_nodes_as_one_job(
    script: list[str], flags: list[str], tmp_path: Path, env: dict[str, str], summary: str
) -> tuple[dict, dict]:
    """``script FLAGS`` with --devices 2 on one node, then with torchrun as two nodes of one process each: the
    metrics.json of each (checked to be one job's: one folder, written once, its ``summary`` line printed once)."""
    # One thread per process in both layouts: Lightning would otherwise give each process cores // local processes,
    # and a different thread count may sum in a different order.
    env = {**env, "OMP_NUM_THREADS": "1"}
    one_node, two_nodes = tmp_path / "one_node", tmp_path / "two_nodes"
    single = [sys.executable, *script, *flags, "--devices", "2", "--output_dir", str(one_node)]
    result = subprocess.run(single, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]

    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1"]
    torchrun += ["--master_addr", "127.0.0.1", "--master_port", str(free_port())]
    as_two_nodes = ["--devices", "1", "--num_nodes", "2", "--output_dir", str(two_nodes)]
    nodes = [
        subprocess.Popen(
            [*torchrun, "--node_rank", str(rank), *script, *flags, *as_two_nodes],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        for rank in (0, 1)
    ]
    try:
        outputs = [node.communicate(timeout=600)[0] for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(output[-3000:] for output in outputs)

    # One job: one run folder, one metrics.json, written by global rank 0 only.
    assert sorted(path.name for path in tmp_path.iterdir()) == ["one_node", "two_nodes"]
    assert [path.relative_to(two_nodes) for path in two_nodes.rglob("metrics.json")] == [Path("metrics.json")]
    assert sum(output.count(summary) for output in outputs) == 1  # by global rank 0 only
    reference, two = (json.loads((run / "metrics.json").read_text()) for run in (one_node, two_nodes))
    assert (int(reference["devices"]), reference["num_nodes"]) == (2, 1)
    assert (int(two["devices"]), two["num_nodes"]) == (1, 2)
    return reference, two


@pytest.mark.slow
def test_two_nodes_train_as_one_job_like_two_processes_on_one_node(task, tmp_path):
    flags = ["--batch_size", "32", "--max_epochs", "2", "--accelerator", "cpu", "--strategy", "ddp"]
    flags += ["--enable_progress_bar", "false"]
    script = command("train")[1:]  # tests/command.py train: scripts/train.py on the tests' task
    reference, two = two_nodes_as_one_job(script, flags, tmp_path, command_environment(), "Tested the best of 2 ")
    # The same job: the same shards, the same gradient all-reduce, so the same numbers.
    assert [row["train/loss"] for row in two["history"]] == [row["train/loss"] for row in reference["history"]]
    scores = [key for key in reference if key.startswith(("test/", "best_val/")) and key != "best_checkpoint"]
    assert {"test/acc", "test/loss", "best_val/acc"} <= set(scores)
    assert [two[key] for key in scores] == [reference[key] for key in scores]
    weights = [
        torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        for run in (tmp_path / "one_node", tmp_path / "two_nodes")
    ]
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])
    assert reference["test/acc"] > 0.9


def srun_command(script: str) -> list[str]:
    """The arguments of the script's ``srun python scripts/train.py ...`` line (continuation lines joined)."""
    joined = script.replace("\\\n", " ")
    line = next(line for line in joined.splitlines() if line.strip().startswith("srun "))
    return shlex.split(line.replace("${SLURM_JOB_ID}", "1234").replace('"$@"', ""))


def test_slurm_script_agrees_with_what_lightning_reads_from_srun(monkeypatch):
    from lightning.fabric import Fabric  # only with_ladder
    from lightning.fabric.plugins.environments import SLURMEnvironment
    from lightning.fabric.utilities import rank_zero as fabric_rank_zero
    from lightning.pytorch import Trainer
    from lightning.pytorch.utilities import rank_zero as trainer_rank_zero

    from mnist_lightning.core.cli import parse_args

    path = ROOT / "scripts" / "slurm_train.sh"
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0  # the script parses
    text = path.read_text()
    sbatch = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", text, flags=re.MULTILINE))
    nodes, tasks_per_node = int(sbatch["nodes"]), int(sbatch["ntasks-per-node"])
    assert int(sbatch["gpus-per-node"]) == tasks_per_node  # one task per GPU
    command = srun_command(text)
    assert command[:3] == ["srun", "python", "scripts/train.py"]
    # What srun sets in the environment of the 6th task: on the second node, second GPU there.
    world = nodes * tasks_per_node
    for name, value in {
        "SLURM_NTASKS": world,
        "SLURM_PROCID": 5,
        "SLURM_LOCALID": 1,
        "SLURM_NODEID": 1,
        "SLURM_NNODES": nodes,
        "SLURM_NTASKS_PER_NODE": tasks_per_node,
        "SLURM_NODELIST": "gpu[07-08]",
        "SLURM_JOB_NODELIST": "gpu[07-08]",
        "SLURM_JOB_NAME": sbatch["job-name"],
        "SLURM_JOB_ID": 1234,
    }.items():
        monkeypatch.setenv(name, str(value))
    for name in ("MASTER_ADDR", "MASTER_PORT"):  # SLURMEnvironment derives them (and sets them): start unset
        monkeypatch.setenv(name, "")  # records the value to restore after the test
        monkeypatch.delenv(name)
    for module in (fabric_rank_zero, trainer_rank_zero):  # set as Lightning starts; restored after the test
        monkeypatch.setattr(module.rank_zero_only, "rank", getattr(module.rank_zero_only, "rank", 0))
    with monkeypatch.context() as gpu_node:  # parsed as on the GPU nodes it is for
        gpu_node.setattr(torch.cuda, "is_available", lambda: True)
        config = parse_args(command[3:])  # the script's flags are the project's own
    assert (int(config.devices), config.num_nodes, config.strategy) == (tasks_per_node, nodes, "ddp")
    assert config.output_dir == "runs/slurm-1234"  # one folder for every task: each is started by srun

    assert SLURMEnvironment.detect()
    environment = SLURMEnvironment()
    environment.validate_settings(num_devices=int(config.devices), num_nodes=config.num_nodes)  # raises on a mismatch
    assert (environment.world_size(), environment.global_rank(), environment.local_rank()) == (world, 5, 1)
    assert (environment.node_rank(), environment.main_address) == (1, "gpu07")
    # Given the script's devices and nodes (on the CPU: no GPU is needed to check this), the Trainer takes its ranks
    # from SLURM.
    # So does Fabric, which the Fabric rung runs on.  # only with_ladder
    settings = {"accelerator": "cpu", "devices": int(config.devices), "num_nodes": config.num_nodes, "strategy": "ddp"}
    runs = [Trainer(**settings, logger=False, enable_checkpointing=False)]
    runs.append(Fabric(**settings))  # only with_ladder
    for run in runs:
        assert isinstance(run.strategy.cluster_environment, SLURMEnvironment)
        assert (run.world_size, run.global_rank, run.local_rank, run.node_rank) == (world, 5, 1, 1)


def test_an_entry_point_that_ends_well_destroys_its_gloo_process_group(tmp_path):
    # Lightning destroys only NCCL groups at exit; a gloo group left to the interpreter's shutdown can abort the
    # process (SIGABRT) and leave torchrun waiting at its exit barrier. run_main ends it after a good run.
    from mnist_lightning.core.errors import UserError, run_main

    def start_group(name: str) -> None:
        store = f"file://{tmp_path / name}"
        torch.distributed.init_process_group("gloo", init_method=store, rank=0, world_size=1)

    def start_group_then_fail() -> None:
        start_group("second")
        raise UserError("stopped")

    try:
        assert run_main(lambda: start_group("first")) == 0
        assert not torch.distributed.is_initialized()
        # After an error the group is left alone: the other processes may still be in a collective.
        assert run_main(start_group_then_fail) == 2
        assert torch.distributed.is_initialized()
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
