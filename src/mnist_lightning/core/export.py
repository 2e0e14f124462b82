"""Export the trained network for serving without Lightning: torch.export (.pt2) and, asked for (it needs the onnx
extra), ONNX.
Both take a batch of model inputs (float32, any batch size) and return class scores (ONNX: logits);
preprocessing.json says so, with the data module's recipe for inputs where it has one (preprocessing())."""

import io
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import torch
from jsonargparse import Namespace

from .checkpoints import load_checkpoint
from .cli import Parser
from .errors import run_main
from .records import json_text, lock, replaced


@dataclass
class Options:
    """What to export, and where

    Args:
        ckpt_path: A .ckpt written by scripts/train.py.
        output_dir: The folder to write into (default: exports/ beside the .ckpt).
    """

    ckpt_path: str
    output_dir: Path | None = None


def build_parser() -> Parser:
    parser = Parser(description=__doc__, exit_on_error=False)
    parser.add_class_arguments(Options)
    parser.add_argument("--formats", nargs="+", choices=("pt2", "onnx"), default=["pt2"], help="onnx: the onnx extra.")
    return parser


def export(config: Namespace) -> None:
    """Every file is made in memory first (after a failed write to a file, torch's zip writer aborts), then written
    whole beside its earlier one, and all are moved in once all are written: a failure or a stop changes no file (a
    folder made for them stays)."""
    model, data, _ = load_checkpoint(config.ckpt_path)
    shape, dynamic = model.hparams.input_shape, ({0: torch.export.Dim("batch")},)  # the input by position
    program = torch.export.export(model.net.eval(), (torch.zeros(2, *shape),), dynamic_shapes=dynamic)
    spec = {  # (float32 in and out, as the docstring says)
        "input": {"name": "images", "shape": ["batch", *shape]},
        "output": {"name": "logits", "shape": ["batch", model.hparams.num_classes]},
    }
    files = {"preprocessing.json": json_text(spec | getattr(data, "preprocessing", dict)()).encode()}
    if "pt2" in config.formats:
        torch.export.save(program, buffer := io.BytesIO())
        files["model.pt2"] = buffer.getvalue()
    if "onnx" in config.formats:  # verbose=False: else torch prints each step of the conversion
        onnx = torch.onnx.export(program, input_names=["images"], output_names=["logits"], verbose=False)
        files["model.onnx"] = onnx.model_proto.SerializeToString()
    output_dir = config.output_dir or Path(config.ckpt_path).parent / "exports"
    lock(output_dir)  # a folder that cannot be written, or one (or inside one) that a command is writing: refused
    with ExitStack() as stack:
        for name, content in files.items():
            stack.enter_context(replaced(output_dir / name)).write(content)
    for name in files:
        print(f"Wrote {output_dir / name}")


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: export(build_parser().parse_args(argv)), exiting=argv is None)
