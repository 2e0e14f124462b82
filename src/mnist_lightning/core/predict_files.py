"""predict.py's inputs read from files (the with_digit_photos option): any data module that has ``read_file``."""

import sys
from pathlib import Path

import torch

from .errors import UserError


def read_inputs(data, inputs: list[str], shape: torch.Size) -> tuple[list[str], torch.Tensor]:
    """The samples of the files given, each named, read by the data module's ``read_file`` (of a folder, the files
    that its ``can_read`` accepts); a file that cannot be read, or whose samples do not fit, is skipped, saying why."""
    if not hasattr(data, "read_file"):
        name = type(data).__name__
        raise UserError(f"{name} reads no files (it has no read_file): predict without inputs, or add read_file to it.")
    can_read, names, samples = getattr(data, "can_read", lambda path: True), [], []
    for entry in map(Path, inputs):  # a folder with no file to read is read itself: its message says why it failed
        for path in sorted(path for path in entry.glob("*") if path.is_file() and can_read(path)) or [entry]:
            try:
                got = data.read_file(path)
                if got.shape[1:] != shape:  # (what has no shape is skipped too)
                    raise ValueError(f"read as a batch of shape {tuple(got.shape)}, not of samples {tuple(shape)}")
            except Exception as error:  # one bad file (of any kind of damage) must not cost the others
                print(f"Skipped {path}: {str(error).strip()}.", file=sys.stderr)
            else:
                names += [f"{path}[{i}]" if len(got) > 1 else str(path) for i in range(len(got))]
                samples.append(got)
    if not samples:
        raise UserError(f"No input could be read: pass files that {type(data).__name__}.read_file() reads, or none.")
    return names, torch.cat(samples)
