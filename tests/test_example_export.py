"""The example's export: its data module's recipe for inputs (preprocessing()) in preprocessing.json, beside the
shapes of the model's input and output, so that a server can make the model's inputs from pixels. The export itself,
for any task: test_predict.py, test_own_data.py."""

import json

import example
from helpers import TINY_RUN

from mnist_lightning.core import export
from mnist_lightning.core.train import main as train_main

pytestmark = [example.data, example.task]


def test_an_export_of_the_example_gives_its_normalization(fake_mnist, tmp_path):
    run = tmp_path / "run"
    assert train_main(["--data.data_dir", str(fake_mnist), "--output_dir", str(run), *TINY_RUN]) == 0
    flags = ["--ckpt_path", str(run / "checkpoints" / "last.ckpt"), "--output_dir", str(tmp_path / "export")]
    assert export.main([*flags, "--formats", "pt2"]) == 0
    spec = json.loads((tmp_path / "export" / "preprocessing.json").read_text())
    assert spec["normalize"] == {"mean": 0.1307, "std": 0.3081, "formula": "(uint8 / 255 - mean) / std"}
    assert spec["input"] == {"name": "input", "shape": ["batch", 1, 28, 28]}
    assert spec["output"] == {"name": "output", "shape": ["batch", 10]}
