"""Resuming from the run record, on the tests' own task: a resume takes only the flags that may change (its own parser
refuses the rest), the record must be the one its checkpoint was trained with, and the records say what was used;
a checkpoint of another run starts a new one from its weights (fine-tuning). (The example's cosine schedule,
stretched on a resume: tests/test_example_train.py.)"""

import json
import re
import shutil
import sys

import pytest
import torch
import yaml
from helpers import QUICK, STEPS_PER_EPOCH, one_line, own_task

from mnist_lightning.core import evaluate, predict
from mnist_lightning.core.resume import fingerprint, resume_hint
from mnist_lightning.core.train import main


def flags(run, *more) -> list[str]:
    return ["--output_dir", str(run), *QUICK, *more]


def resume(run, *more) -> int:
    return main(["--output_dir", str(run), "--ckpt_path", "last", *more])


def weights(path) -> dict:
    return torch.load(path, weights_only=True)["state_dict"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    run = tmp_path_factory.mktemp("finished") / "run"
    with own_task():
        assert main(flags(run)) == 0
    return run


@pytest.mark.parametrize(
    ("changes", "refused"),
    [
        (["--lr", "0.5"], ["--lr from 0.05 to 0.5"]),
        (["--batch_size", "10", "--seed", "3"], ["--batch_size from 32 to 10", "--seed from 42 to 3"]),
        (["--data.samples", "300"], ["--data.samples from 600 to 300"]),  # only where the data is may change
        (["--config", "other.yaml"], ["--lr from 0.05 to 0.5"]),  # a config file's options are options given
    ],
    ids=["lr", "batch_size and seed", "data", "config"],
)
def test_other_options_on_resume_are_refused_naming_each_change(task, finished, tmp_path, capsys, changes, refused):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    (run / "metrics.json").unlink()  # as if it had been stopped before testing
    (tmp_path / "other.yaml").write_text("lr: 0.5\n")
    changes = [str(tmp_path / "other.yaml") if change == "other.yaml" else change for change in changes]
    before = (run / "checkpoints" / "last.ckpt").read_bytes(), (run / "config.yaml").read_text()
    assert resume(run, *changes) == 2
    err = capsys.readouterr().err
    message = one_line(err)
    assert err.startswith("Error: A resume cannot change ") and "Traceback" not in err and "usage:" not in err
    assert all(change in message for change in refused), message
    assert "It may change " in message and "--max_epochs" in message and "--ckpt_path" in message, message
    assert ((run / "checkpoints" / "last.ckpt").read_bytes(), (run / "config.yaml").read_text()) == before
    assert [path.name for path in (run / "logs").iterdir()] == ["version_0"]  # no segment was started


def test_the_runs_own_command_with_ckpt_path_last_resumes_it(task, finished, tmp_path):
    """Options equal to the record's may be given again: the command that started the run, with --ckpt_path last
    added (and a longer --max_epochs), goes on with it."""
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    assert main(flags(run, "--seed", "42", "--lr", "0.05", "--ckpt_path", "last", "--max_epochs", "3")) == 0
    metrics = json.loads((run / "metrics.json").read_text())
    assert [row["epoch"] for row in metrics["history"]] == [0, 1, 2]


def test_resuming_a_finished_run_says_so_and_how_to_train_longer(task, finished, capsys):
    before = (finished / "metrics.json").read_text()
    assert resume(finished) == 2
    message = one_line(capsys.readouterr().err)
    assert "has already finished" in message and "--max_epochs 4" in message
    assert (finished / "metrics.json").read_text() == before


def test_a_copied_run_resumes_in_its_new_place_and_trains_longer(task, finished, tmp_path, recwarn):
    run = tmp_path / "run"
    shutil.copytree(finished, run)  # a run folder copied elsewhere (another disk, off a cluster) resumes there
    (run / "checkpoints" / ".last.ckpt.4242.partial").write_bytes(b"PK")  # what a kill -9 while saving leaves
    assert resume(run, "--max_epochs", "4") == 0
    assert not list(run.glob("**/.*.partial"))  # removed by the command that holds the run's folder
    assert not [str(w.message) for w in recwarn if "dirpath" in str(w.message)]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["best_checkpoint"].startswith(str(run))  # the copy's own files, not the original's
    assert metrics["epochs"] == 4 and [row["epoch"] for row in metrics["history"]] == [0, 1, 2, 3]
    assert "max_epochs: 4" in (run / "config.yaml").read_text()  # the record says what was used
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 4 * STEPS_PER_EPOCH
    # Lightning's CSV logger: each segment in a version of its own, the resumed one logging epochs 2 and 3 only.
    assert sorted(path.name for path in (run / "logs").iterdir()) == ["version_0", "version_1"]
    rows = (run / "logs" / "version_1" / "metrics.csv").read_text().splitlines()
    column = rows[0].split(",").index("epoch")
    epochs = {int(float(row.split(",")[column])) for row in rows[1:] if row.split(",")[column]}
    assert {2, 3} <= epochs and not {0, 1} & epochs


def test_fewer_epochs_than_done_is_refused(task, finished, capsys):
    assert resume(finished, "--max_epochs", "1") == 2
    assert "has already finished 2 epochs" in one_line(capsys.readouterr().err)


def test_a_resume_from_a_config_file_is_refused(task, finished, tmp_path, capsys):
    """A resume is typed: a config file saying ckpt_path: last is not one."""
    (mine := tmp_path / "mine.yaml").write_text(f"output_dir: {finished}\nckpt_path: last\n")
    before = sorted(path.name for path in finished.rglob("*"))
    assert main(["--config", str(mine)]) == 2
    assert "A resume is `train.py --output_dir RUN --ckpt_path last`, typed" in one_line(capsys.readouterr().err)
    assert sorted(path.name for path in finished.rglob("*")) == before


def test_a_run_killed_before_its_first_checkpoint_can_be_rerun_or_resumed(task, tmp_path):
    run = tmp_path / "run"
    assert main(flags(run)) == 0
    # What kill -9 in the first epoch leaves: the record and the logs, no checkpoint.
    for path in run.iterdir():
        if path.name not in ("config.yaml", "logs", "checkpoints"):
            path.unlink()
    for path in (run / "checkpoints").iterdir():
        path.unlink()
    assert resume(run) == 0  # the README's resume command starts it over from its record
    assert (run / "checkpoints" / "last.ckpt").is_file() and (run / "metrics.json").is_file()
    assert [path.name for path in (run / "logs").iterdir()] == ["version_0"]  # started over: the old logs cleared
    shutil.rmtree(run / "checkpoints")
    (run / "metrics.json").unlink()
    for path in run.glob("*.png"):
        path.unlink()
    assert main(flags(run)) == 0  # and so does the same command again


def test_a_run_killed_while_writing_its_record_can_be_run_again(task, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    # What kill -9 during the record's write leaves: the record's temporary file (it is renamed into place whole).
    (run / ".config.yaml.4242.partial").write_text("seed: 42\nmax_ep")
    assert resume(run) == 2  # no record: nothing to resume, and the message says to run the command again
    assert "run its own command again" in one_line(capsys.readouterr().err)
    assert main(flags(run)) == 0
    assert yaml.safe_load((run / "config.yaml").read_text())["seed"] == 42
    assert not list(run.glob(".*.partial"))


NETWORK = """import math
from torch import nn


class Net(nn.Sequential):
    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__(nn.Flatten(), LAYERS)
"""


def test_a_resume_after_the_networks_code_changed_is_refused_and_the_run_left_as_it_was(
    task, tmp_path, monkeypatch, capsys
):
    monkeypatch.syspath_prepend(str(tmp_path))
    source, run = tmp_path / "edited_net.py", tmp_path / "run"
    source.write_text(NETWORK.replace("LAYERS", "nn.Linear(math.prod(input_shape), num_classes)"))
    assert main(flags(run, "--net", "edited_net.Net")) == 0
    hidden = "nn.Linear(math.prod(input_shape), 16), nn.ReLU(), nn.Linear(16, num_classes)"
    source.write_text(NETWORK.replace("LAYERS", hidden))  # the user changes the network, then resumes
    monkeypatch.delitem(sys.modules, "edited_net")
    record, files = (run / "config.yaml").read_bytes(), sorted(run.rglob("*"))
    capsys.readouterr()
    assert resume(run, "--max_epochs", "3") == 2
    message = one_line(capsys.readouterr().err)
    assert "cannot be loaded here" in message and "Missing key" in message, message
    assert (run / "config.yaml").read_bytes() == record and sorted(run.rglob("*")) == files
    for script in (evaluate, predict):  # its checkpoints, by the other scripts: the same cause, named
        assert script.main(["--ckpt_path", str(run / "checkpoints" / "last.ckpt")]) == 2
        assert "cannot be loaded here" in one_line(capsys.readouterr().err)


def test_a_run_whose_record_would_not_resume_is_refused_before_it_starts(task, tmp_path, monkeypatch, capsys):
    """A run's record is read back as it is written: a network whose __init__(input_shape, num_classes) has no
    annotations, in place of a default network with options of its own, is a record jsonargparse would refuse to read
    at the resume (its fail_untyped); so it is refused now, in jsonargparse's words, before anything is written."""
    monkeypatch.syspath_prepend(str(tmp_path))
    source, run = tmp_path / "untyped_net.py", tmp_path / "run"
    source.write_text(
        NETWORK.replace(": tuple[int, ...]", "").replace(": int", "").replace("LAYERS", "nn.Linear(2, 3)")
    )
    assert main(flags(run, "--net", "untyped_net.Net")) == 2
    message = one_line(capsys.readouterr().err)
    assert "Parameter 'input_shape' from 'untyped_net.Net.__init__' does not specify a type" in message, message
    assert "Traceback" not in message and not run.exists()
    assert main(flags(run, "--net", "untyped_net.Net".replace("untyped_net.Net", "own_data.MLP"))) == 0


def test_a_folder_with_results_is_not_cleared(task, finished, capsys):
    assert main(["--output_dir", str(finished), "--max_epochs", "1"]) == 2
    message = one_line(capsys.readouterr().err)
    assert "already holds files" in message and "pass another --output_dir" in message
    assert (finished / "metrics.json").is_file() and (finished / "checkpoints" / "last.ckpt").is_file()


def test_a_diverged_run_stops_with_a_message_and_no_nan_records(task, tmp_path, capsys):
    run = tmp_path / "run"
    code = main(flags(run, "--lr", "3.4e37"))  # the largest Adam takes (its first step is lr / 0.1): scores overflow
    message = one_line(capsys.readouterr().err)
    assert code == 1 and "Training diverged (" in message and "use a smaller learning rate" in message, message
    assert not run.exists()  # it diverged in its first epoch: no checkpoint, so no folder is left


def test_a_run_diverged_by_16_bit_weights_is_told_to_change_the_precision(task, tmp_path, capsys):
    code = main(flags(tmp_path / "run", "--precision", "16-true", "--lr", "1e5"))
    message = one_line(capsys.readouterr().err)
    assert code == 1 and "Training diverged" in message and "a -mixed or 32-true --precision" in message, message


def test_a_checkpoint_of_another_run_starts_a_new_run_from_its_weights(task, finished, tmp_path, recwarn):
    # Even from a run that has trained all its epochs: the new run trains its own, with its own settings.
    start = finished / "checkpoints" / "last.ckpt"
    run = tmp_path / "finetuned"
    assert main(flags(run, "--ckpt_path", str(start), "--lr", "1e-6")) == 0
    assert not [str(w.message) for w in recwarn if "dirpath" in str(w.message)]
    metrics = json.loads((run / "metrics.json").read_text())
    assert [row["epoch"] for row in metrics["history"]] == [0, 1] and metrics["best_checkpoint"].startswith(str(run))
    record = (run / "config.yaml").read_text()
    assert f"ckpt_path: {start}" in record and "lr: 1.0e-06" in record
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["optimizer_states"][0]["param_groups"][0]["lr"] == 1e-6  # the lr recorded is the lr used
    assert last["global_step"] == 2 * STEPS_PER_EPOCH  # its own steps and epochs, from 0
    # It started from the weights, not from scratch: 24 Adam steps of 1e-6 leave it near them.
    started, tuned = weights(start), last["state_dict"]
    assert all(torch.allclose(tuned[key], started[key], atol=1e-4) for key in started)
    assert not all(torch.equal(tuned[key], started[key]) for key in started)  # and trained them


def test_a_checkpoint_of_another_network_is_refused_with_the_flags_it_needs(task, tmp_path, capsys):
    other = tmp_path / "other"
    assert main(flags(other, "--max_epochs", "1", "--net.hidden", "4")) == 0
    capsys.readouterr()
    assert main(flags(tmp_path / "run", "--ckpt_path", str(other / "checkpoints" / "last.ckpt"))) == 2
    message = one_line(capsys.readouterr().err)
    assert "holds the weights of another network than this run's Classify has" in message, message
    assert '"net": {"class_path": "own_data.MLP", "init_args": {"hidden": 4' in message, message
    assert '"_class_path": "own_data.Points"' in message and '"samples": 600' in message
    assert "Pass the options and --data it was trained with" in message and not (tmp_path / "run").exists()


def test_a_checkpoint_whose_recorded_network_was_edited_gets_the_same_advice_everywhere(task, tmp_path, capsys):
    """Its record says --net.hidden 4, its weights are of 2 hidden units: no entry point advises passing the
    record's flags (which would be refused again); each says the file was edited."""
    other = tmp_path / "other"
    assert main(flags(other, "--max_epochs", "1", "--net.hidden", "2")) == 0
    contents = torch.load(other / "checkpoints" / "last.ckpt", weights_only=True)
    contents["hyper_parameters"]["net"]["init_args"]["hidden"] = 4
    edited = tmp_path / "edited.ckpt"
    torch.save(contents, edited)
    capsys.readouterr()
    assert evaluate.main(["--ckpt_path", str(edited), "--output_dir", str(tmp_path / "evaluated")]) == 2
    messages = [one_line(capsys.readouterr().err)]
    for net in ([], ["--net.hidden", "4"]):  # the default network, then the record's
        assert main(flags(tmp_path / "run", "--ckpt_path", str(edited), *net)) == 2
        messages.append(one_line(capsys.readouterr().err))
    for message in messages:
        assert "the file was edited" in message and "pass the same" not in message.lower(), message
        assert "Pass the options" not in message, message
    assert not (tmp_path / "run").exists() and not (tmp_path / "evaluated").exists()


def test_max_time_is_not_kept_for_later_resumes(task, tmp_path, recwarn):
    run = tmp_path / "run"
    # A run stopped by its time limit, --max_time given on its first command only.
    assert main(flags(run, "--max_epochs", "100000", "--max_time", "00:00:00:01")) == 0
    assert "max_time: null" in (run / "config.yaml").read_text()
    stopped = json.loads((run / "metrics.json").read_text())["epochs"]
    assert stopped < 100000
    # Checked at each epoch's end: the run holds whole epochs, which a resume continues.
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == STEPS_PER_EPOCH * stopped
    (run / "metrics.json").unlink()
    # The same limit again: the whole run's training time is already over it: no epoch is trained, the run is tested.
    assert resume(run, "--max_time", "00:00:00:01") == 0
    assert json.loads((run / "metrics.json").read_text())["epochs"] == stopped
    # Without it, the resumed run trains to --max_epochs.
    assert resume(run, "--max_epochs", str(stopped + 2)) == 0
    assert json.loads((run / "metrics.json").read_text())["epochs"] == stopped + 2
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == STEPS_PER_EPOCH * (stopped + 2)
    assert not [str(w.message) for w in recwarn if "Timer" in str(w.message)]


def test_max_time_counts_only_the_segments_run_with_it(task, tmp_path):
    """--max_time is Lightning's Timer, whose count is in the checkpoints of the segments run with it: a run trained
    without it, however long, gets the whole limit when resumed with one."""
    run = tmp_path / "run"
    assert main(flags(run)) == 0
    (run / "metrics.json").unlink()
    last = run / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, weights_only=True)
    checkpoint["callbacks"]["EpochHistory"]["fit_seconds"] = 7200.0  # as if the two epochs had taken two hours
    torch.save(checkpoint, last)
    assert resume(run, "--max_epochs", "4", "--max_time", "00:01:00:00") == 0
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 4


def test_a_run_whose_testing_is_refused_is_completed_by_resuming_with_the_option_corrected(task, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(flags(run, "--limit_test_batches", "0.0001")) == 2  # less than one test batch: found after the fit
    message = one_line(capsys.readouterr().err)
    assert "limit_test_batches" in message and "The fit is complete and kept in" in message, message
    assert "Traceback" not in message
    assert resume(run, "--limit_test_batches", "1.0") == 0
    assert json.loads((run / "metrics.json").read_text())["test/acc"] is not None


@pytest.mark.parametrize("damage", ["deleted", "batch_size", "seed", "net", "unclosed"])
def test_a_resume_refuses_a_record_that_no_longer_says_how_the_run_was_trained(task, tmp_path, capsys, damage):
    """config.yaml lost or edited by hand: the run would go on as a mix of two configurations, or not load."""
    run = tmp_path / "run"
    assert main(flags(run, "--max_epochs", "1", "--accelerator", "cpu")) == 0
    record = run / "config.yaml"
    text = record.read_text()
    edits = {
        "batch_size": ("batch_size: 32", "batch_size: 64"),
        "seed": ("seed: 42", "seed: 7"),
        "net": ("class_path: own_data.MLP", "class_path: own_data.TinyCNN"),
    }
    if damage == "deleted":
        record.unlink()
    elif damage in edits:
        assert edits[damage][0] in text
        record.write_text(text.replace(*edits[damage]))
    else:
        record.write_text(text + "lr: [unclosed\n")
    capsys.readouterr()
    assert main(["--output_dir", str(run), "--ckpt_path", "last", "--max_epochs", "2"]) == 2
    err = one_line(capsys.readouterr().err)
    assert "is not the record" in err and "Traceback" not in err, err
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 1  # the run is as it was


def test_a_record_edited_only_in_what_a_resume_may_change_resumes(task, tmp_path):
    run = tmp_path / "run"
    assert main(flags(run, "--max_epochs", "1")) == 0
    record = run / "config.yaml"
    record.write_text(record.read_text().replace("max_epochs: 1", "max_epochs: 2"))
    assert resume(run) == 0
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 2


@pytest.fixture(scope="module")
def clipped(tmp_path_factory):
    """A run of one epoch with Trainer settings that its checkpoint alone would not say (Lightning keeps none)."""
    run = tmp_path_factory.mktemp("clipped") / "run"
    settings = ["--accumulate_grad_batches", "2", "--gradient_clip_val", "0.5", "--precision", "64"]
    with own_task():
        assert main(flags(run, "--max_epochs", "1", *settings)) == 0
    (run / "metrics.json").unlink()  # as if stopped before testing: a resume has something left to do
    return run


def cut_record(text: str, damage: str) -> str:
    """config.yaml edited by hand, or cut short as a full disk or a copy stopped midway leaves it."""
    if damage == "edited":
        text = text.replace("precision: 64", "precision: 32-true").replace("grad_batches: 2", "grad_batches: 1")
        return text.replace("gradient_clip_val: 0.5", "gradient_clip_val: null")
    how, at = damage.split(" ")
    if how == "lines":
        return "".join(text.splitlines(keepends=True)[: int(at)])
    key, more = at.split("+")  # mid-line: a few characters into `key`, at the start of a line (after its indent)
    return text[: re.search(rf"^ *({key})", text, flags=re.MULTILINE).start(1) + int(more)]


@pytest.mark.parametrize(
    "damage",
    [
        *("edited", "lines 5", "lines 12", "lines 18", "lines 28", "lines 45", "lines 55"),
        *("bytes init_args:+3", "bytes samples:+2", "bytes lr:+6", "bytes precision:+12", "bytes logger:+9"),
    ],
)
def test_a_record_edited_or_cut_short_is_refused_and_the_run_left_as_it_was(task, clipped, tmp_path, capsys, damage):
    """Found by a new-user trial: a record cut short or edited went on with other Trainer settings (no clipping,
    no accumulation, 32-bit) and was rewritten with them; cut mid-line, it said "'str' object has no attribute"."""
    run = tmp_path / "run"
    shutil.copytree(clipped, run)
    record, last = run / "config.yaml", run / "checkpoints" / "last.ckpt"
    record.write_text(cut_record(record.read_text(), damage))
    before, contents = record.read_text(), last.read_bytes()
    capsys.readouterr()
    assert resume(run, "--max_epochs", "2") == 2
    err = capsys.readouterr().err
    message = one_line(err)
    assert str(record) in message and "Traceback" not in err and "\n\n" not in err.strip(), err
    assert "is not the record" in message and "edited or damaged since" in message, message
    assert record.read_text() == before and last.read_bytes() == contents and not (run / "metrics.json").exists()


@pytest.mark.parametrize(
    "content",
    [b"garbage: [unclosed\n", b"- a list\n- of lines\n", bytes(range(256)) * 4, b"# only a comment\n"],
    ids=["not YAML", "a list", "binary", "empty"],
)
def test_a_damaged_record_is_refused_as_the_runs_record(task, clipped, tmp_path, capsys, content):
    run = tmp_path / "run"
    shutil.copytree(clipped, run)
    (run / "config.yaml").write_bytes(content)
    capsys.readouterr()
    assert resume(run, "--max_epochs", "2") == 2
    message = one_line(capsys.readouterr().err)
    assert "is not the record" in message, message
    assert (run / "config.yaml").read_bytes() == content and not (run / "metrics.json").exists()


def test_a_record_without_an_option_that_an_upgrade_added_resumes(task, clipped, tmp_path):
    """A Lightning upgrade can add a Trainer option: a run recorded before it lacks that line in its record (and in
    its checkpoint's fingerprint of it), and resumes with the option's default."""
    run = tmp_path / "run"
    shutil.copytree(clipped, run)
    record, last = run / "config.yaml", run / "checkpoints" / "last.ckpt"
    text = record.read_text()
    assert "\nbarebones: false\n" in text
    record.write_text(text.replace("\nbarebones: false\n", "\n"))
    contents = torch.load(last, weights_only=True)
    torch.save(contents | {"record": fingerprint(record.read_text())}, last)  # as the older version wrote it
    assert resume(run) == 0
    assert json.loads((run / "metrics.json").read_text())["test/acc"] is not None


def test_a_resume_keeps_the_trainer_settings_of_its_record(task, clipped, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(clipped, run)
    assert resume(run) == 0  # as it was: tested
    assert resume(run, "--max_epochs", "2") == 0  # and trained longer
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 2
    record = (run / "config.yaml").read_text()
    assert all(line in record for line in ("precision: 64", "accumulate_grad_batches: 2", "gradient_clip_val: 0.5"))
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["record"] == fingerprint(record)
    assert last["global_step"] == 2 * STEPS_PER_EPOCH // 2  # two batches a step
    assert all(tensor.dtype == torch.float64 for tensor in last["state_dict"].values() if tensor.is_floating_point())


@pytest.mark.parametrize(
    ("program", "path", "command"),
    [
        ("scripts/train.py", None, "python scripts/train.py"),
        ("/elsewhere/my_train.py", None, "python /elsewhere/my_train.py"),  # a copy of the script, run from its place
        ("/venv/bin/mnist-lightning-train", None, "mnist-lightning-train"),  # the installed command, by its name
        ("/usr/lib/ipykernel_launcher.py", None, "python scripts/train.py"),  # anything else: the project's own script
        (
            "scripts/train.py",
            "my code:src",
            "PYTHONPATH='my code:src' python scripts/train.py",
        ),  # where --data was found
    ],
)
def test_the_resume_command_said_is_the_command_the_run_was_started_as(program, path, command, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [program, "--output_dir", str(tmp_path)])
    if path:
        monkeypatch.setenv("PYTHONPATH", path)
    else:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    assert resume_hint(tmp_path) == f"{command} --output_dir {tmp_path.resolve()} --ckpt_path last"


def test_a_resume_in_another_number_of_processes_is_refused_before_it_trains(task, tmp_path, capsys):
    """Its epochs would have another number of steps, which the run's schedule and step counts (kept in steps) do not
    follow: refused in one paragraph, the run left as it was (issue 44, item 1)."""
    run = tmp_path / "run"
    assert main(flags(run, "--max_epochs", "1")) == 0
    before = (run / "checkpoints" / "last.ckpt").read_bytes()
    code = resume(run, "--max_epochs", "2", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp")
    message = one_line(capsys.readouterr().err)
    assert code == 2 and "The run was trained in 1 process(es) (--devices times --num_nodes)" in message, message
    assert "this resume would run 2" in message and "--ckpt_path" in message and "Traceback" not in message
    assert (run / "checkpoints" / "last.ckpt").read_bytes() == before and not (run / "logs" / "version_1").exists()


def test_a_requeued_slurm_job_goes_on_with_its_run_by_its_own_command(task, tmp_path, monkeypatch, capsys):
    """SLURM runs a requeued job's script again: the same command, the same --output_dir. It resumes the run, as
    `--ckpt_path last` would, and ends as the run never stopped would; without the requeue, the same command is a
    new run, refused the used folder (issue 44, item 2)."""
    run, whole = tmp_path / "run", tmp_path / "whole"
    command = flags(run, "--max_epochs", "3", "--deterministic", "true")
    stop = ["--callbacks", "interrupts.SignalAt", "--callbacks.signal", "SIGTERM", "--callbacks.moment", "batch"]
    stop += ["--callbacks.step", str(STEPS_PER_EPOCH + 2), "--callbacks.marker", str(tmp_path / "fired")]
    assert main([*command, *stop]) == 143
    assert main([*command, *stop]) == 2  # not requeued: a new run into a used folder
    assert "already holds files from an earlier run" in one_line(capsys.readouterr().err)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert main([*command, *stop]) == 0  # its marker fired: the stop is not sent again
    assert main(flags(whole, "--max_epochs", "3", "--deterministic", "true")) == 0
    history = [json.loads((folder / "metrics.json").read_text())["history"] for folder in (run, whole)]
    assert [row["epoch"] for row in history[0]] == [0, 1, 2]
    assert torch.equal(
        *(weights(folder / "checkpoints" / "last.ckpt")["net.layers.4.weight"] for folder in (run, whole))
    )


def test_sigusr1_outside_slurm_stops_a_run_as_sigterm_does(task, tmp_path, capsys):
    """A scheduler's notice that the job ends soon: the run stops after its batch, says so and how to resume it, and
    exits 143; the resume ends it (issue 44, item 2)."""
    run = tmp_path / "run"
    stop = ["--callbacks", "interrupts.SignalAt", "--callbacks.signal", "SIGUSR1", "--callbacks.moment", "batch"]
    stop += ["--callbacks.step", str(STEPS_PER_EPOCH + 2), "--callbacks.marker", str(tmp_path / "fired")]
    assert main(flags(run, "--max_epochs", "2", *stop)) == 143
    message = one_line(capsys.readouterr().err)
    assert "Stopped by SIGUSR1: " in message and "Resume with:" in message and "Traceback" not in message, message
    assert resume(run) == 0 and (run / "metrics.json").is_file()


def test_lightnings_note_on_a_slurm_requeue_save_is_not_shown():
    """Lightning's "`weights_only` was not set, defaulting to `False`" as it saves the whole checkpoint for SLURM's
    requeue is about what a save holds, not a load: every load of the template is weights_only=True."""
    import logging

    from mnist_lightning.core.workarounds import apply_workarounds, not_noise

    apply_workarounds()
    logger = logging.getLogger("lightning.pytorch.trainer.connectors.checkpoint_connector")
    record = logger.makeRecord(
        logger.name, logging.INFO, __file__, 1, "`weights_only` was not set, defaulting to `False`.", None, None
    )
    assert not_noise in logger.filters and not logger.filter(record)


def test_a_run_of_an_earlier_template_version_is_named_as_such(task, tmp_path, capsys):
    """A last.ckpt without the record's fingerprint (the template's versions before it kept one) is not called
    damaged: the message names the cause and the ways on (issue 44, item 3)."""
    run = tmp_path / "run"
    assert main(flags(run, "--max_epochs", "1")) == 0
    last = run / "checkpoints" / "last.ckpt"
    contents = torch.load(last, weights_only=True)
    del contents["record"]
    torch.save(contents, last)
    assert resume(run, "--max_epochs", "2") == 2
    message = one_line(capsys.readouterr().err)
    assert "made by an earlier version of this template" in message and "deleted, edited" not in message, message
    assert "resume it with the version that made it" in message and f"--ckpt_path {last}" in message
