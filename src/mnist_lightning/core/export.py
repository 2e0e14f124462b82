"""Export the trained network for serving without Lightning: torch.export (.pt2) and, with the onnx extra, ONNX.
Both take a batch of model inputs (float32, any batch size) and return class scores (ONNX: logits);
preprocessing.json says so, with the data module's recipe for inputs where it has one (preprocessing())."""

import importlib.util
import io
import shutil
from contextlib import ExitStack
from pathlib import Path

import torch
from jsonargparse import ArgumentParser, Namespace

from .checkpoints import load_checkpoint
from .cli import USER_ERRORS, Parser
from .errors import UserError, run_main
from .records import json_text, lock, replaced


def build_parser() -> ArgumentParser:
    parser = Parser(prog="export.py", description=__doc__, exit_on_error=False)
    parser.add_argument("--ckpt_path", type=str, required=True, help="A .ckpt written by scripts/train.py.")
    parser.add_argument("--output_dir", type=str | None, default=None, help="Unset: exports/ beside the .ckpt.")
    parser.add_argument("--formats", nargs="+", choices=("pt2", "onnx"), default=["pt2", "onnx"], help="Which ones.")
    return parser


def export(config: Namespace) -> None:
    """Every file is made in memory first (after a failed write to a file, torch's zip writer aborts), then written
    whole beside its earlier one, and all are moved in once all are written: a failure or a stop changes nothing."""
    if "onnx" in config.formats and not all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript")):
        raise UserError('ONNX export needs the onnx extra: pip install -e ".[onnx]" (or pass --formats pt2).')
    model, data, _ = load_checkpoint(config.ckpt_path)
    net, shape = model.net.eval(), model.hparams.input_shape  # a plain nn.Module
    example, dynamic = (torch.zeros(2, *shape),), ({0: torch.export.Dim("batch")},)  # by position: any input name
    files = {}
    if "pt2" in config.formats:
        torch.export.save(torch.export.export(net, example, dynamic_shapes=dynamic), buffer := io.BytesIO())
        files["model.pt2"] = buffer.getvalue()
    if "onnx" in config.formats:  # verbose=False: else torch prints each step of the conversion
        names = {"input_names": ["images"], "output_names": ["logits"], "verbose": False}
        program = torch.onnx.export(net, example, dynamo=True, dynamic_shapes=dynamic, **names)
        files["model.onnx"] = program.model_proto.SerializeToString()
    spec = {"input": {"name": "images", "dtype": "float32", "shape": ["batch", *shape]}}
    spec["output"] = {"name": "logits", "dtype": "float32", "shape": ["batch", model.hparams.num_classes]}
    files["preprocessing.json"] = json_text(spec | getattr(data, "preprocessing", dict)()).encode()
    output_dir = Path(config.output_dir or Path(config.ckpt_path).resolve().parent / "exports")
    made = next((path for path in (*reversed(output_dir.parents), output_dir) if not path.exists()), None)
    lock(output_dir)  # a folder that cannot be written, or one (or inside one) that a command is writing: refused
    earlier = {name for name in files if (output_dir / name).exists()}
    try:
        with ExitStack() as stack:
            for name, content in files.items():
                stack.enter_context(replaced(output_dir / name)).write(content)
    except BaseException:  # the folders made here go too (errors.run_main lets go of the lock)
        if made:
            shutil.rmtree(made, ignore_errors=True)
        raise
    for name in files:
        print(f"Wrote {output_dir / name}" + " (replaced the earlier one)" * (name in earlier))


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: export(build_parser().parse_args(argv)), USER_ERRORS, exiting=argv is None)
