"""A baked project takes the template's later commits, as its owner does it: `cruft create` from the template
branch (hooks/template_branch.py), the owner's edits committed, then `make update-template` after the template moved.

Template-only: hooks/pre_prompt.py leaves this file out of generated projects.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cruft")
from test_template import CUSTOM, bake, clean_copy

# The test's own git identity and no user configuration (a commit hook or signing would stop the commits).
ENV = {k: v for k, v in os.environ.items() if k not in ("MNIST_DATA_DIR", "PYTHONPATH")} | {
    "GIT_AUTHOR_NAME": "Owner",
    "GIT_AUTHOR_EMAIL": "owner@example.com",
    "GIT_COMMITTER_NAME": "Owner",
    "GIT_COMMITTER_EMAIL": "owner@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}
# The environment running this test has cruft (the dev extra): the project's make targets use it, as they would use
# the project's own .venv once `make install` made it.
# --no-print-directory: under `make test-all` (CI) this make is a sub-make, which would add its directory lines.
MAKE = ["make", "--no-print-directory", "-o", ".venv/.installed", f"BIN={Path(sys.executable).parent}"]
ANSWERS = {**CUSTOM, "with_ladder": False}
CONFLICT = re.compile(r"^(<{7}|={7}|>{7})( |$)", re.MULTILINE)  # the lines git writes around a conflict


def run(cwd: Path, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True)


def git(cwd: Path, *args: str) -> str:
    result = run(cwd, "git", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def publish(template: Path, message: str) -> str:
    """Commit the template's project, then publish that commit on the template branch, as CI does on main."""
    git(template, "add", "--all")
    git(template, "commit", "-q", "-m", message)
    result = run(template, sys.executable, "hooks/template_branch.py")
    assert result.returncode == 0, result.stderr
    return git(template, "rev-parse", "template").strip()


def text_files(project: Path) -> dict[Path, str]:
    """The project's files, as git has them (not its .git folder)."""
    names = git(project, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    return {project / name: (project / name).read_text(encoding="utf-8") for name in filter(None, names)}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new), encoding="utf-8")


@pytest.fixture
def baked(tmp_path) -> tuple[Path, Path]:
    """A template repository whose first commit is published, and a project baked from it with cruft, committed."""
    template = clean_copy(tmp_path / "template")
    git(template, "init", "-q", "-b", "main")
    publish(template, "The template")
    command = ["cruft", "create", str(template), "--checkout", "template", "--no-input"]
    command += ["--output-dir", str(tmp_path), "--extra-context", json.dumps(ANSWERS)]
    result = run(tmp_path, sys.executable, "-m", *command)
    assert result.returncode == 0, result.stdout + result.stderr
    project = tmp_path / "digit-reader"
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "--all")
    git(project, "commit", "-q", "-m", "Baked")
    return template, project


# A later commit of the template: a change in core/ and in configs/ (and in a file that the project left out).
CORE = "src/{package}/core/checks.py"
CORE_ADDED = '\n\ndef later_check() -> str:\n    """A later commit of the template."""\n    return "{package}"\n'
SEED = "seed: 42                 # model initialization and data order"
TEMPLATE_SEED = "seed: 42                 # model initialization and data order (the template's later words)"


def change_the_template(template: Path) -> str:
    with (template / CORE.format(package="mnist_lightning")).open("a") as core:
        core.write(CORE_ADDED.format(package="mnist_lightning"))
    edit(template / "configs/default.yaml", SEED, TEMPLATE_SEED)
    with (template / "scripts/compare.py").open("a") as ladder:
        ladder.write("# A later commit of the template, in a file of the ladder.\n")
    return publish(template, "The template, later")


@pytest.mark.slow
def test_an_update_brings_the_templates_changes_and_keeps_the_owners(baked):
    template, project = baked
    # The owner's network, data module, README and a config of their own, committed.
    package = project / "src/digit_reader"
    own_net = '\n\nclass OwnNet(SimpleNN):\n    """The owner\'s network."""\n'
    with (package / "model.py").open("a") as model:
        model.write(own_net)
    edit(package / "datamodule.py", '"""MNIST (or FashionMNIST, KMNIST) in memory.', '"""Our digits, in memory.')
    edit(project / "README.md", "Reads handwritten digits.\n", "Reads the digits of our forms.\n")
    edit(project / "configs/classic_sgd.yaml", "max_epochs: 5", "max_epochs: 8")
    edit(project / "configs/default.yaml", "lr: 0.02                 # peak", "lr: 0.02                 # ours: peak")
    git(project, "commit", "-q", "-a", "-m", "Our network, data, README and configs")
    owners = text_files(project)

    assert run(project, *MAKE, "check-template").returncode == 0
    later = change_the_template(template)
    behind = run(project, *MAKE, "check-template")
    assert behind.returncode != 0 and "out of date" in behind.stdout
    # cruft's advice names its own command, which would read the template's default branch: the make target follows.
    assert behind.stdout.rstrip().endswith("make update-template")

    update = run(project, *MAKE, "update-template")
    assert update.returncode == 0, update.stdout + update.stderr
    # The template's changes arrived, in the project's names.
    assert (package / "core/checks.py").read_text().endswith(CORE_ADDED.format(package="digit_reader"))
    default_yaml = (project / "configs/default.yaml").read_text()
    assert TEMPLATE_SEED in default_yaml and "# ours: peak" in default_yaml
    # The owner's edits are intact, and so are the answers: the ladder stays out.
    assert (package / "model.py").read_text() == owners[package / "model.py"]
    assert (package / "datamodule.py").read_text() == owners[package / "datamodule.py"]
    assert (project / "README.md").read_text() == owners[project / "README.md"]
    assert (project / "configs/classic_sgd.yaml").read_text() == owners[project / "configs/classic_sgd.yaml"]
    assert not (project / "scripts/compare.py").exists()
    cruft_state = json.loads((project / ".cruft.json").read_text())
    assert cruft_state["commit"] == later
    assert {name: cruft_state["context"]["cookiecutter"][name] for name in ANSWERS} == ANSWERS
    assert not [path for path, text in text_files(project).items() if CONFLICT.search(text)]
    # Nothing else changed: the template's two files, and the commit in .cruft.json.
    changed = git(project, "status", "--porcelain").splitlines()
    assert sorted(line[3:] for line in changed) == [
        ".cruft.json",
        "configs/default.yaml",
        CORE.format(package="digit_reader"),
    ]
    git(project, "commit", "-q", "-a", "-m", "The template, later")
    assert run(project, *MAKE, "check-template").returncode == 0

    # The updated project's tests of what changed: the network, the data module, the configs, and the project as it
    # is configured (the owner's network and data module through core/, changed) through every command.
    tests = ["tests/test_model.py", "tests/test_data.py", "tests/test_cli.py", "tests/test_smoke.py"]
    env = ENV | {"PYTHONPATH": str(project / "src")}
    command = [sys.executable, "-m", "pytest", "-m", "not slow", "-q", "-x", "-p", "no:cacheprovider", *tests]
    result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


@pytest.mark.slow
def test_the_same_line_changed_by_both_ends_in_conflict_markers_and_an_error(baked):
    template, project = baked
    owner_seed = "seed: 7                  # ours"
    edit(project / "configs/default.yaml", SEED, owner_seed)
    git(project, "commit", "-q", "-a", "-m", "Our seed")
    change_the_template(template)

    update = run(project, *MAKE, "update-template")
    assert update.returncode != 0
    message = " ".join(update.stderr.split())
    assert "changed lines that you changed too" in message and "in configs/default.yaml git's conflict" in message
    default_yaml = (project / "configs/default.yaml").read_text()
    conflict = f"<<<<<<< ours\n{owner_seed}\n=======\n{TEMPLATE_SEED}\n>>>>>>> theirs\n"
    assert conflict in default_yaml
    # The README's way to find markers left before committing.
    check = run(project, "git", "diff", "--check", "HEAD")
    assert check.returncode != 0 and "configs/default.yaml" in check.stdout
    # What did not conflict arrived all the same.
    assert (
        (project / CORE.format(package="digit_reader")).read_text().endswith(CORE_ADDED.format(package="digit_reader"))
    )


OWNERS_LINE = "A network (`SimpleNN`, one linear layer) trained on MNIST with"


@pytest.mark.slow
def test_an_update_in_a_fresh_clone_merges_with_conflict_markers_not_rej_files(baked, tmp_path):
    """git apply -3 needs the template's old files among the project's objects; a clone of the project lacks those
    of an earlier update (the template's files as they were, not the merged ones)."""
    template, project = baked
    edit(project / "README.md", OWNERS_LINE, "Our network, trained on the digits of our forms, with")
    git(project, "commit", "-q", "-a", "-m", "Our README")
    with (template / "hooks/README.project.md").open("a") as readme:
        readme.write("\nA later paragraph of the template.\n")
    publish(template, "The template, later")
    update = run(project, *MAKE, "update-template")
    assert update.returncode == 0, update.stdout + update.stderr
    git(project, "commit", "-q", "-a", "-m", "The template, later")

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--no-local", str(project), str(clone))  # as from a server: no loose objects
    edit(template / "hooks/README.project.md", OWNERS_LINE, OWNERS_LINE.replace(") trained", "), trained"))
    publish(template, "The template, later still")
    update = run(clone, *MAKE, "update-template")
    assert update.returncode != 0 and "in README.md git's conflict markers" in " ".join(update.stderr.split())
    readme = (clone / "README.md").read_text()
    assert "<<<<<<< ours\nOur network, trained on the digits of our forms, with\n=======\n" in readme
    assert not list(clone.rglob("*.rej"))


@pytest.mark.slow
def test_the_template_branch_bakes_what_cookiecutter_bakes(tmp_path):
    """cruft bakes from the template branch what cookiecutter bakes from the project, and the branch only gets a
    commit when the template changes."""
    template = clean_copy(tmp_path / "template")
    git(template, "init", "-q", "-b", "main")
    first = publish(template, "The template")
    result = run(template, sys.executable, "hooks/template_branch.py")
    assert result.stdout.strip() == "template: unchanged"
    assert git(template, "rev-parse", "template").strip() == first
    # The template's own repository has no .cruft.json: one paragraph, no traceback.
    check = run(template, *MAKE, "check-template")
    assert check.returncode != 0 and "there is no .cruft.json here" in check.stderr and "Traceback" not in check.stderr
    assert "hooks/pre_prompt.py" not in git(template, "ls-tree", "-r", "--name-only", "template")
    # A commit of main that changes only template-only files (this repo's CI, the template's own README section)
    # adds nothing: the branch's own README names no commit.
    with (template / ".ci/run").open("a") as ci:
        ci.write("# A later commit of this repo's CI.\n")
    edit(template / "README.md", "<!-- template-only -->\n", "<!-- template-only -->\nA later sentence.\n\n")
    git(template, "commit", "-q", "-a", "-m", "Template-only changes")
    result = run(template, sys.executable, "hooks/template_branch.py")
    assert result.stdout.strip() == "template: unchanged", result.stderr

    command = ["cruft", "create", str(template), "--checkout", "template", "--no-input"]
    command += ["--output-dir", str(tmp_path / "cruft"), "--extra-context", json.dumps(ANSWERS)]
    result = run(tmp_path, sys.executable, "-m", *command)
    assert result.returncode == 0, result.stdout + result.stderr
    from_cruft = tmp_path / "cruft" / "digit-reader"
    from_cookiecutter = bake(template, tmp_path / "cookiecutter", **ANSWERS)
    files = {path.relative_to(from_cruft): path.read_bytes() for path in from_cruft.rglob("*") if path.is_file()}
    assert json.loads(files.pop(Path(".cruft.json")))["commit"] == first
    assert files == {
        path.relative_to(from_cookiecutter): path.read_bytes()
        for path in from_cookiecutter.rglob("*")
        if path.is_file()
    }
    assert not (from_cruft / "tests/test_template_update.py").exists()
    # The baked README says how to update, with the commands that the tests above run.
    readme = (from_cruft / "README.md").read_text(encoding="utf-8")
    assert "## Updating from the template" in readme
    assert "make update-template" in readme and "make check-template" in readme
    assert not (from_cruft / ".github/workflows/template.yml").exists()
