"""This repo as a cookiecutter template: baking, renaming, validation, options, and the project it generates.

Template-only: hooks/pre_prompt.py leaves this file out of generated projects.
"""

import importlib.util
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from helpers import FAKE_VAL

# A dev extra: without it (a GPU machine's own environment, say) these tests skip, and the rest still collect.
pytest.importorskip("cookiecutter")
import jinja2
from cookiecutter.exceptions import FailedHookException
from cookiecutter.main import cookiecutter

ROOT = Path(__file__).resolve().parents[1]
OLD_NAMES = ("mnist_lightning", "mnist-lightning", "MNIST Lightning")
MACHINERY = ("cookiecutter.json", "hooks", ".ci", "tests/test_template.py", "tests/test_template_update.py")
MACHINERY += ("tests/test_copier.py", ".github/workflows/template.yml")
CUSTOM = {"project_name": "Digit Reader", "author_name": "Zoë Ångström", "description": "Reads handwritten digits."}


def load_hook(name: str):
    """A hook as a module: its functions and tables, without running it (each runs only as a script)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pre_prompt, post_gen_project = load_hook("pre_prompt"), load_hook("post_gen_project")
OPTIONAL_PATHS = post_gen_project.OPTIONAL_PATHS
DEFAULTS = json.loads((ROOT / "cookiecutter.json").read_text())
OPTIONS = sorted(name for name, value in DEFAULTS.items() if isinstance(value, bool))
ALL_OFF = dict.fromkeys(OPTIONS, False)
# Every option's own README section, and words that only it brings.
README_SECTIONS = {
    "with_ladder": ("## The ladder", "train_pytorch.py", "train_fabric.py", "train_trainer.py", "compare.py"),
    "with_digit_photos": ("## Pictures of digits", "preprocessing.py", "read_file", "given files"),
    "with_benchmarks": ("## Benchmarks", "benchmarks/"),
    "with_plots": ("## Plots", "curves.png", ".[plots]"),
}
README_ALWAYS = ("## Install", "## Train", "## Test", "## Evaluate, predict, export", "## Your network")
README_ALWAYS += ("## Your data", "## Layout", "make train", "make test", "--net ", "--data ", "preprocessing.json")
# Any trace of a marker, option or template-only, in a generated file.
MARKER_TEXT = re.compile(rf"(?:#|<!--)[ \t]*(?:(?:end|only)[ \t]+)?(?:{'|'.join(OPTIONS)})\b|template-only")


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
    for path in ("src/mnist_lightning/core/train.py", "scripts/train.py", "configs/default.yaml", "Makefile"):
        assert (project / path).is_file(), path
    assert (project / "src/mnist_lightning/model.py").read_text() == (ROOT / "src/mnist_lightning/model.py").read_text()


def test_custom_names_replace_the_old_ones_everywhere(custom_project):
    assert custom_project.name == "digit-reader"
    assert (custom_project / "src" / "digit_reader" / "lightning_module.py").is_file()
    for path, text in text_files(custom_project).items():
        for old in OLD_NAMES:  # in any case: MNIST_LIGHTNING_RUN_DIR too
            assert old.lower() not in text.lower() and old.lower() not in str(path).lower(), (old, path)
    pyproject = (custom_project / "pyproject.toml").read_text(encoding="utf-8")
    assert (
        'name = "digit-reader"' in pyproject
        and "Zoë Ångström" in pyproject
        and "Reads handwritten digits." in pyproject
        and 'digit-reader-train = "digit_reader.core.train:main"' in pyproject  # its console commands
    )
    assert (custom_project / "README.md").read_text(encoding="utf-8").startswith("# Digit Reader\n")


def test_no_template_machinery_or_leftover_jinja(custom_project):
    for name in MACHINERY:
        assert not (custom_project / name).exists(), name
    for path, text in text_files(custom_project).items():
        assert "{%" not in text and "{#" not in text and "cookiecutter" not in text, path
        # The legitimate "{{" are the project's own (GitHub Actions' expressions, an f-string's braces), which come
        # through as they are: as many as in this repo's file. The README is hooks/README.project.md's: none.
        name = str(path.relative_to(custom_project)).replace("digit_reader", "mnist_lightning")
        source = "" if name == "README.md" else (ROOT / name).read_text(encoding="utf-8")
        assert text.count("{{") == source.count("{{") and text.count("}}") == source.count("}}"), path
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


def installed(project: Path, venv: Path) -> Path:
    """The project installed (its console commands too) in a new venv that reuses this environment's torch, Lightning,
    pytest... through a .pth file instead of downloading them again; its Python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()
    Path(site, "parent_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(project)]
    subprocess.run(install, check=True)
    return python


@pytest.mark.slow
def test_the_baked_project_installs_and_its_commands_run_under_its_names(custom_project, fake_mnist, tmp_path):
    """Installed (pip install -e, as make install does), its console commands run from any folder and its scripts
    from its own, all under its new names. Its suite is the template's own suite under another name: the template's
    CI runs that one (the copier tests and the all-off bake run the baked suites where the code differs)."""
    python = installed(custom_project, tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("MNIST_DATA_DIR", "PYTHONPATH")}
    where = subprocess.run(
        [python, "-c", "import digit_reader; print(digit_reader.__file__)"], cwd=tmp_path, env=env, capture_output=True
    )
    assert where.stdout.decode().startswith(str(custom_project / "src" / "digit_reader"))

    def run(*command, cwd: Path = tmp_path) -> str:
        result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        return result.stdout

    commands = python.parent
    data = ["--data.data_dir", str(fake_mnist), "--data.val_size", str(FAKE_VAL)]
    quick = ["--accelerator", "cpu", "--devices", "1", "--batch_size", "100", "--max_epochs", "1"]
    run(commands / "digit-reader-train", *data, *quick, "--output_dir", "run", "--enable_progress_bar", "false")
    last = str(tmp_path / "run" / "checkpoints" / "last.ckpt")
    evaluated = run(commands / "digit-reader-evaluate", "--ckpt_path", last, "--output_dir", "evaluated")
    assert "Tested: test/" in evaluated and json.loads((tmp_path / "evaluated" / "metrics.json").read_text())
    run(commands / "digit-reader-predict", "--ckpt_path", last, "--limit_predict_batches", "1", "--output", "p.csv")
    assert (tmp_path / "p.csv").read_text().startswith("input,")
    run(commands / "digit-reader-export", "--ckpt_path", last, "--output_dir", "exported")
    assert (tmp_path / "exported" / "model.pt2").is_file()
    # The scripts, in the project's folder: each imports its package by the new name and parses its flags.
    for script in ("train", "evaluate", "predict", "export"):
        assert "--ckpt_path" in run(python, f"scripts/{script}.py", "--help", cwd=custom_project)


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


@pytest.mark.slow
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
    assert any("test_gpu.py::test_no_host_sync_per_training_step" in line for line in collected)
    assert "error" not in result.stdout.lower()


# Options: cookiecutter.json's yes/no variables. Whole files go by hooks/post_gen_project.py's OPTIONAL_PATHS,
# blocks inside files by hooks/pre_prompt.py's markers.


def test_the_options_are_yes_no_questions_with_their_defaults():
    assert {name: DEFAULTS[name] for name in OPTIONS} == {
        "with_benchmarks": False,
        "with_digit_photos": True,
        "with_ladder": True,
        "with_plots": True,
    }
    assert all(DEFAULTS["__prompts__"].get(name) for name in OPTIONS)
    assert set(OPTIONAL_PATHS) == set(OPTIONS) == pre_prompt.OPTIONS


@pytest.mark.parametrize("option", OPTIONS)
def test_every_optional_path_exists_in_this_repo(option):
    for path in OPTIONAL_PATHS[option]:
        assert (ROOT / path.format(package="mnist_lightning")).exists(), f"{option}: {path}"


def owners(path: str) -> set[str]:
    """The options that list ``path`` or a folder holding it: it is in a project only when all of them are on."""
    return {
        option
        for option, paths in OPTIONAL_PATHS.items()
        for listed in paths
        if path == listed or (listed.endswith("/") and path.startswith(listed))
    }


def readme_prose(readme: str) -> str:
    return re.sub(r"```.*?```", "(code)", readme, flags=re.DOTALL)


def check_project(project: Path, answers: dict[str, bool], package: str) -> None:
    """What the options promise: each option's files, README section and blocks present exactly when it is on."""
    for paths in OPTIONAL_PATHS.values():
        for path in paths:
            expected = all(answers[option] for option in owners(path))
            assert (project / path.format(package=package)).exists() == expected, path
    for path, text in text_files(project).items():
        assert not MARKER_TEXT.search(text), (path, MARKER_TEXT.search(text).group())
    readme = (project / "README.md").read_text(encoding="utf-8")
    for words in README_ALWAYS:
        assert words in readme, words
    for option, words in README_SECTIONS.items():
        for word in words:
            assert (word in readme) == answers[option], (option, word)
    assert "\n\n\n" not in readme_prose(readme) and readme.endswith(".\n")
    # Every file the README names is in the project, except the two it asks the reader to write.
    named = set(re.findall(r"\b((?:src|scripts|tests|configs|benchmarks)/[\w/.-]+\.(?:py|yaml|md))\b", readme))
    for path in named - {f"src/{package}/my_net.py", f"src/{package}/my_data.py"}:
        assert (project / path).is_file(), path


@pytest.mark.parametrize(
    "answers",
    [dict(zip(OPTIONS, values, strict=True)) for values in itertools.product([False, True], repeat=len(OPTIONS))],
    ids=lambda answers: "-".join(name.removeprefix("with_") if on else "no" for name, on in answers.items()),
)
def test_each_combination_of_options_bakes_what_it_promises(template, tmp_path, answers):
    project = bake(template, tmp_path, **answers)
    check_project(project, answers, "mnist_lightning")


def test_all_options_off_leave_out_every_optional_path(template, tmp_path):
    project = bake(template, tmp_path, **CUSTOM, **ALL_OFF)
    for path in (p.format(package="digit_reader") for paths in OPTIONAL_PATHS.values() for p in paths):
        assert not (project / path).exists(), path
    assert not (project / "benchmarks").exists()
    check_project(project, ALL_OFF, "digit_reader")
    # No word of what the options removed is left, in code or comments ("fabric" is Lightning's library here).
    words = re.compile(r"\brungs?\b|ladder|benchmark|photo|\bFabric\b(?! *\()", re.IGNORECASE)
    for path, text in text_files(project).items():
        found = words.search(text.replace("lightning.fabric", ""))
        assert path.name == "README.md" or not found, (path, found and found.group())  # the README: checked above


def test_the_defaults_have_the_ladder_and_the_photos_and_no_benchmarks(template, tmp_path):
    project = bake(template, tmp_path, **CUSTOM)
    for path in ("scripts/train_trainer.py", "scripts/compare.py", "src/digit_reader/preprocessing.py"):
        assert (project / path).is_file(), path
    assert not (project / "benchmarks").exists()
    readme = (project / "README.md").read_text(encoding="utf-8")
    assert "## The ladder" in readme and "## Pictures of digits" in readme and "## Benchmarks" not in readme
    assert "src/digit_reader/model.py" in readme and "--net digit_reader.my_net.MyNet --net.width 64" in readme
    # The steps from a picture to the model's input: this repo's README section, which tests/test_preprocessing.py
    # checks against preprocessing.STEPS in the baked project too.
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("### From a picture to the model's input")[1]
    assert section.split("\n## ")[0].strip() in readme.replace("digit_reader", "mnist_lightning")


def test_the_project_readme_takes_the_sections_it_names_from_this_readme():
    readme = "# T\n\n## A\n\nText of A, mnist_lightning.\n\n### B\n\n1. b\n\n## C\n\nText of C.\n"
    template = "# {{ cookiecutter.project_name }}\n\nIntro.\n\n<!-- README.md section: ### B -->\n"
    template += "\n<!-- README.md section: ## A -->\nEnd.\n"
    expected = template.split("<!--")[0] + "### B\n\n1. b\n\n## A\n\nText of A, {{ cookiecutter.package_name }}.\n\n"
    expected += "### B\n\n1. b\nEnd.\n"
    assert pre_prompt.project_readme(readme, template) == expected
    with pytest.raises(pre_prompt.MarkerError, match=re.escape("README.md has no section '## D'")):
        pre_prompt.project_readme(readme, "<!-- README.md section: ## D -->\n")


def test_yes_and_no_answers_given_as_words(template, tmp_path):
    """`cookiecutter ... with_ladder=no with_benchmarks=yes`: words, as the command line gives them."""
    project = bake(template, tmp_path, with_ladder="no", with_benchmarks="yes")
    assert not (project / "scripts/compare.py").exists() and (project / "benchmarks/run.py").is_file()


def render(text: str, **answers: bool) -> str:
    """``text`` as a baked project has it: marked up by hooks/pre_prompt.py, rendered as cookiecutter does."""
    environment = jinja2.Environment(keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    names = {"project_name": "Digit Reader", "project_slug": "digit-reader", "package_name": "digit_reader"}
    return environment.from_string(pre_prompt.as_template(text)).render(cookiecutter={**names, **answers})


MARKED_CODE = """import os
# with_ladder:
import ladder
    # with_digit_photos:
    from mnist_lightning import photos
    # end with_digit_photos
# end with_ladder
# with_benchmarks:
BENCH = "${{ matrix.python-version }}"
# end with_benchmarks
# with_digit_photos:
PHOTOS = 1
# end with_digit_photos
from mnist_lightning import x  # only with_digit_photos
SECRET = 1  # template-only
last = 1
"""
MARKED_MARKDOWN = """# MNIST Lightning

<!-- with_ladder -->
## Ladder

Text.
<!-- end with_ladder -->
| row | <!-- only with_benchmarks -->
<!-- template-only -->
Template words.
<!-- /template-only -->
End.
"""


@pytest.mark.parametrize("values", list(itertools.product([False, True], repeat=3)))
def test_option_markers_keep_their_lines_only_when_the_option_is_on(values):
    ladder, photos, bench = values
    answers = {"with_ladder": ladder, "with_digit_photos": photos, "with_benchmarks": bench}
    expected_code = (
        "import os\n"
        + ("import ladder\n" + ("    from digit_reader import photos\n" if photos else "") if ladder else "")
        + ('BENCH = "${{ matrix.python-version }}"\n' if bench else "")
        + ("PHOTOS = 1\nfrom digit_reader import x\n" if photos else "")
        + "last = 1\n"
    )
    assert render(MARKED_CODE, **answers) == expected_code
    expected_markdown = (
        "# Digit Reader\n\n" + ("## Ladder\n\nText.\n" if ladder else "") + ("| row |\n" if bench else "")
    )
    assert render(MARKED_MARKDOWN, **answers) == expected_markdown + "End.\n"
    # Markers in a file with Windows line ends (Jinja writes "\n"; cookiecutter restores the file's own line ends).
    assert render("a\r\n# with_ladder:\r\nb\r\n# end with_ladder\r\nc", **answers) == "a\n" + "b\n" * ladder + "c"


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("x\n# with_ladders:\ny\n# end with_ladders\n", "<text>:2: with_ladders is not a yes/no option"),
        ("x\n# end with_ladder\n", "<text>:2: end with_ladder does not close an open block (no block is open)"),
        ("# with_ladder:\n# with_benchmarks:\n# end with_ladder\n", "<text>:3: end with_ladder does not close an open"),
        ("# with_ladder:\n# with_benchmarks:\n# end with_benchmarks\n", "<text>:1: the block with_ladder is never"),
        ("x = 1  # only with_ladder, and more\n", "<text>:1: a marker must be alone on its line"),
        ("# end with_ladder now\n", "<text>:1: a marker must be alone"),
        ("x = 1  # template-only\n# end with_ladder\n", "<text>:2: end with_ladder"),  # the file's own line numbers
    ],
)
def test_a_wrong_marker_is_refused_with_its_line(text, phrase):
    with pytest.raises(pre_prompt.MarkerError, match=re.escape(phrase)):
        pre_prompt.as_template(text)


def test_markers_in_a_project_file_work_in_a_bake(tmp_path):
    template = clean_copy(tmp_path / "template")
    makefile = template / "Makefile"
    blocks = "# with_ladder:\nladder-target:\n\techo ladder\n# end with_ladder\n"
    blocks += "# with_benchmarks:\nbenchmarks-target:\n\techo benchmarks\n# end with_benchmarks\n"
    makefile.write_text(makefile.read_text() + blocks + "LADDER := mnist_lightning  # only with_ladder\n")
    makefile_off = bake(template, tmp_path / "off", **ALL_OFF) / "Makefile"
    makefile_on = bake(template, tmp_path / "on", with_benchmarks=True) / "Makefile"
    original = (ROOT / "Makefile").read_text()
    assert makefile_off.read_text() == original
    expected = "ladder-target:\n\techo ladder\nbenchmarks-target:\n\techo benchmarks\nLADDER := mnist_lightning\n"
    assert makefile_on.read_text() == original + expected


def test_a_wrong_marker_stops_the_bake_with_its_file_and_line(tmp_path, capfd):
    template = clean_copy(tmp_path / "template")
    model = template / "src" / "mnist_lightning" / "model.py"
    model.write_text(model.read_text() + "# with_ladder:\n")
    lines = len(model.read_text().splitlines())
    output_dir = tmp_path / "out"
    output_dir.mkdir()
    with pytest.raises(FailedHookException):
        bake(template, output_dir)
    assert list(output_dir.iterdir()) == []
    err = " ".join(capfd.readouterr().err.split())
    assert f"src/mnist_lightning/model.py:{lines}: the block with_ladder is never closed" in err


def test_a_listed_path_missing_from_the_project_stops_the_bake(tmp_path, capfd):
    """OPTIONAL_PATHS cannot go stale: a file renamed in the project but not in the list is an error."""
    template = clean_copy(tmp_path / "template")
    (template / "tests" / "test_compare.py").rename(template / "tests" / "test_parity.py")
    output_dir = tmp_path / "out"
    output_dir.mkdir()
    with pytest.raises(FailedHookException):
        bake(template, output_dir, **ALL_OFF)
    assert list(output_dir.iterdir()) == []
    assert "lists tests/test_compare.py, which the project does not have" in " ".join(capfd.readouterr().err.split())


@pytest.mark.parametrize(
    "answers",
    [
        pytest.param({}, id="defaults"),
        pytest.param(ALL_OFF, id="all-off"),
        pytest.param(CUSTOM, id="custom-names"),
    ],
)
def test_a_baked_project_passes_its_own_lint(template, tmp_path, answers):
    """`make lint` in the baked project: nothing left dangling by an option (an import of a removed module, a
    blank line too many) and nothing that a new name reflows."""
    pytest.importorskip("ruff")
    project = bake(template, tmp_path, **answers)
    for command in (["check"], ["format", "--check"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *command, "--no-cache", "."], cwd=project, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-1000:]


@pytest.mark.slow
def test_the_all_off_projects_own_suite_passes(template, tmp_path):
    """The options change code (core/'s train, predict, records, the LightningModule, gpu_check...) and tests, so the
    all-off bake's suite tests code that the template's own does not: its `make test` (the default suite, the
    example's tests with every option off), then the slow tests of its test files that the options change (the
    Classifier under DDP without plots, gpu_check's steps without the photos, the scripts...). Its other slow tests
    are the template's own, run by the template's suite on code that differs only where those test it. (The
    defaults' bake is the template's code under another name: the template's suite tests it; test_copier.py runs
    the defaults' and the all-off bakes' `make test` after a copier's edits.)"""
    project = bake(template, tmp_path / "off", **CUSTOM, **ALL_OFF)
    defaults = bake(template, tmp_path / "on", **CUSTOM)
    changed = sorted(
        f"tests/{path.name}"
        for path in (project / "tests").glob("test_*.py")
        if path.read_text(encoding="utf-8") != (defaults / "tests" / path.name).read_text(encoding="utf-8")
    )
    assert "tests/test_gpu.py" in changed  # gpu_check's steps: the photos' step goes with the option
    python = installed(project, tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("MNIST_DATA_DIR", "PYTHONPATH")}
    make = ["make", "--no-print-directory", "-o", ".venv/.installed", f"BIN={python.parent}", "test", "ARGS=-q"]
    slow = [python, "-m", "pytest", "-n", "auto", "-q", "-p", "no:cacheprovider", "-m", "slow", *changed]
    for command in (make, slow):
        result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


@pytest.mark.slow
def test_the_readmes_own_network_and_data_train(template, fake_mnist, tmp_path):
    """The baked README's "Your network" and "Your data" examples, written where it says, train as it says."""
    project = bake(template, tmp_path / "out", **CUSTOM)
    readme = (project / "README.md").read_text(encoding="utf-8")
    for path, code in re.findall(r"```python\n# (src/digit_reader/\w+\.py)[^\n]*\n(.*?)```", readme, re.DOTALL):
        (project / path).write_text(code)
    assert (project / "src/digit_reader/my_net.py").is_file() and (project / "src/digit_reader/my_data.py").is_file()
    flags = re.search(r"--net digit_reader\.my_net\.MyNet[^\n]*", readme).group().split()
    flags += re.search(r"--data digit_reader\.my_data\.MyData[^\n]*", readme).group().split()
    flags += ["--accelerator", "cpu", "--devices", "1", "--max_epochs", "2", "--output_dir", str(tmp_path / "run")]
    env = {k: v for k, v in os.environ.items() if k != "MNIST_DATA_DIR"} | {"PYTHONPATH": str(project / "src")}
    train = subprocess.run([sys.executable, "scripts/train.py", *flags], cwd=project, env=env, capture_output=True)
    assert train.returncode == 0, train.stderr.decode()[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["test/acc"] > 0.8  # three classes: chance is 1/3
    # Its predict_dataloader, predicted; then a new run from its weights, as "Train" says (with its --net and --data).
    last = str(tmp_path / "run" / "checkpoints" / "last.ckpt")
    output = tmp_path / "predictions.csv"
    predict = [sys.executable, "scripts/predict.py", "--ckpt_path", last, "--output", str(output)]
    assert subprocess.run(predict, cwd=project, env=env, capture_output=True).returncode == 0
    assert len(output.read_text().splitlines()) == 1 + 2000 - 2 * (2000 // 3)  # a header and the test set
    fine_tune = re.search(r"python (scripts/train\.py --ckpt_path runs/<run>/checkpoints/last\.ckpt[^\n]*)", readme)[1]
    fine_tune = fine_tune.replace("runs/<run>/checkpoints/last.ckpt", last).split()
    flags[-1] = str(tmp_path / "fine_tuned")
    train = subprocess.run([sys.executable, *fine_tune, *flags], cwd=project, env=env, capture_output=True)
    assert train.returncode == 0, train.stderr.decode()[-3000:]
    assert yaml.safe_load((tmp_path / "fine_tuned" / "config.yaml").read_text())["ckpt_path"] == last
