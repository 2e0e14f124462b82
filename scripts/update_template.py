#!/usr/bin/env python
"""Take the template's later commits into this project (`make update-template`), or say whether it lacks any
(`make check-template`), with cruft and the record in .cruft.json.

Why more than `cruft update`: cruft merges the template's changes with `git apply -3`, which needs the template's
old version of each file (the base of the three-way merge) among this repository's objects. A fresh clone,
`git gc`, or edits made before the first commit leave them out; git then falls back to `git apply --reject`, leaves
the template's changes in `*.rej` files, and cruft still exits 0. So this script first bakes the template at the
commit that .cruft.json records, with its answers, and writes those files into git's objects; after the update, it
fails naming the files wherever a conflict or a `*.rej` file is left (cruft exits 0 then too).

    python scripts/update_template.py [--check] [--checkout template]
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import cruft
from cruft.exceptions import CruftError

STATE = Path(".cruft.json")
NO_STATE = (
    "Error: there is no .cruft.json here, the record of the template's commit and of your answers that an update "
    "needs. A project made with `cruft create` has one (commit it); README.md (Updating from the template) says how "
    "to link a project made without cruft. The template's own repository has none: it is the template."
)


def git(*args: str, **options) -> str:
    result = subprocess.run(["git", *args], capture_output=True, text=True, check=False, **options)
    if result.returncode != 0:
        sys.exit(f"Error: git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def store_merge_base(state: dict) -> None:
    """Write the files of the template at the recorded commit, baked with the recorded answers, into git's objects:
    the base that ``git apply -3`` looks up by the ids in cruft's diff."""
    (context,) = state["context"].values()  # the answers, under the name of the tool that asked them
    # As cruft update bakes it: without the private keys (the template's URL, its commit...), which are not answers.
    answers = {key: value for key, value in context.items() if not key.startswith("_")}
    with tempfile.TemporaryDirectory() as temporary:
        baked = cruft.create(
            state["template"],
            Path(temporary),
            checkout=state["commit"],
            extra_context=answers,
            directory=state.get("directory"),
        )
        files = [str(path) for path in baked.rglob("*") if path.is_file()]
        git("hash-object", "-w", "--stdin-paths", input="\n".join(files) + "\n")


def left_unmerged() -> str | None:
    """One paragraph naming the files that the update left unmerged (conflict markers, ``*.rej``), or None."""
    conflicts = git("diff", "--name-only", "--diff-filter=U").splitlines()
    rejected = git("ls-files", "--others", "--", "*.rej").splitlines()
    if not conflicts and not rejected:
        return None
    where = []
    if conflicts:
        where.append(f"in {', '.join(conflicts)} git's conflict markers (<<<<<<< ours ... >>>>>>> theirs) show both")
    if rejected:
        where.append(f"{', '.join(rejected)} hold the template's changes that could not be merged (apply them by hand)")
    remove = "every marker (`git diff --check HEAD` shows any left)" + (" and the .rej files" if rejected else "")
    return (
        "Error: the template changed lines that you changed too (or added a file that you added too): "
        f"{'; '.join(where)}. Keep what you want, remove {remove}, then git add and commit."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether the template has changes to take")
    parser.add_argument("--checkout", default="template", help="the template's branch for cruft (default: template)")
    args = parser.parse_args()
    if not STATE.is_file():
        sys.exit(NO_STATE)
    try:
        if args.check:
            if not cruft.check(Path("."), checkout=args.checkout):
                print("In this project: make update-template")  # after cruft's own advice, which names cruft's command
                sys.exit(1)
            return
        store_merge_base(json.loads(STATE.read_text(encoding="utf-8")))
        if not cruft.update(Path("."), checkout=args.checkout, skip_apply_ask=True):
            sys.exit(1)  # cruft has said why (uncommitted or untracked files, say)
    except CruftError as error:  # the template out of reach, say: cruft's own message, as its command shows it
        error.show()
        sys.exit(error.exit_code)
    if problem := left_unmerged():
        sys.exit(problem)


if __name__ == "__main__":
    main()
