#!/usr/bin/env python3
"""The example of docs/compare.md, regenerated from the reproduction it names (issue 31's
reproduction 2: scenarios/throughput.toml as shipped, one run each with requests.jsonl; in B every
eighth batch is six times slower).

    python3 scripts/compare_example.py            # prints the excerpt
    python3 scripts/compare_example.py --write    # and replaces it in docs/compare.md
    python3 scripts/compare_example.py --batchlab target/debug/batchlab   # a binary already built

Virtual time and the bootstrap's fixed seed make the output the same for any build.

The excerpt is the table's header, its gated rows, and everything below the table, verbatim.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "compare.md")
START, END = "<!-- example:start -->", "<!-- example:end -->"
RELAX = ["--set", "expect.errors=>=0", "--set", "expect.completed=>=0"]


def main():
    if "--batchlab" in sys.argv:
        binary = os.path.abspath(sys.argv[sys.argv.index("--batchlab") + 1])
    else:
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
        binary = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "batchlab")
    tmp = tempfile.mkdtemp(prefix="batchlab-compare-example.")
    base, new = os.path.join(tmp, "base"), os.path.join(tmp, "new")
    run = [binary, "run", "scenarios/throughput.toml", "--quiet", "--requests-jsonl", *RELAX]
    subprocess.run([*run, "--output", base], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    slow = ["--set", "faults.slow={ every = 8 }", "--set", "faults.slow_factor=6"]
    subprocess.run([*run, *slow, "--output", new], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    o = subprocess.run([binary, "compare", base, new], cwd=tmp, capture_output=True, text=True)
    lines = o.stdout.replace(tmp + "/", "results/").splitlines()
    header = next(i for i, l in enumerate(lines) if l.startswith("benchmark "))
    end = next(i for i, l in enumerate(lines) if i > header + 1 and not l.strip())
    gated = [l for l in lines[header + 2:end] if l.split()[-1] in ("pass", "REGRESSION", "INCONCLUSIVE")]
    below = [l for l in lines[end:] if not l.startswith("  needs 2+") and not l.startswith("not judged")]
    text = "\n".join(["$ batchlab compare results/base results/new   # exit %d" % o.returncode, *lines[:header + 2],
                      *gated, "...", *below])
    block = f"{START}\n```text\n{text}\n```\n{END}"
    print(block)
    if "--write" in sys.argv:
        with open(DOC) as f:
            doc = f.read()
        if START not in doc:
            sys.exit(f"{DOC} has no {START} marker")
        doc = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: block, doc, flags=re.S)
        with open(DOC, "w") as f:
            f.write(doc)
        print(f"wrote {DOC}", file=sys.stderr)


if __name__ == "__main__":
    main()
