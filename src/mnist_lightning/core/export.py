"""Export the trained network for serving without Lightning: torch.export (.pt2) and, with the onnx extra, ONNX.
Both take a batch of model inputs (float32, any batch size) and return class scores (ONNX: logits);
preprocessing.json says so, with the data module's recipe for inputs where it has one (preprocessing())."""

import importlib.util
import io
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from jsonargparse import ArgumentParser, Namespace

from .checkpoints import load_checkpoint
from .cli import USER_ERRORS, Parser
from .errors import UserError, WriteError, run_main
from .records import RUN_RECORD, json_text, lock, refuse_inside_a_running_run, release


def build_parser() -> ArgumentParser:
    parser = Parser(prog="export.py", description=__doc__, exit_on_error=False)
    parser.add_argument("--ckpt_path", type=str, required=True, help="A .ckpt written by scripts/train.py.")
    parser.add_argument("--output_dir", type=str | None, default=None, help="Unset: exports/ beside the .ckpt.")
    parser.add_argument("--formats", nargs="+", choices=("pt2", "onnx"), default=["pt2", "onnx"], help="Which ones.")
    return parser


def export(config: Namespace) -> dict[str, Path]:
    if "onnx" in config.formats and not all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript")):
        raise UserError('ONNX export needs the onnx extra: pip install -e ".[onnx]" (or pass --formats pt2).')
    output_dir = Path(config.output_dir or Path(config.ckpt_path).resolve().parent / "exports")
    run_dir = Path(config.ckpt_path).resolve().parent.parent  # <run>/checkpoints/x.ckpt
    if output_dir.resolve().is_relative_to(run_dir) and (run_dir / RUN_RECORD).is_file():
        lock(run_dir)  # exports into a run's folder: not while the run itself is writing it
    refuse_inside_a_running_run(output_dir)  # nor into any other run's that is being written
    # Made by lock, below (os.path.exists: a name too long is not there, and lock refuses it).
    made = [folder for folder in (output_dir, *output_dir.parents) if not os.path.exists(folder)]
    lock(output_dir)  # before any work: a folder that cannot be written, or one another export is writing
    paths = {name: output_dir / f"model.{name}" for name in config.formats}
    paths["preprocessing"] = output_dir / "preprocessing.json"
    earlier = {path for path in paths.values() if path.exists()}
    try:
        write_export(config.ckpt_path, paths, staging=output_dir / ".export-partial")
    except BaseException:  # a failure or a stop (Ctrl-C, SIGTERM): no folder it made is left, empty or half-filled
        if made:
            release(output_dir)
            shutil.rmtree(made[-1], ignore_errors=True)
        raise
    for name, path in paths.items():
        print(f"{name}: {path}" + (" (replaced the earlier one)" if path in earlier else ""))
    return paths


def write_export(ckpt_path: str, paths: dict[str, Path], staging: Path) -> None:
    checkpoint = load_checkpoint(ckpt_path)
    net = checkpoint.model.net.eval()  # the plain nn.Module; Lightning stays behind
    shape, classes = checkpoint.model.hparams.input_shape, checkpoint.model.hparams.num_classes
    example = (torch.zeros(2, *shape),)
    dynamic = ({0: torch.export.Dim("batch")},)  # by position: a network's forward may name its input anything
    # Written whole into a staging folder, then moved in: a stop or a failure leaves the earlier export as it was,
    # never half a file, nor a new model beside an earlier model's preprocessing.json.
    shutil.rmtree(staging, ignore_errors=True)
    try:
        if "pt2" in paths:
            # Into memory first: after a failed write to a file (a full disk), torch's zip writer aborts the process.
            buffer = io.BytesIO()
            torch.export.save(torch.export.export(net, example, dynamic_shapes=dynamic), buffer)
            staged(staging, paths["pt2"], lambda file: file.write_bytes(buffer.getvalue()))
        if "onnx" in paths:
            # verbose=False: without it torch prints each step of the conversion; the command reports what it wrote.
            options = {"input_names": ["images"], "output_names": ["logits"], "verbose": False}
            program = torch.onnx.export(net, example, dynamo=True, dynamic_shapes=dynamic, **options)
            staged(staging, paths["onnx"], lambda file: program.save(file, external_data=False))
        spec = {
            "input": {"name": "images", "dtype": "float32", "shape": ["batch", *shape]},
            "output": {"name": "logits", "dtype": "float32", "shape": ["batch", classes], "meaning": "class scores"},
        }
        spec |= getattr(checkpoint.datamodule, "preprocessing", dict)()
        staged(staging, paths["preprocessing"], lambda file: file.write_text(json_text(spec)))
        for path in paths.values():
            os.replace(staging / path.name, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def staged(staging: Path, path: Path, save: Callable[[Path], object]) -> None:
    """``save`` writes the file for ``path`` into ``staging``; a failed write is a WriteError naming ``path``."""
    try:
        staging.mkdir(exist_ok=True)
        save(staging / path.name)
    except OSError as error:  # a full disk, a file-size limit (ulimit -f)
        raise WriteError(path, error) from error


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: export(build_parser().parse_args(argv)), USER_ERRORS, exiting=argv is None)


if __name__ == "__main__":
    sys.exit(main())
