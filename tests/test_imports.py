"""The import budget of the entry points: a run imports nothing that only some runs need (TensorBoard, ONNX,
plots, image decoding) beyond what importing Lightning imports anyway.

Importing torch and Lightning is the floor every Lightning program pays. What a run
imports on top of it is measured here, in fresh processes: the modules each entry point leaves in
``sys.modules``, minus those of ``python -c "import lightning, jsonargparse"``. (That floor already holds what
Lightning's own imports bring: torchvision, PIL.Image, and matplotlib.pyplot where matplotlib is installed,
through torchmetrics.) Timing is never tested; what is imported is.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY_RUN

ROOT = Path(__file__).resolve().parents[1]
PLOTS = "the plots of a finished training run"
# What only some runs need, by top-level package or by module of this project, and the runs that need it.
ONLY_SOME_RUNS = {
    "tensorboard": "--logger tensorboard",
    "tensorboardX": "--logger tensorboard",
    "onnx": "export.py --formats onnx",
    "onnxscript": "export.py --formats onnx",
    "onnxruntime": "checking an ONNX export",
    "matplotlib": PLOTS,
    "mnist_lightning.core.plots": PLOTS,
}
# Runs the entry points in one process, one after another, and records sys.modules after each.
RUNNER = """
import json, runpy, sys
steps = json.loads(sys.argv[1])
record = {}
for script, *argv in steps:
    sys.argv = [script, *argv]
    sys.path.insert(0, script.rpartition("/")[0])  # as `python scripts/x.py` does: its folder first
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise
    record[script] = sorted(sys.modules)
print(json.dumps(record))
"""


def modules_after(*steps: list[str]) -> dict[str, set[str]]:
    """For each ``[script, *argv]`` run in turn in one fresh process, the modules imported by the end of it."""
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(steps)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(result.stdout.strip().splitlines()[-1])
    return {script: set(modules) for script, modules in record.items()}


@pytest.fixture(scope="module")
def floor() -> set[str]:
    code = "import json, sys, lightning, jsonargparse; print(json.dumps(sorted(sys.modules)))"
    command = [sys.executable, "-c", code]
    return set(json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout))


def beyond_floor(modules: set[str], floor: set[str], allowed: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """The modules of ONLY_SOME_RUNS in ``modules`` but not in ``floor``, by the run that needs them, leaving out
    the runs in ``allowed``."""
    found: dict[str, list[str]] = {}
    for name in sorted(modules - floor):
        run = ONLY_SOME_RUNS.get(name, ONLY_SOME_RUNS.get(name.split(".")[0]))
        if run is not None and run not in allowed:
            found.setdefault(run, []).append(name)
    return found


def test_help_of_every_entry_point_imports_nothing_only_some_runs_need(floor):
    scripts = ["scripts/train.py", "scripts/evaluate.py", "scripts/predict.py", "scripts/export.py"]
    after = modules_after(*([script, "--help"] for script in scripts))
    assert "mnist_lightning.core.export" in after["scripts/export.py"]  # each entry point did run
    earlier = floor
    for script in scripts:
        assert beyond_floor(after[script], earlier) == {}, script
        earlier = after[script]


def test_a_training_run_imports_neither_tensorboard_nor_onnx(fake_mnist, tmp_path, floor):
    run_dir = tmp_path / "run"
    flags = ["--data.data_dir", str(fake_mnist), "--output_dir", str(run_dir), *TINY_RUN]
    after = modules_after(["scripts/train.py", *flags])["scripts/train.py"]
    assert (run_dir / "metrics.json").is_file()  # the run did train and test
    # A finished run draws its plots when matplotlib is installed: that is the one run that needs them.
    assert beyond_floor(after, floor, allowed=(PLOTS,)) == {}


@pytest.mark.parametrize("script", ["train", "evaluate", "predict", "export", "devices"])
def test_a_python_without_the_project_says_which_python_to_use(script):
    """`python scripts/train.py` from a Python that lacks the project (here: without its site-packages, -S)."""
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-S", f"scripts/{script}.py", "--help"], cwd=root, capture_output=True, text=True
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "cannot import" in result.stderr and "the project is not installed in it" in result.stderr
    assert f"scripts/{script}.py --help" in result.stderr
