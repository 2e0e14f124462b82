"""Export the trained network for serving without Lightning: torch.export (.pt2) and, with the onnx extra, ONNX.
Both take a batch of model inputs (float32, any batch size) and return class scores (ONNX: logits);
preprocessing.json says so, with the data module's recipe for inputs where it has one (preprocessing())."""

import importlib.util
import io
import os
import shutil
import sys
from contextlib import ExitStack
from pathlib import Path

import torch
from jsonargparse import ArgumentParser, Namespace

from .checkpoints import load_checkpoint
from .cli import USER_ERRORS, Parser
from .errors import UserError, run_main
from .records import json_text, lock, release, replaced


def build_parser() -> ArgumentParser:
    parser = Parser(prog="export.py", description=__doc__, exit_on_error=False)
    parser.add_argument("--ckpt_path", type=str, required=True, help="A .ckpt written by scripts/train.py.")
    parser.add_argument("--output_dir", type=str | None, default=None, help="Unset: exports/ beside the .ckpt.")
    parser.add_argument("--formats", nargs="+", choices=("pt2", "onnx"), default=["pt2", "onnx"], help="Which ones.")
    return parser


def export(config: Namespace) -> None:
    if "onnx" in config.formats and not all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript")):
        raise UserError('ONNX export needs the onnx extra: pip install -e ".[onnx]" (or pass --formats pt2).')
    output_dir = Path(config.output_dir or Path(config.ckpt_path).resolve().parent / "exports")
    # Made by lock, below (os.path.exists: a name too long is not there, and lock refuses it).
    made = [folder for folder in (output_dir, *output_dir.parents) if not os.path.exists(folder)]
    lock(output_dir)  # before any work: a folder that cannot be written, or one (or inside one) a command is writing
    try:
        files = {output_dir / name: content for name, content in exported(config.ckpt_path, config.formats).items()}
        earlier = {path for path in files if path.exists()}
        with ExitStack() as stack:  # each file written whole beside its earlier one, all moved in once all are written
            for path, content in files.items():
                stack.enter_context(replaced(path)).write(content)
    except BaseException:  # a failure or a stop (Ctrl-C, SIGTERM): no folder it made is left, empty or half-filled
        if made:
            release(output_dir)
            shutil.rmtree(made[-1], ignore_errors=True)
        raise
    for path in files:
        print(f"Wrote {path}" + " (replaced the earlier one)" * (path in earlier))


def exported(ckpt_path: str, formats: list[str]) -> dict[str, bytes]:
    """Each file's name and bytes, made in memory: after a failed write to a file, torch's zip writer aborts."""
    checkpoint = load_checkpoint(ckpt_path)
    net, shape = checkpoint.model.net.eval(), checkpoint.model.hparams.input_shape  # a plain nn.Module
    example, dynamic = (torch.zeros(2, *shape),), ({0: torch.export.Dim("batch")},)  # by position: any input name
    files = {}
    if "pt2" in formats:
        torch.export.save(torch.export.export(net, example, dynamic_shapes=dynamic), buffer := io.BytesIO())
        files["model.pt2"] = buffer.getvalue()
    if "onnx" in formats:  # verbose=False: else torch prints each step of the conversion
        names = {"input_names": ["images"], "output_names": ["logits"], "verbose": False}
        program = torch.onnx.export(net, example, dynamo=True, dynamic_shapes=dynamic, **names)
        files["model.onnx"] = program.model_proto.SerializeToString()
    spec = {
        "input": {"name": "images", "dtype": "float32", "shape": ["batch", *shape]},
        "output": {"name": "logits", "dtype": "float32", "shape": ["batch", checkpoint.model.hparams.num_classes]},
    }
    files["preprocessing.json"] = json_text(spec | getattr(checkpoint.datamodule, "preprocessing", dict)()).encode()
    return files


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: export(build_parser().parse_args(argv)), USER_ERRORS, exiting=argv is None)


if __name__ == "__main__":
    sys.exit(main())
