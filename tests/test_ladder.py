"""The ladder: plain PyTorch -> Fabric -> Trainer. Fabric's file differs from the plain one only in marked device
lines; from the same seed, all three end with bit-identical weights and losses; --compile works on each rung
and leaves checkpoints loadable with and without it."""

import difflib
import json
from pathlib import Path

import pytest
import torch
from helpers import FAKE_VAL, train_run

from mnist_lightning import compare, plain_pytorch, train_fabric
from mnist_lightning.checkpoints import load_checkpoint
from mnist_lightning.model import SimpleNN

SRC = Path(__file__).resolve().parents[1] / "src" / "mnist_lightning"
# Not the defaults on purpose: SGD with momentum, a constant schedule, a batch that leaves a short last batch
# (1,000 training images / 64), a learning rate small enough that the losses stay far from zero.
FLAGS = ["--batch_size", "64", "--max_epochs", "3", "--seed", "3"]
FLAGS += ["--optimizer", "sgd", "--lr", "0.003", "--lr_schedule", "constant", "--deterministic", "true"]


def data_flags(data_dir: Path, rung: str) -> list[str]:
    """The same data on every rung: train.py takes the data module's arguments as --data.NAME, the others plainly."""
    data = "--data." if rung == "trainer" else "--"
    return [f"{data}data_dir", str(data_dir), f"{data}val_size", str(FAKE_VAL)]


def code_lines(path: Path) -> list[str]:
    """The file's lines without the module docstring, blank lines or indentation."""
    text = path.read_text()
    body = text[text.index('"""', 3) + 3 :]
    return [line.strip() for line in body.splitlines() if line.strip()]


def test_fabric_rung_differs_from_plain_only_in_marked_device_lines():
    plain, fabric = code_lines(SRC / "plain_pytorch.py"), code_lines(SRC / "train_fabric.py")
    removed, added = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=plain, b=fabric, autojunk=False).get_opcodes():
        if tag != "equal":
            removed += plain[i1:i2]
            added += fabric[j1:j2]
    unmarked_removed = [line for line in removed if "# DEVICE" not in line and not line.startswith("import ")]
    unmarked_added = [line for line in added if "FABRIC" not in line and not line.startswith("import ")]
    allowed = {'parser = ArgumentParser(prog="train_pytorch.py", description=__doc__.splitlines()[0])'}
    assert set(unmarked_removed) <= allowed, unmarked_removed
    assert unmarked_added == [line.replace("train_pytorch", "train_fabric") for line in unmarked_removed]
    assert len(removed) > 20 and len(added) > 20  # the rungs do differ: in their device lines


def test_every_device_call_of_the_plain_rung_is_marked():
    for line in code_lines(SRC / "plain_pytorch.py"):
        code = line.split("#")[0]
        if any(call in code for call in (".to(device)", "torch.device(", "cuda", "map_location")):
            assert "# DEVICE" in line, line


def final_weights(run_dir: Path, rung: str) -> dict[str, torch.Tensor]:
    if rung == "trainer":
        state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        return {key.removeprefix("net."): value for key, value in state.items() if key.startswith("net.")}
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]


def run_three_rungs(data_dir: Path, tmp_path: Path, *extra: str) -> dict[str, dict]:
    """The three rungs in this process, with the same flags; each one's metrics.json."""
    flags = [*FLAGS, *extra]
    plain = [*data_flags(data_dir, "plain"), *flags, "--device", "cpu", "--output_dir", str(tmp_path / "plain")]
    assert plain_pytorch.main(plain) == 0
    fabric = [*data_flags(data_dir, "fabric"), *flags, "--accelerator", "cpu", "--output_dir", str(tmp_path / "fabric")]
    assert train_fabric.main(fabric) == 0
    trainer = [*data_flags(data_dir, "trainer"), *flags, "--accelerator", "cpu", "--enable_progress_bar", "false"]
    train_run(*trainer, "--output_dir", str(tmp_path / "trainer"))
    return {rung: json.loads((tmp_path / rung / "metrics.json").read_text()) for rung in ("plain", "fabric", "trainer")}


def assert_bit_identical(metrics: dict[str, dict], tmp_path: Path) -> None:
    weights = {rung: final_weights(tmp_path / rung, rung) for rung in metrics}
    losses = {
        rung: [(r["train/loss"], r["val/loss"], r["val/acc"]) for r in m["history"]] for rung, m in metrics.items()
    }
    tests = {rung: (m["test/loss"], m["test/acc"], m["best_val/acc"]) for rung, m in metrics.items()}
    for rung in ("fabric", "trainer"):
        assert weights[rung].keys() == weights["plain"].keys() == {"linear.weight", "linear.bias"}
        assert all(torch.equal(weights[rung][key], weights["plain"][key]) for key in weights["plain"]), rung
        assert losses[rung] == losses["plain"], rung  # exact equality of float32 values, not closeness
        assert tests[rung] == tests["plain"], rung
    assert len(losses["plain"]) == 3 and 0.001 < losses["plain"][-1][0] < losses["plain"][0][0] / 10  # it learned
    assert {key for m in metrics.values() for key in m} == set(metrics["plain"])  # the same metrics.json keys


def test_plain_fabric_and_trainer_end_bit_identical(fake_mnist, tmp_path):
    assert_bit_identical(run_three_rungs(fake_mnist, tmp_path), tmp_path)


@pytest.mark.slow
def test_compile_on_every_rung_keeps_parity_and_checkpoint_keys(fake_mnist, tmp_path):
    """compare.py --compile true: each rung in its own process, as users run it (in one process the rungs would
    share torch.compile's caches, which hides what differs between them). Adam at batch 512 with a validation
    batch of another size: the Trainer's sanity check feeds that batch to the network before its first training
    step, and a network compiled for the first size it sees, or code compiled by earlier runs, breaks the
    parity; compiling with dynamic sizes in each process keeps it."""
    flags = ["--data_dir", str(fake_mnist), "--val_size", str(FAKE_VAL), "--batch_size", "512", "--max_epochs", "3"]
    assert compare.main([*flags, "--compile", "true", "--json", "--output_dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "compare.json").read_text())
    for pair, gap in result["parity"].items():
        assert gap["weights_equal"] and gap["losses_equal"], (pair, gap)
    # No "_orig_mod." in any checkpoint: each loads into a plain, uncompiled SimpleNN...
    for rung in ("plain", "fabric", "trainer"):
        for path in (tmp_path / f"{rung}_0" / "checkpoints").iterdir():
            saved = torch.load(path, weights_only=True)
            assert not any("_orig_mod" in key for key in saved.get("state_dict", saved.get("model"))), path
        SimpleNN((1, 28, 28), 10).load_state_dict(final_weights(tmp_path / f"{rung}_0", rung))
    # ...and the Trainer's checkpoint loads through the project's loader, compiled again or not.
    checkpoint = load_checkpoint(tmp_path / "trainer_0" / "checkpoints" / "last.ckpt")
    assert checkpoint.model.hparams.compile is True
    checkpoint.model.configure_model()  # what the Trainer calls: compiles in place
    uncompiled = SimpleNN((1, 28, 28), 10)
    uncompiled.load_state_dict(checkpoint.model.net.state_dict())  # same keys compiled or not
    images = torch.randn(5, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(checkpoint.model(images), uncompiled(images))


def test_fabric_rung_reports_bad_settings_in_one_paragraph(tmp_path, capsys):
    code = train_fabric.main(["--precision", "17-fancy", "--output_dir", str(tmp_path / "x")])
    assert code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("Error: The Fabric settings are not valid") and "Traceback" not in err
    assert not (tmp_path / "x").exists()
    assert train_fabric.main(["--devices", "0", "--output_dir", str(tmp_path / "x")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--devices takes a count like 1, a list of GPU indices" in err and "CPU cores" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given when no GPU is usable")
def test_gpu_flags_without_a_gpu_are_refused_on_both_rungs(tmp_path, capsys):
    assert train_fabric.main(["--accelerator", "gpu", "--output_dir", str(tmp_path / "f")]) == 2
    assert plain_pytorch.main(["--device", "cuda", "--output_dir", str(tmp_path / "p")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("asks for a GPU, but none can be used") == 2
    assert "--accelerator cpu" in err and "--device cpu" in err  # each says what to run instead, in its own flags


@pytest.mark.parametrize("rung", ["plain", "fabric", "trainer"])
def test_every_rung_applies_and_records_the_float32_matmul_precision(fake_mnist, tmp_path, rung):
    flags = [*data_flags(fake_mnist, rung), "--batch_size", "100", "--max_epochs", "1"]
    flags += ["--float32_matmul_precision", "medium", "--output_dir", str(tmp_path / rung)]
    try:
        if rung == "trainer":
            train_run(*flags, "--enable_progress_bar", "false")
            assert "float32_matmul_precision: medium" in (tmp_path / rung / "config.yaml").read_text()
        else:
            assert {"plain": plain_pytorch, "fabric": train_fabric}[rung].main(flags) == 0
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision("highest")  # process-wide: the other tests expect torch's default


def test_lightnings_matmul_precision_note_is_not_shown(caplog):
    """Lightning suggests set_float32_matmul_precision on every GPU run left at "highest"; here the run chose it."""
    from lightning.fabric.utilities.rank_zero import rank_zero_info
    from lightning_utilities.core import rank_zero

    from mnist_lightning.workarounds import apply_workarounds

    apply_workarounds()
    # rank_zero_info writes to the logger Lightning last chose for it, whose level an earlier test may have raised
    # (predict.py sets lightning.pytorch's to WARNING): it is put at INFO too, so the test holds in any order.
    with caplog.at_level("INFO"), caplog.at_level("INFO", logger=rank_zero.log.name):
        rank_zero_info("You are using a CUDA device ('NVIDIA H100 80GB HBM3') that has Tensor Cores. To properly ...")
        rank_zero_info("another note")
    assert "Tensor Cores" not in caplog.text and "another note" in caplog.text
