"""The ladder: plain PyTorch -> Fabric -> Trainer. scripts/train_pytorch.py and scripts/train_fabric.py each stand on
their own (torch, torchvision, Lightning and the network), scripts/train_trainer.py takes Fabric's flags and the
package's LightningModule and DataModule; each rung is shorter than the one below, Fabric's differs from the plain
one in its device lines only; from the same seed the rungs (and train.py) end with bit-identical weights and losses,
compiled or not; a mistake ends in one line on stderr, without a traceback.

The rungs run in this process where a test allows it (their ``__main__`` block, as ``python scripts/NAME`` runs
it); a stop by a signal, and compiled runs (each compiles its own code), run as processes: marked slow."""

import ast
import difflib
import importlib.util
import json
import os
import runpy
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import example
import pytest
import torch
from helpers import FAKE_VAL
from torchvision.datasets import MNIST

from mnist_lightning.core.train import main as train_main
from mnist_lightning.lightning_module import Classifier
from mnist_lightning.model import SimpleNN

pytestmark = [example.data, example.task]

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
RUNG_FILES = {"plain": SCRIPTS / "train_pytorch.py", "fabric": SCRIPTS / "train_fabric.py"}
RUNG_FILES["trainer"] = SCRIPTS / "train_trainer.py"
# Not the defaults on purpose: SGD with momentum, a constant schedule, a batch that leaves a short last batch
# (1,000 training images / 64), a learning rate small enough that the losses stay far from zero.
FLAGS = ["--batch_size", "64", "--max_epochs", "3", "--seed", "3"]
FLAGS += ["--optimizer", "sgd", "--lr", "0.003", "--lr_schedule", "constant", "--deterministic", "true"]
# A line of Fabric's file that is not in the plain one, or the other way round, belongs to a block of changed lines
# that mentions one of these: the device, or what Fabric does about it.
DEVICE_WORDS = ("fabric", "lightning", "device", ".to(", "sampler", "rank", "launch", "backward", "print")
DEVICE_WORDS += ("accelerator", "strategy", "precision", "num_nodes", "autocast", "scaler", "distributed")


def environment() -> dict[str, str]:
    """This process's environment, with the package of this checkout importable by the scripts."""
    return os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}


def run_script(name: str, *flags: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """A script in a process of its own, as a user runs it."""
    command = [sys.executable, str(SCRIPTS / name), *flags]
    return subprocess.run(command, capture_output=True, text=True, env=environment(), cwd=cwd, timeout=600)


@contextmanager
def torch_settings_kept():
    """The process-wide settings a rung changes, as they were before it (the other tests expect them)."""
    precision, deterministic = torch.get_float32_matmul_precision(), torch.are_deterministic_algorithms_enabled()
    cublas = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.use_deterministic_algorithms(deterministic)
        if cublas is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)


def run_main_block(name: str, *flags: str) -> int | str | None:
    """``python scripts/NAME FLAGS`` in this process: its folder on sys.path and its ``__main__`` block run; the code
    it exits with (SystemExit's: a message is exit status 1), None if it returns."""
    path = SCRIPTS / name
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(SCRIPTS))
        patch.setattr(sys, "argv", [str(path), *flags])
        try:
            runpy.run_path(str(path), run_name="__main__")
        except SystemExit as exit:
            return exit.code
    return None


def run_here(name: str, *flags: str) -> int | str | None:
    """:func:`run_main_block`, leaving torch's process-wide settings as they were."""
    with torch_settings_kept():
        return run_main_block(name, *flags)


def run_in_process(capsys, name: str, *flags: str) -> subprocess.CompletedProcess:
    """:func:`run_here`, with its exit status, stdout and stderr as Python gives them at exit: a SystemExit with a
    message prints it on stderr and exits with status 1."""
    capsys.readouterr()
    code = run_here(name, *flags)
    out, err = capsys.readouterr()
    if isinstance(code, str):
        err, code = f"{err}{code}\n", 1
    return subprocess.CompletedProcess([name, *flags], code or 0, out, err)


def code_lines(path: Path) -> list[str]:
    """The file's lines without its module docstring, blank lines, comment lines or indentation."""
    text = path.read_text()
    body = text[text.index('"""', text.index('"""') + 3) + 3 :]
    return [line.strip() for line in body.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_each_rung_is_one_file_of_torch_torchvision_lightning_and_the_network():
    """The plain and Fabric rungs import the network alone from the package; the Trainer's, the LightningModule and
    DataModule (no machinery of the package's core/), and its flags from the Fabric rung."""
    allowed = set(sys.stdlib_module_names) | {"torch", "torchvision", "lightning"}
    package = SimpleNN.__module__.rpartition(".")[0]
    for rung, path in RUNG_FILES.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add(node.module)
        network = {name for name in imported if name.split(".")[0] not in allowed}
        if rung == "trainer":
            assert network == {f"{package}.lightning_module", f"{package}.datamodule", "train_fabric"}, network
        else:  # from <package>.model import SimpleNN, no more
            assert network == {SimpleNN.__module__}, (rung, network)
        assert (rung != "plain") == any(name.startswith("lightning") for name in imported), rung


def test_each_rung_is_shorter_than_the_one_below():
    lines = {rung: path.read_text().splitlines() for rung, path in RUNG_FILES.items()}
    code = {
        rung: [line for line in text if line.strip() and not line.strip().startswith("#")]
        for rung, text in lines.items()
    }
    for counted in (lines, code):
        assert len(counted["trainer"]) < len(counted["fabric"]) < len(counted["plain"]), {
            rung: len(text) for rung, text in counted.items()
        }


def test_the_rungs_differ_only_in_device_lines():
    """What `sdiff scripts/train_pytorch.py scripts/train_fabric.py` shows: a few blocks of changed lines, each
    about the device (choosing it, moving to it, precision, processes, who writes and prints)."""
    plain, fabric = code_lines(RUNG_FILES["plain"]), code_lines(RUNG_FILES["fabric"])
    removed, added = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=plain, b=fabric, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        block = plain[i1:i2] + fabric[j1:j2]
        assert any(word in line.lower() for line in block for word in DEVICE_WORDS), block
        removed += plain[i1:i2]
        added += fabric[j1:j2]
    assert len(removed) > 10 and len(added) > 10  # the rungs do differ: in their device lines
    for changed, lines in ((removed, plain), (added, fabric)):
        assert len(changed) < len(lines) / 3, changed  # and most of the program is the same
    undescribed = [line for line in removed + added if not any(word in line.lower() for word in DEVICE_WORDS)]
    assert len(undescribed) <= 10, undescribed  # most changed lines name the device or Fabric themselves


def final_weights(run_dir: Path, rung: str) -> dict[str, torch.Tensor]:
    if rung in ("trainer", "product"):
        state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        return {key.removeprefix("net."): value for key, value in state.items() if key.startswith("net.")}
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]


def compare(data_dir: Path, output_dir: Path, *flags: str) -> dict:
    """scripts/compare.py: the three rungs, each in its own process as users run them (in one process they
    would share torch.compile's caches, which hides what differs between them); its compare.json."""
    data = ["--data_dir", str(data_dir), "--val_size", str(FAKE_VAL)]
    result = run_script("compare.py", *data, *flags, "--json", "--output_dir", str(output_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((output_dir / "compare.json").read_text())


@pytest.fixture(scope="module")
def comparison(fake_mnist, tmp_path_factory) -> Path:
    """The three rungs and scripts/train.py (``product_0``) with the same settings, one after the other in this
    process (what scripts/compare.py runs as processes, tested in test_compare.py): their run folders."""
    output_dir = tmp_path_factory.mktemp("ladder")
    for rung, path in RUNG_FILES.items():
        data = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL)]
        assert run_here(path.name, *data, *FLAGS, "--output_dir", str(output_dir / f"{rung}_0")) is None, rung
    data = ["--data.data_dir", str(fake_mnist), "--data.val_size", str(FAKE_VAL), "--enable_progress_bar", "false"]
    with torch_settings_kept():
        assert train_main([*data, *FLAGS, "--output_dir", str(output_dir / "product_0")]) == 0
    return output_dir


def assert_bit_identical(output_dir: Path, rung: str, reference: str = "plain") -> None:
    """The rung's final weights, per-epoch losses and test results equal the reference's, bit for bit."""
    metrics = {name: json.loads((output_dir / f"{name}_0" / "metrics.json").read_text()) for name in (rung, reference)}
    weights = {name: final_weights(output_dir / f"{name}_0", name) for name in (rung, reference)}
    assert weights[rung].keys() == weights[reference].keys() == SimpleNN((1, 28, 28), 10).state_dict().keys()
    assert all(torch.equal(weights[rung][key], weights[reference][key]) for key in weights[reference]), rung
    losses = {
        name: [(row["train/loss"], row["val/loss"], row["val/acc"]) for row in run["history"]]
        for name, run in metrics.items()
    }
    assert losses[rung] == losses[reference], rung  # exact equality of float32 values, not closeness
    results = {name: [run[key] for key in ("test/loss", "test/acc", "best_val/acc")] for name, run in metrics.items()}
    assert results[rung] == results[reference], rung
    first, last = losses[reference][0][0], losses[reference][-1][0]
    assert len(losses[reference]) == 3 and 0.001 < last < first / 10  # it learned


def test_plain_and_fabric_end_bit_identical(comparison):
    assert_bit_identical(comparison, "fabric")


def test_on_off_flags_are_recorded_as_booleans(comparison):
    for rung in RUNG_FILES:
        metrics = json.loads((comparison / f"{rung}_0" / "metrics.json").read_text())
        assert metrics["deterministic"] is True and metrics["compile"] is False, rung


def test_plain_fabric_and_trainer_end_bit_identical(comparison):
    assert_bit_identical(comparison, "trainer")
    assert_bit_identical(comparison, "trainer", reference="fabric")


def test_train_py_ends_bit_identical_to_the_rungs(comparison):
    """The product trains as the ladder does: what the README promises of scripts/train.py."""
    assert_bit_identical(comparison, "product")
    assert_bit_identical(comparison, "product", reference="trainer")


@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def compiled(fake_mnist, tmp_path_factory, request) -> dict:
    """compare.py --compile true, on each device. Adam at batch 512, with batches of other sizes (the last, and the
    validation batches): code compiled for the first size it sees, or by earlier runs, breaks the parity; so did,
    on a GPU, the Trainer's compiling the network for the sanity check's validation first (it now compiles as
    training starts, as the other rungs do). On a GPU, only the rungs that departed: a process costs most of a
    minute there, and `pytest -m gpu` must fit the minutes a GPU is lent (plain and Fabric: compare.py in gpu_check)."""
    output_dir = tmp_path_factory.mktemp("compiled") / "compare"
    flags = ["--batch_size", "512", "--max_epochs", "3", "--compile", "true"]
    if request.param == "cuda":
        flags += ["--accelerator", "gpu", "--rungs", "plain", "trainer"]
    return compare(fake_mnist, output_dir, *flags)


@pytest.mark.slow
def test_compile_keeps_parity_and_checkpoint_keys(compiled):
    for gap in compiled["parity"].values():
        assert gap["weights_equal"] and gap["losses_equal"], gap
    # No "_orig_mod." in any checkpoint: each loads into a plain, uncompiled SimpleNN...
    output_dir = Path(compiled["settings"]["output_dir"])
    for rung in compiled["settings"]["rungs"]:
        for path in (output_dir / f"{rung}_0" / "checkpoints").iterdir():
            saved = torch.load(path, weights_only=True)
            assert not any("_orig_mod" in key for key in saved.get("state_dict", saved.get("model"))), path
        SimpleNN((1, 28, 28), 10).load_state_dict(final_weights(output_dir / f"{rung}_0", rung))
    # ...and the Trainer's checkpoint loads into the LightningModule, compiled again or not.
    last = output_dir / "trainer_0" / "checkpoints" / "last.ckpt"
    model = Classifier.load_from_checkpoint(last, map_location="cpu", weights_only=True)  # saved on the GPU there
    assert model.hparams.compile is True
    model.on_train_start()  # what the Trainer calls: compiles in place
    uncompiled = SimpleNN((1, 28, 28), 10)
    uncompiled.load_state_dict(model.net.state_dict())  # same keys compiled or not
    images = torch.randn(5, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(model(images), uncompiled(images))


@pytest.mark.slow
def test_compiled_trainer_is_bit_identical_to_the_other_rungs(compiled):
    for pair in (pair for pair in compiled["parity"] if pair.endswith("trainer")):
        gap = compiled["parity"][pair]
        assert gap["weights_equal"] and gap["losses_equal"], (pair, gap)


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one line a refused run ends with, checked to be the only error and not a traceback or a usage block."""
    assert result.returncode != 0 and "Traceback" not in result.stderr and "usage:" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and result.stderr.strip().endswith(errors[0]), result.stderr
    return errors[0]


@pytest.mark.parametrize("rung", ["plain", "fabric"])
@pytest.mark.parametrize(
    ("flags", "phrase"),
    [
        (["--batch_size", "0"], "Error: --batch_size must be at least 1, got 0"),
        (["--max_epochs", "0"], "Error: --max_epochs must be at least 1, got 0"),
        (["--val_size", "-5"], "Error: --val_size must be at least 1, got -5"),
        (["--lr", "nan"], "Error: --lr must be above 0 and at most 3.4e37, got nan"),
        (["--lr", "1e38"], "Error: --lr must be above 0 and at most 3.4e37, got 1e+38"),
        (["--seed", "-1"], "Error: --seed must be between 0 and 2**32 - 1, got -1"),
        (
            ["--optimizer", "sgd", "--lr", "3.4e37"],
            "Error: training diverged in epoch 0 (loss nan): use a smaller --lr",
        ),
        (["--val_size", "1200"], "Error: --val_size must be below 1200, the number of training images"),
        (["--optimizer", "rmsprop"], "argument --optimizer: invalid choice: 'rmsprop'"),
        (["--no_such_flag"], "unrecognized arguments: --no_such_flag"),
    ],
)
def test_the_rungs_refuse_mistakes_in_one_line(fake_mnist, tmp_path, capsys, rung, flags, phrase):
    run_dir = tmp_path / "run"
    data = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL)]
    result = run_in_process(capsys, RUNG_FILES[rung].name, *data, "--output_dir", str(run_dir), *flags)
    assert phrase in error_line(result)
    assert not run_dir.exists()
    if ", got " in phrase or "argument" in phrase:  # refused by the parser: that line alone, status 2
        assert result.returncode == 2 and result.stderr.strip() == error_line(result), result.stderr


@pytest.mark.parametrize(
    ("flags", "phrase"),
    [
        (["--batch_size", "0"], "Error: --batch_size must be at least 1, got 0"),
        (["--lr", "nan"], "Error: --lr must be above 0 and at most 3.4e37, got nan"),
        (["--no_such_flag"], "unrecognized arguments: --no_such_flag"),
    ],
)
def test_trainer_rung_refuses_flags_as_the_fabric_rung_does(fake_mnist, tmp_path, capsys, flags, phrase):
    """Its flags are the Fabric rung's, refused by the same parser: that line alone, status 2."""
    run_dir = tmp_path / "run"
    data = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL)]
    result = run_in_process(capsys, RUNG_FILES["trainer"].name, *data, "--output_dir", str(run_dir), *flags)
    assert phrase in error_line(result)
    assert result.returncode == 2 and result.stderr.strip() == error_line(result), result.stderr
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("flags", "phrase"),
    [
        (["--repeats", "0"], "Error: --repeats must be at least 1, got 0"),
        (["--max_epochs", "0"], "Error: --max_epochs must be at least 1, got 0"),
        (["--rungs", "foo"], "Error: argument --rungs: invalid choice: 'foo'"),
        (["--lr", "nan"], "Error: --lr must be above 0 and at most 3.4e37, got nan"),
        (["--seed", "-1"], "Error: --seed must be between 0 and 2**32 - 1, got -1"),
        (["--val_size", "1200"], "Error: --val_size must be below 1200, the number of training images"),
    ]
    + ([] if torch.cuda.is_available() else [(["--accelerator", "gpu"], "Error: --accelerator gpu: PyTorch finds")]),
)
def test_compare_refuses_mistakes_in_one_line_before_making_anything(fake_mnist, tmp_path, capsys, flags, phrase):
    """The rungs' own checks, made by compare.py before it makes its folder or starts a rung (the data's too)."""
    data = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL)]
    result = run_in_process(capsys, "compare.py", *data, "--output_dir", str(tmp_path / "cb"), *flags)
    assert result.returncode == 2 and result.stderr.strip() == error_line(result), result.stderr
    assert phrase in error_line(result)
    assert not (tmp_path / "cb").exists()


@pytest.mark.parametrize("script", ["train_pytorch.py", "train_fabric.py", "compare.py"])
def test_no_mnist_and_no_network_is_one_line_saying_where_to_put_it(tmp_path, capsys, monkeypatch, script):
    """--data_dir of a folder that does not exist, offline (here: MNIST's mirrors are a port nothing listens on)."""
    data_dir = tmp_path / "none" / "data"
    monkeypatch.setattr(MNIST, "mirrors", ["http://127.0.0.1:9/"])
    result = run_in_process(capsys, script, "--data_dir", str(data_dir), "--output_dir", str(tmp_path / "o"))
    where = f"Error: MNIST could not be read from {data_dir / 'MNIST' / 'raw'} nor downloaded: put its four .gz files"
    assert result.returncode == 1 and error_line(result).startswith(where), result.stderr
    assert "Connection refused" in error_line(result)  # what the download got
    assert not (tmp_path / "none").exists() and not (tmp_path / "o").exists()  # no folder made, not even empty


def start_as_from_a_shell(command: list[str]) -> subprocess.Popen:
    """A command started as a user's shell starts it: Ctrl-C is delivered, not ignored as in a background job; its
    own process group, which a terminal's Ctrl-C reaches as a whole."""
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment() | {"PYTHONUNBUFFERED": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        start_new_session=True,
    )


def stop_a_training_rung(fake_mnist: Path, run_dir: Path, rung: str, signum: int) -> tuple[int, str]:
    """The rung started as from a shell, sent ``signum`` once it has written its first checkpoint (as Ctrl-C reaches
    the terminal's whole process group, SIGTERM the process alone): its exit status and stderr."""
    flags = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL), "--max_epochs", "1000000"]
    process = start_as_from_a_shell([sys.executable, str(RUNG_FILES[rung]), *flags, "--output_dir", str(run_dir)])
    last = run_dir / "checkpoints" / ("last.ckpt" if rung == "trainer" else "last.pt")
    try:
        deadline = time.monotonic() + 300
        while not last.exists() and time.monotonic() < deadline:  # training
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        if signum == signal.SIGINT:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
        err = process.communicate(timeout=120)[1]
    finally:
        process.kill()
    return process.returncode, err


@pytest.mark.slow
@pytest.mark.parametrize("rung", ["plain", "fabric", "trainer"])
def test_ctrl_c_stops_a_rung_in_one_line(fake_mnist, tmp_path, rung):
    code, err = stop_a_training_rung(fake_mnist, tmp_path, rung, signal.SIGINT)
    assert code == 130 and err.strip().splitlines()[-1] == "Interrupted." and "Traceback" not in err, err


@pytest.mark.slow
def test_sigterm_stops_the_trainer_rung_in_one_line(fake_mnist, tmp_path):
    """Lightning stops its fit after the batch and ends it with SystemExit (status 0): the rung says it and exits as a
    process that SIGTERM ended (the other rungs simply end)."""
    code, err = stop_a_training_rung(fake_mnist, tmp_path, "trainer", signal.SIGTERM)
    assert code == 143 and err.strip().splitlines()[-1] == "Stopped by SIGTERM." and "Traceback" not in err, err


def processes_naming(path: Path) -> dict[int, str]:
    """This machine's processes whose command line names ``path``: their ids and command lines."""
    found = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # a process that ended meanwhile
            continue
        if str(path) in line:
            found[int(cmdline.parent.name)] = line
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds processes through /proc")
@pytest.mark.parametrize(("name", "said"), [("SIGINT", "Interrupted."), ("SIGTERM", "Stopped by SIGTERM.")])
def test_stopping_compare_stops_the_rung_it_runs(fake_mnist, tmp_path, name, said):
    """Ctrl-C (to the terminal's whole process group) or SIGTERM (to compare.py alone, as `kill` sends it) while a
    rung trains: one line, 130 or 143, and no rung left training into the run folder."""
    output_dir = tmp_path / "cb"
    flags = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL), "--max_epochs", "1000000", "--rungs", "plain"]
    flags += ["--output_dir", str(output_dir)]
    process = start_as_from_a_shell([sys.executable, str(SCRIPTS / "compare.py"), *flags])
    try:
        deadline = time.monotonic() + 300
        while not (output_dir / "plain_0" / "checkpoints" / "last.pt").exists() and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        signum = getattr(signal, name)
        if name == "SIGINT":
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
        err = process.communicate(timeout=120)[1]
        left = processes_naming(output_dir)
    finally:
        process.kill()
        for pid in processes_naming(output_dir):  # a rung compare.py left behind: not left training after the test
            os.kill(pid, signal.SIGKILL)
    assert process.returncode == 128 + signum and err.strip().splitlines()[-1] == said and "Traceback" not in err, err
    assert left == {}, left


@pytest.mark.parametrize("rung", ["plain", "fabric", "trainer"])
def test_the_rungs_refuse_a_used_run_folder(fake_mnist, tmp_path, capsys, rung):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "metrics.json").write_text("{}")
    flags = ["--data_dir", str(fake_mnist), "--output_dir", str(tmp_path / "used")]
    result = run_in_process(capsys, RUNG_FILES[rung].name, *flags)
    assert "holds an earlier run's files: pass a new --output_dir" in error_line(result)
    assert [path.name for path in (tmp_path / "used").iterdir()] == ["metrics.json"]


@pytest.mark.parametrize("rung", ["fabric", "trainer"])
@pytest.mark.parametrize(
    ("flags", "phrase"),
    [
        (["--precision", "17-fancy"], "Error: Precision '17-fancy' is invalid. Allowed precision values:"),
        (["--devices", "0"], "(devices='0')` value is not a valid input"),  # Fabric's or Trainer's
        (["--strategy", "fancy"], "Error: You selected an invalid strategy name: `strategy='fancy'`"),
        (["--accelerator", "fancy"], "Error: You selected an invalid accelerator name: `accelerator='fancy'`"),
    ],
)
def test_lightning_rungs_report_bad_settings_in_one_line(fake_mnist, tmp_path, capsys, rung, flags, phrase):
    flags = ["--data_dir", str(fake_mnist), "--output_dir", str(tmp_path / "x"), *flags]
    assert phrase in error_line(run_in_process(capsys, RUNG_FILES[rung].name, *flags))
    assert not (tmp_path / "x").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given when no GPU is usable")
@pytest.mark.parametrize(
    ("rung", "flags", "phrase"),
    [
        ("plain", ["--device", "cuda"], "Error: --device cuda: PyTorch sees 0 GPU(s); use --device cpu"),
        ("plain", ["--device", "cuda:1"], "Error: --device cuda:1: PyTorch sees 0 GPU(s); use --device cpu"),
        ("fabric", ["--accelerator", "cuda"], "Error: `CUDAAccelerator` can not run on your system"),
        ("fabric", ["--accelerator", "gpu"], "Error: No supported gpu backend found!"),
        ("trainer", ["--accelerator", "cuda"], "Error: `CUDAAccelerator` can not run on your system"),
        ("trainer", ["--accelerator", "gpu"], "Error: No supported gpu backend found!"),
    ],
)
def test_gpu_flags_without_a_gpu_are_refused_on_every_rung(fake_mnist, tmp_path, capsys, rung, flags, phrase):
    if rung != "plain" and flags[-1] == "gpu" and torch.backends.mps.is_available():
        pytest.skip("Lightning's gpu is Apple's MPS here")
    flags = ["--data_dir", str(fake_mnist), "--output_dir", str(tmp_path / "x"), *flags]
    result = run_in_process(capsys, RUNG_FILES[rung].name, *flags)
    assert phrase in error_line(result)
    assert not (tmp_path / "x").exists()


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="torch_xla is installed here")
@pytest.mark.parametrize("rung", ["fabric", "trainer"])
def test_an_accelerator_whose_package_is_missing_is_one_line(fake_mnist, tmp_path, capsys, rung):
    # Lightning knows "tpu" but needs torch_xla for it, and raises an ImportError as it builds the accelerator.
    flags = ["--data_dir", str(fake_mnist), "--output_dir", str(tmp_path / "x"), "--accelerator", "tpu"]
    assert "torch_xla" in error_line(run_in_process(capsys, RUNG_FILES[rung].name, *flags))


@pytest.mark.parametrize("rung", ["plain", "fabric", "trainer", "product"])
def test_every_rung_applies_and_records_the_float32_matmul_precision(fake_mnist, tmp_path, rung):
    data = "--data." if rung == "product" else "--"
    flags = [f"{data}data_dir", str(fake_mnist), f"{data}val_size", str(FAKE_VAL), "--batch_size", "100"]
    flags += ["--max_epochs", "1", "--float32_matmul_precision", "medium", "--output_dir", str(tmp_path / rung)]
    with torch_settings_kept():
        if rung == "product":  # scripts/train.py
            assert train_main([*flags, "--enable_progress_bar", "false"]) == 0
            assert "float32_matmul_precision: medium" in (tmp_path / rung / "config.yaml").read_text()
        else:
            assert run_main_block(RUNG_FILES[rung].name, *flags) is None
            metrics = json.loads((tmp_path / rung / "metrics.json").read_text())
            assert metrics["float32_matmul_precision"] == "medium"
        assert torch.get_float32_matmul_precision() == "medium"


def test_lightnings_matmul_precision_note_is_not_shown(caplog):
    """Lightning suggests set_float32_matmul_precision on every GPU run left at "highest"; here the run chose it."""
    from lightning.fabric.utilities.rank_zero import rank_zero_info
    from lightning_utilities.core import rank_zero

    from mnist_lightning.core.workarounds import apply_workarounds

    apply_workarounds()
    # rank_zero_info writes to the logger Lightning last chose for it, whose level an earlier test may have raised
    # (predict.py sets lightning.pytorch's to WARNING): it is put at INFO too, so the test holds in any order.
    with caplog.at_level("INFO"), caplog.at_level("INFO", logger=rank_zero.log.name):
        rank_zero_info("You are using a CUDA device ('NVIDIA H100 80GB HBM3') that has Tensor Cores. To properly ...")
        rank_zero_info("another note")
    assert "Tensor Cores" not in caplog.text and "another note" in caplog.text
