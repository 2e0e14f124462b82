"""Kill training with SIGKILL at random moments and resume each time with ``--ckpt_path last``: the harness of
tests/test_faults.py and benchmarks/kill_resume.py.

A kill can land anywhere: in a training step, in validation, in the middle of writing a checkpoint. The run
survives a kill when the ``last.ckpt`` left behind loads and training resumes from it. After the last kill the
run finishes, and its test accuracy can be compared with an uninterrupted run's.
"""

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import torch


def checkpoint_loads(path: Path) -> bool:
    try:
        return "state_dict" in torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        return False


def train_command(flags: list[str], output_dir: Path) -> list[str]:
    return [sys.executable, "-m", "mnist_lightning.train", *flags, "--output_dir", str(output_dir), "--quiet", "true"]


def crash_and_resume(flags: list[str], output_dir: Path, kills: int, seed: int = 0, max_delay: float = 1.5) -> dict:
    """Run, SIGKILL ``kills`` times (each a random 0..max_delay s after a fresh checkpoint), resume, finish."""
    rng = random.Random(seed)
    last = output_dir / "checkpoints" / "last.ckpt"
    events = []
    for _ in range(kills):
        resume = ["--ckpt_path", "last"] if last.exists() else []
        started = time.time()
        process = subprocess.Popen(train_command(flags + resume, output_dir), stdout=subprocess.DEVNULL)
        # Wait for this process to write a checkpoint of its own: then a kill always leaves one to resume from.
        while process.poll() is None and not (last.exists() and last.stat().st_mtime > started):
            time.sleep(0.02)
        if process.poll() is not None:
            raise RuntimeError(f"training ended (exit {process.returncode}) before it could be killed")
        time.sleep(rng.uniform(0, max_delay))
        process.kill()
        process.wait()
        events.append({"after_seconds": round(time.time() - started, 2), "last_ckpt_loads": checkpoint_loads(last)})
    final = subprocess.run(train_command([*flags, "--ckpt_path", "last"], output_dir), capture_output=True, text=True)
    if final.returncode != 0:
        raise RuntimeError(f"the final resume failed: {final.stderr[-2000:]}")
    survived = sum(event["last_ckpt_loads"] for event in events)
    metrics = json.loads((output_dir / "metrics.json").read_text())
    return {"kills": kills, "survived": survived, "test/acc": metrics["test/acc"], "events": events}
