"""Assemble the template from the working project at the top of this repo, so there is one copy of the code.

cookiecutter runs this hook in its own temporary copy of the repo, before it asks any question. The hook
copies the project files into ``{{cookiecutter.project_slug|slugify}}/``, renames the package folder, and puts a
placeholder wherever the project's name, slug, package, description or author stands. Anything that already
looks like Jinja (a GitHub Actions ``${{ ... }}``) is wrapped in ``{% raw %}`` so it comes through unchanged.
Template machinery (cookiecutter.json, hooks/, .ci/, the template's tests and workflow) is not copied, and the
project's README.md is hooks/README.project.md (a Jinja template of its own): this repo's README describes the
template.
A line ``<!-- README.md section: ### Some heading -->`` there is replaced by that section of this repo's README
(up to the next heading of its level or above), so that text has one source.

Option markers. The yes/no options of cookiecutter.json (``with_ladder``, ...) keep or drop parts of files:

- a block: a line ``# with_ladder:`` (Python, YAML, TOML, Makefile, shell) or ``<!-- with_ladder -->``
  (Markdown) opens it, a line ``# end with_ladder`` or ``<!-- end with_ladder -->`` closes it. The lines
  between are kept when the option is on. Blocks nest; each ``end`` names the block it closes.
- one line: a trailing ``# only with_ladder`` or ``<!-- only with_ladder -->`` keeps that line (without the
  marker) only when the option is on.

A marker line is the marker alone on its line, indented or not. The markers become Jinja ``{% if %}`` tags that
take the marker's whole line, so a baked project never shows them, on or off, and gains no blank lines. A marker
naming an option that cookiecutter.json lacks, an ``end`` without its block or a block left open stops the bake
with the file and line, and so does what is left of a marker elsewhere (``# end with_ladder`` after code, an
``only`` marker alone on its line). Whole files and folders of an option are not marked:
hooks/post_gen_project.py lists them.

Template-only parts are removed too: sections between ``<!-- template-only -->`` and ``<!-- /template-only -->``
(which hold no option marker), and lines marked ``# template-only`` or ``<!-- template-only row -->``.
"""

import json
import re
import shutil
import sys
from fnmatch import fnmatch
from pathlib import Path
from typing import NoReturn

# slugify keeps a slug like "../x" or "a/b" from creating folders outside, or above, the project folder;
# pre_gen_project.py then refuses any slug that slugify would have changed. An empty slug (from an empty
# project name) still needs a folder name, or cookiecutter fails on the output folder before that hook can say why.
TARGET = Path("{{cookiecutter.project_slug|slugify or 'unnamed-project'}}")
PROJECT = [".github", ".gitignore", "Makefile", "benchmarks", "configs", "pyproject.toml", "scripts", "src", "tests"]
PROJECT_README = Path("hooks/README.project.md")  # the generated project's README.md, already a Jinja template
TEMPLATE_ONLY = {Path("tests/test_template.py"), Path("tests/test_template_update.py"), Path("tests/test_copier.py")}
TEMPLATE_ONLY |= {Path(".github/workflows/template.yml")}  # publishes the template branch that cruft reads
# What .gitignore ignores is never copied: a checkout that was used (pip install -e, tests) holds an egg-info, caches
# and runs that are not the project. Patterns are matched against each part of a path, as git does for a pattern
# without a slash inside it (all of this repo's).
IGNORED = [line.strip().strip("/") for line in Path(".gitignore").read_text().splitlines() if line[:1] not in "#\n"]
# The project's own words -> placeholders; longer strings first, so an author name wins over the project name.
PLACEHOLDERS = {
    "MNIST Lightning contributors": "{{ cookiecutter.author_name }}",
    "A PyTorch Lightning project template: SimpleNN on MNIST, from .to(device) to the Trainer.": (
        "{{ cookiecutter.description }}"
    ),
    "MNIST Lightning": "{{ cookiecutter.project_name }}",
    "mnist-lightning": "{{ cookiecutter.project_slug }}",
    "mnist_lightning": "{{ cookiecutter.package_name }}",
    "MNIST_LIGHTNING": "{{ cookiecutter.package_name | upper }}",  # an environment variable's prefix
}
WORDS = re.compile("|".join(re.escape(word) for word in PLACEHOLDERS))
# Parts of the repo's own files that only concern the template: README sections and marked lines.
TEMPLATE_ONLY_SECTION = re.compile(r"<!-- template-only -->.*?<!-- /template-only -->\n?", re.DOTALL)
TEMPLATE_ONLY_LINE = re.compile(r"^.*(?:# template-only|<!-- template-only row -->)\n", re.MULTILINE)
JINJA_MARKERS = ("{{", "}}", "{%", "%}", "{#", "#}")
README_SECTION = re.compile(r"^<!-- README\.md section: (?P<heading>(?P<level>#+) .+) -->\n", re.MULTILINE)
# The yes/no options, and the markers that name them (see the docstring).
OPTIONS = frozenset(
    name
    for name, value in json.loads((Path(__file__).resolve().parents[1] / "cookiecutter.json").read_text()).items()
    if isinstance(value, bool)
)
BLOCK_MARKER = re.compile(r"[ \t]*(?:#|<!--)[ \t]*(?P<end>end[ \t]+)?(?P<option>with_\w+)[ \t]*:?[ \t]*(?:-->)?[ \t]*")
LINE_MARKER = re.compile(r"(?P<line>.*\S)[ \t]+(?:#|<!--)[ \t]*only[ \t]+(?P<option>with_\w+)[ \t]*(?:-->)?[ \t]*")
# What is left of a marker in a line that is neither form: a mistake, never kept silently.
STRAY_MARKER = re.compile(r"(?:#|<!--)[ \t]*(?:end|only)[ \t]+with_\w+")


class MarkerError(ValueError):
    """An option marker that cannot be turned into a conditional: the message names the file and line."""


def verbatim(text: str) -> str:
    """Text that Jinja must leave alone."""
    return f"{{% raw %}}{text}{{% endraw %}}" if any(marker in text for marker in JINJA_MARKERS) else text


def with_placeholders(text: str) -> str:
    pieces, position = [], 0
    for match in WORDS.finditer(text):
        pieces += [verbatim(text[position : match.start()]), PLACEHOLDERS[match.group()]]
        position = match.end()
    return "".join([*pieces, verbatim(text[position:])])


def split_at_markers(text: str, where: str, options: frozenset[str]) -> list[tuple[str, str]]:
    """The text as (plain text, Jinja tag) pairs, in order: each option marker becomes the tag that replaces it."""
    pieces, plain, open_blocks = [], [], []

    def option(name: str, number: int) -> str:
        if name not in options:
            known = ", ".join(sorted(options))
            raise MarkerError(f"{where}:{number}: {name} is not a yes/no option of cookiecutter.json ({known}).")
        return name

    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        content = line.rstrip("\r\n")
        if block := BLOCK_MARKER.fullmatch(content):
            name = option(block["option"], number)
            if not block["end"]:
                open_blocks.append((name, number))
                tag = f"{{% if cookiecutter.{name} %}}"
            elif open_blocks and open_blocks[-1][0] == name:
                open_blocks.pop()
                tag = "{% endif %}"
            else:
                expected = f"end {open_blocks[-1][0]} first" if open_blocks else "no block is open"
                raise MarkerError(f"{where}:{number}: end {name} does not close an open block ({expected}).")
            pieces.append(("".join(plain), tag))
            plain = []
        elif single := LINE_MARKER.fullmatch(content):
            name = option(single["option"], number)
            pieces.append(("".join(plain), f"{{% if cookiecutter.{name} %}}"))
            pieces.append((single["line"] + line[len(content) :], "{% endif %}"))
            plain = []
        elif STRAY_MARKER.search(content):
            raise MarkerError(
                f"{where}:{number}: a marker must be alone on its line (an end), or end a line of code (an only)."
            )
        else:
            plain.append(line)
    if open_blocks:
        name, number = open_blocks[-1]
        raise MarkerError(f"{where}:{number}: the block {name} is never closed (end {name}).")
    return [*pieces, ("".join(plain), "")]


def without_template_only(text: str) -> str:
    return TEMPLATE_ONLY_LINE.sub("", TEMPLATE_ONLY_SECTION.sub("", text))


def as_template(text: str, where: str = "<text>", options: frozenset[str] = OPTIONS) -> str:
    """``text`` as a Jinja template: option markers as conditionals (line numbers of ``where`` in errors), then
    template-only parts removed and placeholders put in, between the markers."""
    pieces = split_at_markers(text, where, options)
    return "".join(with_placeholders(without_template_only(plain)) + tag for plain, tag in pieces)


def project_readme(readme: str, project_readme: str) -> str:
    """The project's README template: ``project_readme`` with the sections it names taken from ``readme``."""

    def section(marker: re.Match) -> str:
        level = len(marker["level"])
        heading = rf"^{re.escape(marker['heading'])}\n.*?(?=^#{{1,{level}}} |\Z)"
        if not (found := re.search(heading, readme, re.MULTILINE | re.DOTALL)):
            raise MarkerError(f"{PROJECT_README}: README.md has no section {marker['heading']!r}.")
        return as_template(found.group().rstrip("\n") + "\n", "README.md")

    return README_SECTION.sub(section, project_readme)


def project_files() -> list[Path]:
    files = []
    for entry in map(Path, PROJECT):
        candidates = [entry] if entry.is_file() else sorted(p for p in entry.rglob("*") if p.is_file())
        ignored = [p for p in candidates if any(fnmatch(part, rule) for part in p.parts for rule in IGNORED)]
        files += [p for p in candidates if p not in TEMPLATE_ONLY and p not in ignored]
    return files


def main() -> None:
    shutil.rmtree(TARGET, ignore_errors=True)
    for source in project_files():
        target = TARGET / WORDS.sub(lambda match: PLACEHOLDERS[match.group()].replace(" ", ""), str(source))
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            text = source.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a binary file: copied as it is
            shutil.copyfile(source, target)
        else:
            try:
                target.write_text(as_template(text, str(source)), encoding="utf-8")
            except MarkerError as error:
                fail(error)
        shutil.copymode(source, target)
    try:
        readme = project_readme(Path("README.md").read_text(encoding="utf-8"), PROJECT_README.read_text("utf-8"))
    except MarkerError as error:
        fail(error)
    (TARGET / "README.md").write_text(readme, encoding="utf-8")


def fail(error: MarkerError) -> NoReturn:
    print(f"Error: {error} Nothing was generated.", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
    main()
