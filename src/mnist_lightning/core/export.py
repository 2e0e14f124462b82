"""Export the trained model for serving without Lightning, as Lightning's own to_onnx does: its forward, on inputs like
its example_input_array (any batch size): torch.export (.pt2) and, asked for (it needs the onnx extra), ONNX.
preprocessing.json gives the input's and output's shapes, and the data module's recipe for inputs where it has one
(preprocessing())."""

import io
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import torch
from jsonargparse import Namespace

from .checkpoints import load_checkpoint
from .cli import Parser
from .errors import UserError, run_main
from .records import json_text, replaced
from .runs import locked


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
    if not isinstance(example := model.example_input_array, torch.Tensor):
        raise UserError(f"{type(model).__name__} has no example_input_array, a batch of its inputs: give it one.")
    dynamic = ({0: torch.export.Dim("batch")},)  # the input by position, whatever forward calls it
    program = torch.export.export(model.eval(), (example,), dynamic_shapes=dynamic)
    shapes = {"input": example.shape, "output": program.module()(example).shape}
    spec = {name: {"name": name, "shape": ["batch", *shape[1:]]} for name, shape in shapes.items()}
    files = {"preprocessing.json": json_text(spec | getattr(data, "preprocessing", dict)()).encode()}
    if "pt2" in config.formats:
        torch.export.save(program, buffer := io.BytesIO())
        files["model.pt2"] = buffer.getvalue()
    if "onnx" in config.formats:  # verbose=False: else torch prints each step of the conversion
        onnx = torch.onnx.export(program, input_names=["input"], output_names=["output"], verbose=False)
        files["model.onnx"] = onnx.model_proto.SerializeToString()
    output_dir = config.output_dir or Path(config.ckpt_path).parent / "exports"
    # A folder that cannot be written, or one (or inside one) that a command is writing: refused.
    with locked(output_dir), ExitStack() as stack:
        for name, content in files.items():
            stack.enter_context(replaced(output_dir / name)).write(content)
    for name in files:
        print(f"Wrote {output_dir / name}")


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: export(build_parser().parse_args(argv)), exiting=argv is None)
