#!/usr/bin/env python3
"""CI's mutant selection on a landing of several commits (`scripts/mutants.py --landed`, as
`.ci/run` calls it): in a throwaway clone, a branch records where it started (`--mark-landed`),
then makes three commits (two source files, then docs only), and the selection must hold the
variants of both source files. A `.ci/landed` that names no ancestor of HEAD, or none at all,
selects every variant. Standard library only; a few seconds.

    python3 scripts/test_mutants_landed.py
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cwd, *args, check=True):
    r = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def git(cwd, *args):
    return run(cwd, "git", "-c", "user.name=t", "-c", "user.email=t@t", *args).stdout.strip()


def selected(clone, *args):
    """The variant names `mutants.py ARGS --list` prints (each line `NAME  [FILE]  cargo test ...`)."""
    out = run(clone, sys.executable, "scripts/mutants.py", *args, "--list").stdout
    return {m.group(1) for m in re.finditer(r"^(.+?)  \[[^\]]+\]  cargo test ", out, re.M)}, out


def variants(clone):
    scope = {"__name__": "mutants_under_test", "__file__": os.path.join(clone, "scripts/mutants.py")}
    with open(os.path.join(clone, "scripts/mutants.py")) as f:
        exec(compile(f.read(), "mutants.py", "exec"), scope)
    return scope["MUTANTS"]


def touch(clone, path, text):
    with open(os.path.join(clone, path), "a") as f:
        f.write(text)


class LandedSelection(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="batchlab-landed-")
        self.clone = os.path.join(self.dir, "clone")
        run(self.dir, "git", "clone", "-q", "--no-checkout", ROOT, self.clone)
        git(self.clone, "checkout", "-q", "HEAD")
        git(self.clone, "checkout", "-q", "-b", "change")
        # The scripts under test as they are in the working tree, not only as committed.
        for f in ("scripts/mutants.py", ".ci/run"):
            shutil.copy(os.path.join(ROOT, f), os.path.join(self.clone, f))
        git(self.clone, "commit", "-q", "-am", "the scripts under test", "--allow-empty")
        self.start = git(self.clone, "rev-parse", "HEAD")
        # A branch starts: it records where (what a session runs first).
        run(self.clone, sys.executable, "scripts/mutants.py", "--mark-landed")
        git(self.clone, "add", ".ci/landed")
        git(self.clone, "commit", "-q", "-m", "ci: the change starts here")
        self.all = variants(self.clone)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_ci_runs_the_landed_selection(self):
        with open(os.path.join(self.clone, ".ci/run")) as f:
            text = f.read()
        self.assertIn("python3 scripts/mutants.py --landed --budget-minutes", text)
        self.assertNotIn("HEAD~1", text)

    def test_a_landing_of_several_commits_selects_every_changed_files_variants(self):
        with open(os.path.join(self.clone, ".ci/landed")) as f:
            self.assertEqual(f.readline().strip(), self.start)
        touch(self.clone, "src/serve/core.rs", "\n// one\n")
        git(self.clone, "commit", "-q", "-am", "serve")
        touch(self.clone, "src/batcher/core/mod.rs", "\n// two\n")
        git(self.clone, "commit", "-q", "-am", "batcher")
        touch(self.clone, "docs/testing.md", "\n")
        git(self.clone, "commit", "-q", "-am", "docs only, last")
        names, out = selected(self.clone, "--landed")
        for changed in ("src/serve/core.rs", "src/batcher/core/mod.rs"):
            of_file = {m[0] for m in self.all if m[1] == changed}
            self.assertTrue(of_file, f"no variant of {changed} to select")
            self.assertLessEqual(of_file, names, f"{changed}'s variants missing:\n{out}")
        # A variant of an unchanged file with an unchanged test is not selected.
        untouched = [m[0] for m in self.all if m[1] == "src/sys/stamped.rs"]
        self.assertTrue(untouched and not set(untouched) & names, out)
        self.assertLess(len(names), len(self.all))
        # What CI did before: the last commit only, docs, so no source variant at all.
        last_only, _ = selected(self.clone, "--changed", "HEAD~1")
        self.assertFalse({m[0] for m in self.all if m[1].startswith("src/")} & last_only)

    def test_a_start_that_is_not_an_ancestor_selects_every_variant(self):
        git(self.clone, "checkout", "-q", "-b", "elsewhere", self.start)
        git(self.clone, "commit", "-q", "--allow-empty", "-m", "never landed")
        elsewhere = git(self.clone, "rev-parse", "HEAD")
        git(self.clone, "checkout", "-q", "change")
        with open(os.path.join(self.clone, ".ci/landed"), "w") as f:
            f.write(elsewhere + "\n")
        git(self.clone, "commit", "-q", "-am", "a start from a history that is not this one")
        names, out = selected(self.clone, "--landed")
        self.assertIn("not an ancestor of HEAD", out)
        self.assertEqual(names, {m[0] for m in self.all})

    def test_no_landed_file_or_an_unknown_commit_selects_every_variant(self):
        for content in (None, "0123456789abcdef0123456789abcdef01234567\n"):
            path = os.path.join(self.clone, ".ci/landed")
            if content is None:
                os.remove(path)
            else:
                with open(path, "w") as f:
                    f.write(content)
            names, out = selected(self.clone, "--landed")
            self.assertEqual(names, {m[0] for m in self.all}, out)

    def test_a_spent_budget_starts_nothing_and_lists_what_it_did_not_run(self):
        # The change adds an entry: it is the change's own check, listed first.
        touch(self.clone, "src/serve/core.rs", "\n// one\n")
        git(self.clone, "commit", "-q", "-am", "serve")
        r = run(self.clone, sys.executable, "scripts/mutants.py", "--landed", "--budget-minutes", "0")
        names = re.findall(r"^  NOT RUN  (.+)$", r.stdout, re.M)
        expected = {m[0] for m in self.all if m[1] == "src/serve/core.rs"}
        self.assertTrue(expected)
        self.assertLessEqual(expected, set(names), r.stdout)
        self.assertIn("0 of 0 variant(s) run caught", r.stdout)
        self.assertEqual(r.returncode, 0, r.stdout)
        bad = run(self.clone, sys.executable, "scripts/mutants.py", "--landed", "--budget-minutes", "x", check=False)
        self.assertEqual(bad.returncode, 2, bad.stdout)


if __name__ == "__main__":
    unittest.main()
