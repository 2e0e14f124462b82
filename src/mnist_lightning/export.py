"""Export the trained SimpleNN for serving without Lightning: torch.export (.pt2) and, with the onnx extra, ONNX.

Both take normalized images, float32 [batch, 1, 28, 28] (``mnist.normalize`` of uint8 pixels, MNIST polarity:
white digit on black), with any batch size, and return the 10 class scores (logits).
"""

import importlib.util
import sys
from pathlib import Path

import torch
from jsonargparse import ArgumentParser, Namespace

from .checkpoints import load_checkpoint
from .cli import USER_ERRORS
from .errors import UserError, run_main
from .records import write_json

FORMATS = ("pt2", "onnx")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="export.py", description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt_path", type=str, required=True, help="A .ckpt written by scripts/train.py.")
    parser.add_argument("--output_dir", type=str | None, default=None, help="Default: exports/ beside the checkpoint.")
    parser.add_argument("--formats", type=list[str], default=list(FORMATS), help="Any of pt2, onnx.")
    return parser


def export(config: Namespace) -> dict[str, Path]:
    unknown = set(config.formats) - set(FORMATS)
    if unknown:
        raise UserError(f"--formats {sorted(unknown)} unknown; choose from {list(FORMATS)}.")
    if "onnx" in config.formats and not all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript")):
        raise UserError('ONNX export needs the onnx extra: pip install -e ".[onnx]" (or pass --formats [pt2]).')
    checkpoint = load_checkpoint(config.ckpt_path)
    net = checkpoint.model.net.eval()  # the plain nn.Module; Lightning stays behind
    output_dir = Path(config.output_dir) if config.output_dir else Path(config.ckpt_path).resolve().parent / "exports"
    output_dir.mkdir(parents=True, exist_ok=True)
    example = (torch.zeros(2, 1, 28, 28),)
    dynamic = {"images": {0: torch.export.Dim("batch")}}
    paths = {}
    if "pt2" in config.formats:
        paths["pt2"] = output_dir / "model.pt2"
        torch.export.save(torch.export.export(net, example, dynamic_shapes=dynamic), paths["pt2"])
    if "onnx" in config.formats:
        paths["onnx"] = output_dir / "model.onnx"
        options = {"dynamo": True, "dynamic_shapes": dynamic, "input_names": ["images"], "external_data": False}
        torch.onnx.export(net, example, paths["onnx"], **options)
    data = checkpoint.datamodule
    write_json(
        output_dir / "preprocessing.json",
        {"input": "float32 [batch, 1, 28, 28]", "normalize": {"mean": data.mean, "std": data.std, "scale": 1 / 255}},
    )
    for name, path in paths.items():
        print(f"{name}: {path}")
    return paths


def main(argv: list[str] | None = None) -> int:
    return run_main(lambda: export(build_parser().parse_args(argv)), USER_ERRORS)


if __name__ == "__main__":
    sys.exit(main())
