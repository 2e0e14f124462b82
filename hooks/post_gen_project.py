"""Remove what the options answered "no" leave out: whole files and folders, listed in OPTIONAL_PATHS below.

cookiecutter renders this file with Jinja and runs it in the new project's folder, after every file is written.
Blocks inside the files that stay are handled earlier, by hooks/pre_prompt.py's option markers. Every path listed
must exist in the project, whatever the answers: a path that was renamed or removed stops the bake with its name
(and tests/test_template.py checks the list against the repo), so the list cannot go stale unnoticed.
"""

import json
import shutil
import sys
from pathlib import Path

# Option -> the files and folders that only it needs, relative to the project's root; {package} stands for the
# package's folder name. Each option is a boolean of cookiecutter.json; with the option off, these are deleted.
OPTIONAL_PATHS = {
    "with_ladder": [
        "scripts/train_pytorch.py",
        "scripts/train_fabric.py",
        "scripts/train_trainer.py",
        "scripts/compare.py",
        "tests/test_ladder.py",
        "tests/test_compare.py",
        "tests/test_example_ladder_devices.py",
    ],
    "with_digit_photos": [
        "src/{package}/digit_files.py",
        "src/{package}/core/predict_files.py",
        "src/{package}/preprocessing.py",
        "tests/test_preprocessing.py",
        "tests/test_predict_photos.py",
        "benchmarks/predict.py",
    ],
    "with_plots": [
        "src/{package}/core/plots.py",
        "tests/test_plots.py",
        "tests/test_example_plots.py",
    ],
    "with_benchmarks": [
        "benchmarks/",
    ],
}


def answers() -> dict:
    """The answers given to cookiecutter (rendered into this file), booleans as booleans."""
    return json.loads(r"""{{ cookiecutter | tojson }}""")


def paths_to_remove(answers: dict, root: Path) -> list[Path]:
    """The paths of the options answered "no"; every listed path must exist under ``root``."""
    package = answers["package_name"]
    unknown = sorted(set(OPTIONAL_PATHS) - {name for name, value in answers.items() if isinstance(value, bool)})
    if unknown:
        raise ValueError(f"OPTIONAL_PATHS names {unknown}, which cookiecutter.json does not have as yes/no options.")
    missing = [
        path
        for paths in OPTIONAL_PATHS.values()
        for path in paths
        if not (root / path.format(package=package)).exists()
    ]
    if missing:
        raise ValueError(
            f"OPTIONAL_PATHS in hooks/post_gen_project.py lists {', '.join(missing)}, which the project does not "
            "have: correct the list."
        )
    return [
        root / path.format(package=package)
        for name, paths in OPTIONAL_PATHS.items()
        if not answers[name]
        for path in paths
    ]


def main() -> None:
    try:
        removed = paths_to_remove(answers(), Path.cwd())
    except ValueError as error:
        print(f"Error: {error} Nothing was generated.", file=sys.stderr)
        sys.exit(1)
    for path in removed:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)  # missing: inside a folder already removed


if __name__ == "__main__":
    main()
