"""The import budget of the entry points: a run imports nothing that only some runs need (TensorBoard, ONNX,
plots, image decoding) beyond what importing Lightning imports anyway.

Importing torch and Lightning is the floor every Lightning program pays. What a run
imports on top of it is measured here, in fresh processes: the modules each entry point leaves in
``sys.modules``, minus those of ``python -c "import lightning, jsonargparse"``. (That floor already holds what
Lightning's own imports bring: torchvision, PIL.Image, and matplotlib.pyplot where matplotlib is installed,
through torchmetrics.) Timing is never tested; what is imported is. And the console commands pip installs run
the same entry points as the scripts.
"""

import json
import subprocess
import sys
import sysconfig
from importlib import import_module
from importlib.metadata import distribution
from pathlib import Path

import pytest
from helpers import QUICK

pytestmark = pytest.mark.slow  # every test starts Python processes of its own
ROOT = Path(__file__).resolve().parents[1]
PLOTS = "the plots of a finished training run"
# What only some runs need, by top-level package or by module of this project, and the runs that need it.
ONLY_SOME_RUNS = {
    "tensorboard": "--logger TensorBoardLogger",
    "tensorboardX": "--logger TensorBoardLogger",
    "onnx": "export.py --formats onnx",
    "onnxscript": "export.py --formats onnx",
    "onnxruntime": "checking an ONNX export",
    "matplotlib": PLOTS,  # only with_plots
    "mnist_lightning.core.plots": PLOTS,  # only with_plots
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


def test_a_training_run_imports_neither_tensorboard_nor_onnx(task, tmp_path, floor):
    """scripts/train.py on the tests' own task (tests/command.py train, the task named by the environment)."""
    run_dir = tmp_path / "run"
    after = modules_after(["tests/command.py", "train", "--output_dir", str(run_dir), *QUICK])["tests/command.py"]
    assert (run_dir / "metrics.json").is_file()  # the run did train and test
    # A finished run draws its plots when matplotlib is installed: that is the one run that needs them.
    assert beyond_floor(after, floor, allowed=(PLOTS,)) == {}


def test_the_console_commands_run_the_entry_points_as_the_scripts_do():
    """pyproject.toml's [project.scripts], as `pip install -e .` (make install) installs them: `mnist-lightning-train`
    runs what `python scripts/train.py` runs, and exits with its status."""
    installed = {entry.name: entry for entry in distribution("mnist-lightning").entry_points}
    bin_dir = Path(sysconfig.get_path("scripts"))
    for command in ["train", "evaluate", "predict", "export"]:
        name = f"mnist-lightning-{command}"
        assert name in installed and (bin_dir / name).is_file(), f"{name} is not installed: pip install -e . again"
        assert installed[name].load() is import_module(f"mnist_lightning.core.{command}").main
    for command in ([bin_dir / "mnist-lightning-train"], [sys.executable, "scripts/train.py"]):
        result = subprocess.run([*command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0 and "--max_epochs" in result.stdout, result.stderr
    missing = [bin_dir / "mnist-lightning-evaluate", "--ckpt_path", "missing.ckpt"]
    result = subprocess.run(missing, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 2 and result.stderr.startswith("Error: missing.ckpt"), result.stderr
