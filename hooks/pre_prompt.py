"""Assemble the template from the working project at the top of this repo, so there is one copy of the code.

cookiecutter runs this hook in its own temporary copy of the repo, before it asks any question. The hook
copies the project files into ``{{cookiecutter.project_slug|slugify}}/``, renames the package folder, and puts a
placeholder wherever the project's name, slug, package, description or author stands. Anything that already
looks like Jinja (a GitHub Actions ``${{ ... }}``) is wrapped in ``{% raw %}`` so it comes through unchanged.
Template machinery (cookiecutter.json, hooks/, .ci/, tests/test_template.py) is not copied.
"""

import re
import shutil
from pathlib import Path

# slugify keeps a slug like "../x" or "a/b" from creating folders outside, or above, the project folder;
# pre_gen_project.py then refuses any slug that slugify would have changed. An empty slug (from an empty
# project name) still needs a folder name, or cookiecutter fails on the output folder before that hook can say why.
TARGET = Path("{{cookiecutter.project_slug|slugify or 'unnamed-project'}}")
PROJECT = [".github", ".gitignore", "Makefile", "README.md", "benchmarks", "configs", "pyproject.toml", "scripts"]
PROJECT += ["src", "tests"]
TEMPLATE_ONLY = {Path("tests/test_template.py")}
SKIPPED_NAMES = {"__pycache__", ".pytest_cache", ".ruff_cache"}
# The project's own words -> placeholders; longer strings first, so an author name wins over the project name.
PLACEHOLDERS = {
    "MNIST Lightning contributors": "{{ cookiecutter.author_name }}",
    "A PyTorch Lightning project template: SimpleNN on MNIST, from .to(device) to the Trainer.": (
        "{{ cookiecutter.description }}"
    ),
    "MNIST Lightning": "{{ cookiecutter.project_name }}",
    "mnist-lightning": "{{ cookiecutter.project_slug }}",
    "mnist_lightning": "{{ cookiecutter.package_name }}",
}
WORDS = re.compile("|".join(re.escape(word) for word in PLACEHOLDERS))
# Parts of the repo's own files that only concern the template: README sections and marked lines.
TEMPLATE_ONLY_SECTION = re.compile(r"<!-- template-only -->.*?<!-- /template-only -->\n?", re.DOTALL)
TEMPLATE_ONLY_LINE = re.compile(r"^.*(?:# template-only|<!-- template-only row -->)\n", re.MULTILINE)
JINJA_MARKERS = ("{{", "}}", "{%", "%}", "{#", "#}")


def verbatim(text: str) -> str:
    """Text that Jinja must leave alone."""
    return f"{{% raw %}}{text}{{% endraw %}}" if any(marker in text for marker in JINJA_MARKERS) else text


def as_template(text: str) -> str:
    text = TEMPLATE_ONLY_LINE.sub("", TEMPLATE_ONLY_SECTION.sub("", text))
    pieces, position = [], 0
    for match in WORDS.finditer(text):
        pieces += [verbatim(text[position : match.start()]), PLACEHOLDERS[match.group()]]
        position = match.end()
    return "".join([*pieces, verbatim(text[position:])])


def project_files() -> list[Path]:
    files = []
    for entry in map(Path, PROJECT):
        candidates = [entry] if entry.is_file() else sorted(p for p in entry.rglob("*") if p.is_file())
        files += [p for p in candidates if p not in TEMPLATE_ONLY and not SKIPPED_NAMES & set(p.parts)]
    return files


def main() -> None:
    shutil.rmtree(TARGET, ignore_errors=True)
    for source in project_files():
        target = TARGET / WORDS.sub(lambda match: PLACEHOLDERS[match.group()].replace(" ", ""), str(source))
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            target.write_text(as_template(source.read_text(encoding="utf-8")), encoding="utf-8")
        except UnicodeDecodeError:  # a binary file: copied as it is
            shutil.copyfile(source, target)
        shutil.copymode(source, target)


if __name__ == "__main__":
    main()
