"""This repo as a cookiecutter template: baking, renaming, validation, and the project it generates.

Template-only: hooks/pre_prompt.py leaves this file out of generated projects.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import FAKE_VAL

# A dev extra: without it (a GPU machine's own environment, say) these tests skip, and the rest still collect.
pytest.importorskip("cookiecutter")
from cookiecutter.exceptions import FailedHookException
from cookiecutter.main import cookiecutter

ROOT = Path(__file__).resolve().parents[1]
OLD_NAMES = ("mnist_lightning", "mnist-lightning", "MNIST Lightning")
MACHINERY = ("cookiecutter.json", "hooks", ".ci", "tests/test_template.py")
CUSTOM = {"project_name": "Digit Reader", "author_name": "Zoë Ångström", "description": "Reads handwritten digits."}


def clean_copy(destination: Path) -> Path:
    """The repo's files as a fresh clone has them, without .venv/ or runs/ (cookiecutter copies all it is given)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (entry.decode() for entry in listed)):
        if (ROOT / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, destination / name)
    return destination


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return clean_copy(tmp_path_factory.mktemp("template"))


def bake(template: Path, output_dir: Path, **context) -> Path:
    return Path(cookiecutter(str(template), no_input=True, output_dir=str(output_dir), extra_context=context))


def text_files(project: Path) -> dict[Path, str]:
    return {path: path.read_text(encoding="utf-8") for path in project.rglob("*") if path.is_file()}


@pytest.fixture(scope="module")
def custom_project(template, tmp_path_factory) -> Path:
    return bake(template, tmp_path_factory.mktemp("baked"), **CUSTOM)


def test_defaults_bake_the_project_as_it_is(template, tmp_path):
    project = bake(template, tmp_path)
    assert project.name == "mnist-lightning"
    for path in ("src/mnist_lightning/train.py", "scripts/train.py", "configs/default.yaml", "Makefile"):
        assert (project / path).is_file(), path
    assert (project / "src/mnist_lightning/model.py").read_text() == (ROOT / "src/mnist_lightning/model.py").read_text()


def test_custom_names_replace_the_old_ones_everywhere(custom_project):
    assert custom_project.name == "digit-reader"
    assert (custom_project / "src" / "digit_reader" / "lightning_module.py").is_file()
    for path, text in text_files(custom_project).items():
        for old in OLD_NAMES:
            assert old not in text and old not in str(path), (old, path)
    pyproject = (custom_project / "pyproject.toml").read_text(encoding="utf-8")
    assert (
        'name = "digit-reader"' in pyproject
        and "Zoë Ångström" in pyproject
        and "Reads handwritten digits." in pyproject
    )
    assert (custom_project / "README.md").read_text(encoding="utf-8").startswith("# Digit Reader\n")


def test_no_template_machinery_or_leftover_jinja(custom_project):
    for name in MACHINERY:
        assert not (custom_project / name).exists(), name
    for path, text in text_files(custom_project).items():
        assert "{%" not in text and "cookiecutter" not in text, path
        # The one legitimate "{{": GitHub Actions expressions, which must come through as they are.
        assert text.count("{{") == text.count("${{"), path
    workflow = (custom_project / ".github/workflows/ci.yml").read_text()
    assert "${{ matrix.python-version }}" in workflow


def test_a_change_to_the_project_shows_up_in_a_baked_project(tmp_path):
    template = clean_copy(tmp_path / "template")
    model = template / "src" / "mnist_lightning" / "model.py"
    model.write_text(model.read_text() + "\nDRIFT_GUARD = 'mnist_lightning'\n")
    project = bake(template, tmp_path / "out", **CUSTOM)
    assert "DRIFT_GUARD = 'digit_reader'" in (project / "src" / "digit_reader" / "model.py").read_text()


INVALID = [
    {"package_name": "class"},
    {"package_name": "1digit"},
    {"package_name": "digit-reader"},
    {"project_slug": "../escape"},
    {"project_slug": "a/b"},
    {"project_slug": "Digit_Reader"},
    {"package_name": "torch"},  # would shadow a dependency
    {"package_name": "lightning"},
    {"package_name": "json"},  # would shadow the standard library
    {"project_name": "  "},
]


@pytest.mark.parametrize("context", INVALID)
def test_invalid_names_are_refused_and_nothing_is_left(template, tmp_path, context):
    output_dir = tmp_path / "out"
    output_dir.mkdir()
    with pytest.raises(FailedHookException):
        bake(template, output_dir, **context)
    assert list(output_dir.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.slow
def test_the_baked_project_installs_passes_its_tests_and_trains(custom_project, fake_mnist, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    # Reuse this environment's torch, Lightning, pytest... through a .pth file instead of downloading them again.
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()
    Path(site, "parent_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(custom_project)]
    subprocess.run(install, check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("MNIST_DATA_DIR", "PYTHONPATH")}
    where = subprocess.run([python, "-c", "import digit_reader; print(digit_reader.__file__)"], capture_output=True)
    assert str(custom_project) in where.stdout.decode()

    # Its default suite (`make test`: all but the slow multi-process tests, which this suite runs on the same code).
    command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow"]
    tests = subprocess.run(command, cwd=custom_project, env=env)
    assert tests.returncode == 0

    flags = [
        "--accelerator",
        "cpu",
        "--devices",
        "1",
        "--data.data_dir",
        str(fake_mnist),
        "--data.val_size",
        str(FAKE_VAL),
    ]
    flags += ["--batch_size", "100", "--max_epochs", "1", "--output_dir", str(tmp_path / "run")]
    train = subprocess.run([python, "scripts/train.py", *flags], cwd=custom_project, env=env, capture_output=True)
    assert train.returncode == 0, train.stderr.decode()[-2000:]
    assert (tmp_path / "run" / "metrics.json").is_file()


def test_without_hooks_nothing_is_generated(template, tmp_path):
    """The template is assembled by hooks/pre_prompt.py; with hooks refused, cookiecutter stops and writes nothing."""
    from cookiecutter.exceptions import NonTemplatedInputDirException

    with pytest.raises(NonTemplatedInputDirException):
        cookiecutter(str(template), no_input=True, output_dir=str(tmp_path / "out"), accept_hooks=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("context", "reason"),
    [
        ({"package_name": "torch"}, "the name of a package that the project depends on"),
        ({"package_name": "json"}, "a module of Python's standard library"),
        ({"project_name": ""}, "project_name is empty"),
    ],
)
def test_a_refused_name_is_told_with_its_reason(template, tmp_path, capfd, context, reason):
    with pytest.raises(FailedHookException):
        bake(template, tmp_path, **context)
    assert reason in " ".join(capfd.readouterr().err.split())


def test_gpu_tests_collect_without_cookiecutter():
    """`pytest -m gpu` on a GPU machine whose environment lacks cookiecutter (a dev extra) still collects: this
    file, which needs it, skips instead of stopping the collection."""
    code = (
        "import sys; sys.modules['cookiecutter'] = None\n"  # None in sys.modules: its import raises ImportError
        "import pytest; sys.exit(pytest.main(['-m', 'gpu', '--collect-only', '-q', '-p', 'no:cacheprovider']))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    collected = [line for line in result.stdout.splitlines() if "::" in line]
    assert any("test_gpu.py::test_no_host_sync_per_training_step_on_any_rung" in line for line in collected)
    assert "error" not in result.stdout.lower()
