"""Refuse names that would make a broken project, before any file is written.

cookiecutter deletes the half-made project folder when this hook exits non-zero, so nothing is left behind.
"""

import keyword
import re
import sys

PACKAGE = "{{ cookiecutter.package_name }}"
SLUG = "{{ cookiecutter.project_slug }}"
# What slugify leaves unchanged: a valid distribution name and a folder that stays in the output folder.
SLUG_PATTERN = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")

problems = []
if not PACKAGE.isidentifier() or keyword.iskeyword(PACKAGE) or not PACKAGE.isascii():
    problems.append(
        f"package_name {PACKAGE!r} is not a valid Python package name: use letters, digits and underscores, "
        "not starting with a digit and not a Python keyword (for example digit_reader)."
    )
if not SLUG_PATTERN.fullmatch(SLUG):
    problems.append(
        f"project_slug {SLUG!r} is not a usable folder and distribution name: use lowercase letters and digits, "
        "joined by single hyphens (for example digit-reader)."
    )
if problems:
    print("Error: " + " ".join(problems) + " Nothing was generated.", file=sys.stderr)
    sys.exit(1)
