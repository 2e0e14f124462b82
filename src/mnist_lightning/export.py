"""Export the trained network for serving without Lightning: torch.export (.pt2) and, with the onnx extra, ONNX.

Both take a batch of model inputs (float32 ``[batch, *input_shape]``, any batch size, as the data module makes
them) and return one score per class (the ONNX output is named ``logits``). ``preprocessing.json`` beside them
says what the inputs and outputs are and, where the data module says it (the MNIST one does, for pictures),
how to make the inputs from raw data, step by step.
"""

import importlib.util
import sys
from pathlib import Path

import torch
from jsonargparse import ArgumentParser, Namespace

from .checkpoints import CheckpointError, load_checkpoint
from .cli import USER_ERRORS, ReadableHelp, parse_command_line
from .errors import UserError, run_main
from .records import discard_new_run, lock, write_json

FORMATS = ("pt2", "onnx")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="export.py", description=__doc__.splitlines()[0], exit_on_error=False, formatter_class=ReadableHelp
    )
    parser.add_argument("--ckpt_path", type=str, required=True, help="A .ckpt written by scripts/train.py.")
    parser.add_argument(
        "--output_dir",
        type=str | None,
        default=None,
        help="Where the files go (unless given, exports/ beside the checkpoint).",
    )
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS), help="pt2, onnx or both.")
    return parser


def preprocessing_spec(input_shape: list[int], num_classes: int, datamodule) -> dict:
    """What preprocessing.json holds: the model's input and output, and the data module's own recipe for inputs."""
    spec = {
        "input": {"name": "images", "dtype": "float32", "shape": ["batch", *input_shape]},
        "output": {"name": "logits", "dtype": "float32", "shape": ["batch", num_classes], "meaning": "class scores"},
    }
    return spec | (datamodule.preprocessing() if hasattr(datamodule, "preprocessing") else {})


def export(config: Namespace) -> dict[str, Path]:
    if "onnx" in config.formats and not all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript")):
        raise UserError('ONNX export needs the onnx extra: pip install -e ".[onnx]" (or pass --formats pt2).')
    output_dir = Path(config.output_dir) if config.output_dir else Path(config.ckpt_path).resolve().parent / "exports"
    new = not output_dir.exists()
    lock(output_dir)  # before any work: a folder that cannot be written, or one another export is writing
    try:
        checkpoint = load_checkpoint(config.ckpt_path)
    except CheckpointError:
        if new:
            discard_new_run(output_dir)
        raise
    net = checkpoint.model.net.eval()  # the plain nn.Module; Lightning stays behind
    output_dir.mkdir(parents=True, exist_ok=True)
    earlier = {path for path in output_dir.iterdir() if path.name in ("model.pt2", "model.onnx", "preprocessing.json")}
    hparams = checkpoint.model.hparams
    example = (torch.zeros(2, *hparams.input_shape),)
    dynamic = ({0: torch.export.Dim("batch")},)  # by position: a network's forward may name its input anything
    paths = {}
    if "pt2" in config.formats:
        paths["pt2"] = output_dir / "model.pt2"
        torch.export.save(torch.export.export(net, example, dynamic_shapes=dynamic), paths["pt2"])
    if "onnx" in config.formats:
        paths["onnx"] = output_dir / "model.onnx"
        # verbose=False: without it torch prints each step of the conversion; the command reports what it wrote.
        options = {"input_names": ["images"], "output_names": ["logits"], "external_data": False, "verbose": False}
        torch.onnx.export(net, example, paths["onnx"], dynamo=True, dynamic_shapes=dynamic, **options)
    paths["preprocessing"] = output_dir / "preprocessing.json"
    write_json(
        paths["preprocessing"], preprocessing_spec(hparams.input_shape, hparams.num_classes, checkpoint.datamodule)
    )
    for name, path in paths.items():
        print(f"{name}: {path}" + (" (replaced the earlier one)" if path in earlier else ""))
    return paths


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: export(parse_command_line(build_parser(), argv)), USER_ERRORS)


if __name__ == "__main__":
    sys.exit(main())
