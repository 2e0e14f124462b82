"""Refuse names that would make a broken project, before any file is written.

cookiecutter deletes the half-made project folder when this hook exits non-zero, so nothing is left behind.
"""

import keyword
import re
import sys

PACKAGE = "{{ cookiecutter.package_name }}"
SLUG = "{{ cookiecutter.project_slug }}"
NAME_LENGTH = int("{{ cookiecutter.project_name | trim | length }}")
# The generated project imports these (pyproject.toml's dependencies and extras, and what they import): a
# package of the same name would be imported in their place, from the project's src/ or the current folder.
DEPENDENCIES = {"torch", "torchvision", "lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities"}
DEPENDENCIES |= {"torchmetrics", "jsonargparse", "yaml", "numpy", "PIL", "onnx", "onnxscript", "onnxruntime"}
DEPENDENCIES |= {"tensorboard", "matplotlib", "pytest", "cookiecutter", "setuptools", "pip", "typing_extensions"}
DEPENDENCIES |= {"cruft", "git", "typer", "click"}  # the dev extra's cruft (make update-template) and what it imports
# What slugify leaves unchanged: a valid distribution name and a folder that stays in the output folder.
SLUG_PATTERN = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")

problems = []
if not PACKAGE.isidentifier() or keyword.iskeyword(PACKAGE) or not PACKAGE.isascii():
    problems.append(
        f"package_name {PACKAGE!r} is not a valid Python package name: use letters, digits and underscores, "
        "not starting with a digit and not a Python keyword (for example digit_reader)."
    )
elif PACKAGE in sys.stdlib_module_names or PACKAGE in sys.builtin_module_names:
    problems.append(
        f"package_name {PACKAGE!r} is the name of a module of Python's standard library: the project's package "
        "would hide it (or be hidden by it), and the project could not run. Choose another name (for example "
        "digit_reader)."
    )
elif PACKAGE.lower() in {name.lower() for name in DEPENDENCIES}:
    problems.append(
        f"package_name {PACKAGE!r} is the name of a package that the project depends on (or that its tools "
        "install): one of the two would be imported in place of the other, and the project could not run. Choose "
        "another name (for example digit_reader)."
    )
if NAME_LENGTH == 0:
    problems.append("project_name is empty: give the project a name (for example Digit Reader).")
if not SLUG_PATTERN.fullmatch(SLUG):
    problems.append(
        f"project_slug {SLUG!r} is not a usable folder and distribution name: use lowercase letters and digits, "
        "joined by single hyphens (for example digit-reader)."
    )
if problems:
    print("Error: " + " ".join(problems) + " Nothing was generated.", file=sys.stderr)
    sys.exit(1)
