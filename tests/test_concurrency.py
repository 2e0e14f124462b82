"""One run per folder at a time: a second command that would write into a folder a run is using is refused,
naming the running one, and nothing of the two is mixed; a killed run's lock does not outlive it. On the tests' own
task, its commands started as a user starts them (tests/command.py)."""

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import QUICK, ROOT, command, command_environment, one_line, own_task

from mnist_lightning.core.records import replaced

pytestmark = pytest.mark.slow


@pytest.fixture
def flags(task) -> list[str]:
    return QUICK[:-4]  # the batch size and no progress display: each test says how many epochs


def start(arguments: list) -> subprocess.Popen:
    """The train command in its own process, its error output read by the test."""
    return subprocess.Popen(
        command("train", *arguments), cwd=ROOT, env=command_environment(), stderr=subprocess.PIPE, text=True
    )


def train_command(flags: list[str], output_dir: Path) -> list:
    return [*flags, "--enable_progress_bar", "false", "--output_dir", str(output_dir)]


def test_two_trainings_started_together_into_one_folder(flags, tmp_path):
    run = tmp_path / "run"
    processes = {seed: start(train_command([*flags, "--max_epochs", "3", "--seed", str(seed)], run)) for seed in (1, 2)}
    ended = {seed: (process.wait(timeout=300), process.stderr.read()) for seed, process in processes.items()}
    winners = [seed for seed, (code, _) in ended.items() if code == 0]
    assert len(winners) == 1, ended
    (loser,) = set(ended) - set(winners)
    code, stderr = ended[loser]
    message = one_line(stderr)
    assert code == 2 and "Traceback" not in stderr, stderr
    assert "which has not ended" in message or "already holds files from an earlier" in message
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["seed"] == winners[0] and f"seed: {winners[0]}" in (run / "config.yaml").read_text()


def test_a_resume_or_a_new_run_while_the_run_trains_is_refused_and_the_run_goes_on(flags, tmp_path):
    run, go = tmp_path / "run", tmp_path / "go"
    pause = ["--callbacks", "interrupts.PauseAt", "--callbacks.go", str(go)]  # waits after its first epoch
    first = start(train_command([*flags, "--max_epochs", "4", *pause], run))
    deadline = time.monotonic() + 120
    while not (run / "checkpoints" / "last.ckpt").exists():
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    for more in (["--ckpt_path", "last"], flags):  # a resume, and a new run (not told to add --ckpt_path last)
        second = start(train_command(more, run))
        _, stderr = second.communicate(timeout=120)
        message = one_line(stderr)
        assert second.returncode == 2 and "is in use by process" in message, stderr
        running = f"command.py --batch_size 32 --max_epochs 4 --callbacks interrupts.PauseAt --callbacks.go {go}"
        assert running in message, message
        assert "--ckpt_path last." not in message  # the running command is named, not the one refused
    go.touch()
    assert first.wait(timeout=300) == 0
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 4


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    from mnist_lightning.core.train import main

    root = tmp_path_factory.mktemp("trained")
    with own_task():
        assert main([*QUICK, "--output_dir", str(root / "run")]) == 0
    return str(root / "run" / "checkpoints" / "last.ckpt")


@pytest.mark.parametrize("script", ["train", "evaluate", "export"])
def test_an_output_folder_that_cannot_hold_files_is_refused(flags, checkpoint, script, capsys):
    """/proc refuses new files even to root, which os.access does not tell."""
    from importlib import import_module

    main = import_module(f"mnist_lightning.core.{script}").main
    options = flags if script == "train" else ["--ckpt_path", checkpoint]
    assert main([*options, "--output_dir", "/proc/foo"]) == 2
    err = one_line(capsys.readouterr().err)
    assert err.startswith("Error: /proc/foo cannot be written") and "Traceback" not in err


LONG_NAME, LONG_PATH = b"a" * 256, b"/".join([b"c" * 200] * 21)  # over 255 bytes; over 4,096 bytes


@pytest.mark.parametrize(
    ("script", "name"),
    [("train", LONG_NAME), ("train", LONG_PATH), ("evaluate", LONG_PATH), ("export", LONG_NAME)],
    ids=["train-name-256", "train-path-4220", "evaluate-path-4220", "export-name-256"],
)
def test_an_output_folder_name_the_system_cannot_hold_is_refused(flags, checkpoint, tmp_path, script, name):
    """A name over 255 bytes, a path over 4,096: the system's own reason in one paragraph, and no file is written
    (the folders above it that the system took are left, empty)."""
    options = flags if script == "train" else ["--ckpt_path", checkpoint]
    folder = os.fsencode(tmp_path / "out") + b"/" + name
    result = subprocess.run(
        command(script, *options, "--output_dir", folder),
        cwd=ROOT,
        capture_output=True,
        text=True,
        errors="backslashreplace",
        env=command_environment(),
    )
    message = one_line(result.stderr)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert message.startswith(f"Error: {tmp_path / 'out'}/") and "cannot be written: File name too long." in message
    assert "Pass another --output_dir." in message and not [path for path in tmp_path.rglob("*") if path.is_file()]


@pytest.mark.parametrize("script", ["train", "evaluate"])
def test_an_output_folder_whose_name_is_not_utf_8_takes_the_run(flags, checkpoint, tmp_path, script):
    """`--output_dir $'bad\\xff'`: the system takes any bytes but / in a name, and so does the run, which prints it
    (in a UTF-8 locale, where Python refuses to print what is not UTF-8 text)."""
    folder = os.fsencode(tmp_path) + b"/bad\xff"
    options = [*flags, "--max_epochs", "1"] if script == "train" else ["--ckpt_path", checkpoint]
    strict = command_environment() | {"PYTHONIOENCODING": "utf-8:strict"}
    result = subprocess.run(
        command(script, *options, "--output_dir", folder),
        cwd=ROOT,
        capture_output=True,
        text=True,
        errors="backslashreplace",
        env=strict,
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert json.loads(Path(os.fsdecode(folder), "metrics.json").read_text())["test/acc"] is not None


@contextlib.contextmanager
def run_in_progress(run: Path):
    """Another process holds the run's folder, as a training that has not ended does."""
    holder = "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); print(1, flush=True)"
    process = subprocess.Popen(
        [sys.executable, "-c", holder + "; time.sleep(60)", str(run / ".lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        process.stdout.readline()  # the lock is held
        yield
    finally:
        process.kill()


def test_an_export_into_the_folder_of_a_run_that_is_writing_it_is_refused(task, checkpoint, capsys):
    """export.py --output_dir <run>, while the run holds its folder. (Its default folder, <run>/checkpoints/exports,
    is a folder of its own, which an export may write while the run trains on.)"""
    from mnist_lightning.core.export import main

    run = Path(checkpoint).parent.parent
    with run_in_progress(run):
        assert main(["--ckpt_path", checkpoint, "--formats", "pt2", "--output_dir", str(run)]) == 2
        assert main(["--ckpt_path", checkpoint, "--formats", "pt2"]) == 0
    assert f"{run} is in use by " in one_line(capsys.readouterr().err)
    assert not (run / "model.pt2").exists() and (run / "checkpoints" / "exports" / "model.pt2").is_file()


def test_two_commands_writing_one_file_do_not_mix_it(tmp_path):
    """Two predicts given one --output, say: whichever finishes last wins whole, and neither fails."""
    output = tmp_path / "predictions.csv"
    other = f"from mnist_lightning.core.records import write_json; write_json({str(output)!r}, dict(b=1))"
    with replaced(output) as file:
        file.write(b"first half,")
        subprocess.run([sys.executable, "-c", other], check=True)  # another command writes it whole meanwhile
        assert json.loads(output.read_text()) == {"b": 1}
        file.write(b"second half\n")
    assert output.read_text() == "first half,second half\n"
    assert [path.name for path in tmp_path.iterdir()] == ["predictions.csv"]  # no temporary file left


def test_commands_started_in_one_second_get_a_run_folder_each(tmp_path):
    """Without --output_dir each run gets runs/<time>: commands started together (a sweep) must not share one."""
    start_at = time.time() + 3  # all at once, after each process has imported what it needs
    code = (
        "import time, sys; from mnist_lightning.core.runs import new_run; "
        f"time.sleep(max(0, {start_at} - time.time()))\n"
        f"with new_run(None, {str(tmp_path / 'runs')!r}) as run_dir: print(run_dir)"
    )
    processes = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    folders = [process.communicate(timeout=60)[0].strip() for process in processes]
    assert [process.returncode for process in processes] == [0] * 4
    assert len(set(folders)) == 4, folders


def test_an_evaluation_into_the_folder_of_a_run_that_is_writing_it_names_the_run(task, checkpoint, capsys):
    """`evaluate.py --output_dir <run>` while the run trains: refused, in use by its command, and not as an earlier
    run's."""
    from mnist_lightning.core.evaluate import main

    run = Path(checkpoint).parent.parent
    with run_in_progress(run):
        assert main(["--ckpt_path", checkpoint, "--output_dir", str(run)]) == 2
    message = one_line(capsys.readouterr().err)
    assert f"{run} is in use by process " in message and "which has not ended" in message, message
    recorded = " ".join((run / ".lock").read_text().split())  # the command that holds the run, as it wrote it
    assert recorded in message and "earlier run" not in message


def test_an_export_into_the_folder_of_another_run_that_is_writing_it_is_refused(task, checkpoint, tmp_path, capsys):
    from mnist_lightning.core.export import main

    running = tmp_path / "running"
    running.mkdir()
    with run_in_progress(running):
        assert main(["--ckpt_path", checkpoint, "--output_dir", str(running), "--formats", "pt2"]) == 2
    assert f"{running} is in use by another process, which has not ended" in one_line(capsys.readouterr().err)
    assert not (running / "model.pt2").exists()
