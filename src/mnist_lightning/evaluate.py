"""Test a trained checkpoint on MNIST's 10,000 test images, on any accelerator; writes metrics.json."""

import sys
import time
from pathlib import Path

from jsonargparse import ArgumentParser, Namespace
from lightning.pytorch import Trainer

from .checkpoints import load_checkpoint
from .devices import check_accelerator
from .errors import run_main
from .outputs import new_run_dir, peak_memory_mb, write_json


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="evaluate.py", description=__doc__)
    parser.add_argument("--ckpt_path", type=str, required=True, help="A .ckpt written by scripts/train.py.")
    parser.add_argument("--data_dir", type=str | None, default=None, help="Default: the one the model trained on.")
    parser.add_argument("--batch_size", type=int | None, default=None, help="Default: the training batch size.")
    parser.add_argument("--accelerator", type=str, default="auto", help="cpu, gpu, cuda, mps or auto.")
    parser.add_argument("--devices", type=int | str, default=1)
    parser.add_argument("--precision", type=str | None, default=None, help="e.g. 32-true, bf16-mixed, 16-mixed.")
    parser.add_argument("--output_dir", type=str | None, default=None, help="Default: a new folder under runs/.")
    return parser


def evaluate(config: Namespace) -> dict:
    check_accelerator(config.accelerator, config.devices)
    overrides = {key: config[key] for key in ("data_dir", "batch_size") if config[key] is not None}
    checkpoint = load_checkpoint(config.ckpt_path, **overrides)
    output_dir = new_run_dir(config.output_dir)
    trainer = Trainer(
        accelerator=config.accelerator,
        devices=config.devices,
        precision=config.precision,
        logger=False,
        enable_checkpointing=False,
        default_root_dir=output_dir,
    )
    start = time.perf_counter()
    (results,) = trainer.test(checkpoint.model, datamodule=checkpoint.datamodule, verbose=False)
    metrics = {
        "test/acc": results["test/acc"],
        "test/loss": results["test/loss"],
        "epochs": checkpoint.epochs,
        "fit_seconds": None,
        "test_seconds": time.perf_counter() - start,
        "accelerator": trainer.strategy.root_device.type,
        "devices": trainer.num_devices,
        "precision": trainer.precision,
        "checkpoint": str(Path(config.ckpt_path).resolve()),
        **peak_memory_mb(trainer.strategy.root_device),
    }
    if trainer.is_global_zero:
        write_json(output_dir / "metrics.json", metrics)
        print(f"Test accuracy {100 * metrics['test/acc']:.2f} % (loss {metrics['test/loss']:.4f}); {output_dir}")
    return metrics


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: evaluate(build_parser().parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
